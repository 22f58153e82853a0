//! Where the next request starts and whom it goes to: the heights already covered, the first
//! gap below a limit, and the peer chosen to fill it.

use super::*;

impl RangeSync {
    /// Whether `height` is handed out, buffered or requested.
    pub(super) fn covered_until(&self, height: u64) -> Option<u64> {
        let awaiting = self.awaiting_import.is_some_and(|(h, _)| h == height);
        if awaiting || self.buffer.contains_key(&height) {
            return Some(height.saturating_add(1));
        }
        self.in_flight
            .values()
            .find(|r| r.start <= height && height < r.end())
            .map(InFlight::end)
    }

    /// The lowest height in `head + 1 ..= limit` that nobody is taking care of.
    pub(super) fn first_gap(&self, limit: u64) -> Option<u64> {
        let mut height = self.head_height.checked_add(1)?;
        while height <= limit {
            match self.covered_until(height) {
                Some(next) if next > height => height = next,
                Some(_) => return None,
                None => return Some(height),
            }
        }
        None
    }

    /// End (exclusive) of the request starting at the gap `start`: one batch, not past
    /// `limit`, not into the next covered height.
    pub(super) fn gap_end(&self, start: u64, limit: u64) -> u64 {
        let mut end = start
            .saturating_add(self.config.batch_size)
            .min(limit.saturating_add(1));
        if let Some((height, _)) = self.buffer.range(start..).next() {
            end = end.min(*height);
        }
        for request in self.in_flight.values().filter(|r| r.start > start) {
            end = end.min(request.start);
        }
        if let Some((height, _)) = self.awaiting_import.filter(|(h, _)| *h > start) {
            end = end.min(height);
        }
        end
    }

    /// The least loaded peer that claims `start`, is not backed off at `now` and has not failed
    /// it; if all such peers failed it, their failures are forgotten and they are tried again.
    pub(super) fn choose_peer(&mut self, start: u64, now: Time) -> Option<NodeId> {
        let pick = |skip_failed: bool| {
            self.peers
                .iter()
                .filter(|(_, head)| self.claimed(head) >= start && head.pruned_below <= start)
                .filter(|(id, _)| !self.is_backed_off(id, now))
                .filter(|(id, _)| !(skip_failed && self.failed.contains(&(start, **id))))
                .map(|(id, _)| (self.in_flight_to(id), *id))
                .filter(|(load, _)| *load < self.config.max_in_flight_per_peer)
                .min()
                .map(|(_, id)| id)
        };
        if let Some(peer) = pick(true) {
            return Some(peer);
        }
        let peer = pick(false)?;
        self.failed.retain(|(h, _)| *h != start);
        Some(peer)
    }
}

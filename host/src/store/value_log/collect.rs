//! Reclaiming the space of overwritten values: a segment under half live has its live records
//! copied into the collector's own segment, then its pointers moved, after which it empties.

use super::*;

impl ValueLog {
    /// The closed segment with the least live share, if under half of it is live.
    fn victim(&self) -> Option<u32> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state
            .uses
            .iter()
            .filter(|(id, u)| {
                **id != state.active.id
                    && state.collecting != Some(**id)
                    && !state.stuck.contains(id)
                    && u.size > 0
                    && u.bytes < u.size / 2
            })
            .min_by_key(|(_, u)| {
                // Live share in thousandths; sizes are far below u64::MAX / 1000.
                u.bytes
                    .saturating_mul(1000)
                    .checked_div(u.size)
                    .unwrap_or(0)
            })
            .map(|(id, _)| *id)
    }

    /// Reclaims one segment under half live: copies its live records, `budget` bytes at a
    /// time, into the collector's own segment and syncs it without holding the commit lock,
    /// then, under it, moves each pointer that still points at the old record. Returns whether
    /// a segment was collected (its emptiness is durable, and the file gone, after the next
    /// flush and [`Self::unlink`]).
    pub fn collect(&self, tree: &sled::Tree, budget: usize) -> Result<bool, StoreError> {
        let mut collector = self
            .collector
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(victim) = self.victim() else {
            return Ok(false);
        };
        let path = self.dir.join(segment_name(victim));
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // Emptied and removed since it was chosen: nothing left to move.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(io_err(&path, "cannot read a segment to collect", &e)),
        };
        let mut offset = 0usize;
        let mut records = Vec::new();
        while let Some((key, _, total)) = bytes.get(offset..).and_then(parse_record) {
            records.push((key, offset, total));
            offset = offset.saturating_add(total);
        }
        let mut start = 0usize;
        while let Some(rest) = records.get(start..).filter(|rest| !rest.is_empty()) {
            let mut size = 0usize;
            let take = rest
                .iter()
                .take_while(|(_, _, total)| {
                    let before = size;
                    size = size.saturating_add(*total);
                    before < budget
                })
                .count()
                .max(1);
            start = start.saturating_add(take);
            // Copy the records still pointed at (checked again under the lock below).
            let mut moves = Vec::new();
            for (key, offset, total) in rest.iter().take(take) {
                let here = Pointer {
                    segment: victim,
                    offset: u64::try_from(*offset).unwrap_or(u64::MAX),
                    len: u32::try_from(*total).unwrap_or(u32::MAX),
                };
                let current = tree
                    .get(pointer_key(key))
                    .map_err(|e| sled_err(&self.dir, &e))?
                    .and_then(|p| Pointer::decode(&p));
                if current != Some(here) {
                    continue;
                }
                let record = bytes
                    .get(*offset..offset.saturating_add(*total))
                    .unwrap_or_default();
                let to = self.append_collected(&mut collector, record)?;
                moves.push((key, here, to));
            }
            let Some(target) = collector.as_mut() else {
                continue;
            };
            if moves.is_empty() {
                continue;
            }
            let target_path = self.dir.join(segment_name(target.id));
            target
                .file
                .sync_data()
                .map_err(|e| io_err(&target_path, "cannot sync value-log segment", &e))?;
            // Under the commit lock at normal priority (see `at_normal_priority`).
            crate::thread_priority::at_normal_priority(|| {
                let mut staged = self.stage();
                let mut sled_batch = sled::Batch::default();
                for (key, from, to) in moves {
                    staged.relocate(tree, key, from, to, &mut sled_batch)?;
                }
                staged.apply(tree, sled_batch)
            })?;
            if target.len >= SEGMENT_BYTES {
                // Full: the next copy starts a new one.
                *collector = None;
                self.state
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .collecting = None;
            }
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.uses.get(&victim).is_some_and(|u| u.count == 0) {
            // Emptied while it was the collector's own segment: nothing was left to doom it.
            state.uses.remove(&victim);
            state.doomed.push(victim);
        } else if let Some(left) = state.uses.get(&victim).filter(|u| u.count > 0) {
            tracing::warn!(
                segment = %path.display(),
                live = left.count,
                "a value-log segment keeps live values the collector cannot read (a damaged \
                 record?); it is left as it is"
            );
            state.stuck.insert(victim);
        }
        Ok(true)
    }

    /// Appends a copied `record` to the collector's segment (starting one if none is open).
    fn append_collected(
        &self,
        collector: &mut Option<Active>,
        record: &[u8],
    ) -> Result<Pointer, StoreError> {
        if collector.is_none() {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let id = state.next_id;
            state.next_id = id.checked_add(1).ok_or_else(exhausted)?;
            *collector = Some(create_segment(&self.dir, id)?);
            state.collecting = Some(id);
        }
        let Some(target) = collector.as_mut() else {
            return Err(StoreError::Corrupt("the collector has no segment".into()));
        };
        target.append(&self.dir, record)
    }
}

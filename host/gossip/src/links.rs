//! What the engine keeps for spreading-tree (PlumTree-style) policies: the graft timer tuned
//! from measured gaps, and the per-peer budget of PRUNE / GRAFT items (sent and heard).
//!
//! The policy builds the tree ([`crate::policy::Policy::on_event`] hears duplicates, missing
//! messages and the peers' PRUNE / GRAFT); the engine only measures, times and bounds.

use std::collections::VecDeque;

use crate::Time;
use crate::policy::LinkControl;

const MS: Time = 1_000;
const SECOND: Time = 1_000_000;

/// Gaps remembered by [`GapTimer`].
pub const GAP_SAMPLES: usize = 64;

/// The graft timer: how long an announced message is waited for (its eager copy) before it is
/// pulled from the announcer and the link grafted. Tuned from the gaps measured between an
/// announce and the eager copy that followed it: 1.5 × their 90th percentile, within the
/// policy's bounds; the policy's longest before any gap was measured.
#[derive(Debug, Default)]
pub(crate) struct GapTimer {
    gaps: VecDeque<Time>,
}

impl GapTimer {
    /// An announced message arrived `gap` after its announce, while it was being waited for.
    pub(crate) fn sample(&mut self, gap: Time) {
        if self.gaps.len() >= GAP_SAMPLES {
            self.gaps.pop_front();
        }
        self.gaps.push_back(gap);
    }

    /// The timer under `control`'s bounds.
    pub(crate) fn timer(&self, control: &LinkControl) -> Time {
        let min = Time::from(control.graft_min_ms).saturating_mul(MS);
        let max = Time::from(control.graft_max_ms).saturating_mul(MS).max(min);
        let mut sorted: Vec<Time> = self.gaps.iter().copied().collect();
        if sorted.is_empty() {
            return max;
        }
        sorted.sort_unstable();
        let rank = sorted.len().saturating_mul(9).div_ceil(10).max(1);
        let p90 = sorted.get(rank.saturating_sub(1)).copied().unwrap_or(max);
        p90.saturating_add(p90 / 2).clamp(min, max)
    }
}

/// A token bucket of link-control items for one peer and one direction: `burst` at once, then
/// `per_sec`. What a hostile peer's flood of PRUNE / GRAFT can make the policy hear (and what
/// this node sends) is bounded by it.
#[derive(Debug, Default)]
pub(crate) struct LinkBudget {
    used: u32,
    refilled_at: Time,
}

impl LinkBudget {
    /// Takes one token if there is one.
    pub(crate) fn take(&mut self, now: Time, burst: u32, per_sec: u32) -> bool {
        let elapsed = now.saturating_sub(self.refilled_at);
        let refill = elapsed.saturating_mul(Time::from(per_sec)) / SECOND;
        if refill > 0 {
            self.used = self
                .used
                .saturating_sub(u32::try_from(refill).unwrap_or(u32::MAX));
            self.refilled_at = now;
        }
        if self.used >= burst {
            return false;
        }
        self.used = self.used.saturating_add(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROL: LinkControl = LinkControl {
        graft_min_ms: 20,
        graft_max_ms: 500,
        announce_first_above: 1024,
    };

    #[test]
    fn the_timer_follows_measured_gaps_within_bounds() {
        let mut t = GapTimer::default();
        assert_eq!(t.timer(&CONTROL), 500 * MS);
        for _ in 0..GAP_SAMPLES {
            t.sample(40 * MS);
        }
        assert_eq!(t.timer(&CONTROL), 60 * MS);
        for _ in 0..GAP_SAMPLES {
            t.sample(MS);
        }
        assert_eq!(t.timer(&CONTROL), 20 * MS);
        for _ in 0..GAP_SAMPLES {
            t.sample(10 * SECOND);
        }
        assert_eq!(t.timer(&CONTROL), 500 * MS);
    }

    #[test]
    fn the_budget_allows_a_burst_then_a_rate() {
        let mut b = LinkBudget::default();
        let taken = (0..100).filter(|_| b.take(0, 8, 4)).count();
        assert_eq!(taken, 8);
        assert!(!b.take(SECOND / 8, 8, 4));
        assert!(b.take(SECOND / 4, 8, 4));
        assert!(!b.take(SECOND / 4, 8, 4));
        let later = (0..100).filter(|_| b.take(10 * SECOND, 8, 4)).count();
        assert_eq!(later, 8);
    }
}

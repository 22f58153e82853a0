//! Modules the chain needed and did not have ready, whichever branch needed them: what the
//! upgrade agent fetches besides the modules the head's schedule names. A side branch that
//! schedules a module the head does not is executed (fork choice, range sync, a state
//! replay) before it can win; without this list such a module would never be fetched and the
//! node could never follow the heavier branch that needs it — a split.
//!
//! Sans-IO (time is passed in) and bounded: at most [`MAX_WANTED`] modules, the least recently
//! needed dropped first, and a module not needed again within [`WANTED_FOR`] is forgotten (the
//! branch that needed it was abandoned; a branch still offered needs it again on every try).

use std::time::{Duration, Instant};

use crate::hashes::ModuleHash;
use crate::runtime::Kind;

/// Most modules wanted at once. Only a branch of blocks sealed by the authorities can
/// schedule a module, so this is head-room, not a limit honest chains meet.
pub const MAX_WANTED: usize = 16;

/// How long a module stays wanted after the chain last needed it.
pub const WANTED_FOR: Duration = Duration::from_secs(10 * 60);

/// One module the chain needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wanted {
    kind: Kind,
    hash: ModuleHash,
    /// The lowest height that needed it.
    height: u64,
    /// When it was last needed.
    last: Instant,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct WantedModules {
    entries: Vec<Wanted>,
}

impl WantedModules {
    /// A block at `height` needed the `kind` module `hash` at `now` and it was not ready.
    /// Returns whether it was not wanted already (worth a warning).
    pub fn needed(&mut self, kind: Kind, hash: ModuleHash, height: u64, now: Instant) -> bool {
        if let Some(wanted) = self.entries.iter_mut().find(|w| w.hash == hash) {
            wanted.last = wanted.last.max(now);
            wanted.height = wanted.height.min(height);
            return false;
        }
        if self.entries.len() >= MAX_WANTED
            && let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, w)| w.last)
                .map(|(i, _)| i)
        {
            self.entries.swap_remove(oldest);
        }
        self.entries.push(Wanted {
            kind,
            hash,
            height,
            last: now,
        });
        true
    }

    /// The wanted modules still to fetch at `now`, as (kind, hash, lowest height that needed
    /// it): those `is_ready` denies, needed within [`WANTED_FOR`]. The others are forgotten.
    pub fn pending(
        &mut self,
        now: Instant,
        is_ready: impl Fn(&ModuleHash) -> bool,
    ) -> Vec<(Kind, ModuleHash, u64)> {
        self.entries
            .retain(|w| !is_ready(&w.hash) && now.saturating_duration_since(w.last) < WANTED_FOR);
        self.entries
            .iter()
            .map(|w| (w.kind, w.hash, w.height))
            .collect()
    }
}

/// The module of `missing` (sorted) to fetch after `last`: the next one in hash order,
/// wrapping around, so a module no peer serves never keeps the others from being fetched.
pub fn next_in_turn(missing: &[ModuleHash], last: Option<&ModuleHash>) -> Option<ModuleHash> {
    last.and_then(|last| missing.iter().find(|h| *h > last))
        .or_else(|| missing.first())
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: ModuleHash = ModuleHash([7; 32]);

    #[test]
    fn a_needed_module_is_pending_until_ready_and_warned_about_once() {
        let now = Instant::now();
        let mut wanted = WantedModules::default();
        assert!(wanted.needed(Kind::Deposits, X, 9, now));
        assert!(!wanted.needed(Kind::Deposits, X, 5, now));
        assert_eq!(wanted.pending(now, |_| false), vec![(Kind::Deposits, X, 5)]);
        assert_eq!(wanted.pending(now, |h| *h == X), vec![]);
        // Ready, then lost (say, pruned): needed again, wanted again.
        assert!(wanted.needed(Kind::Deposits, X, 5, now));
    }

    #[test]
    fn a_module_not_needed_again_within_the_window_is_forgotten() {
        let start = Instant::now();
        let mut wanted = WantedModules::default();
        wanted.needed(Kind::Deposits, X, 5, start);
        let later = start + WANTED_FOR - Duration::from_secs(1);
        wanted.needed(Kind::Deposits, X, 5, later);
        assert_eq!(
            wanted
                .pending(later + Duration::from_secs(2), |_| false)
                .len(),
            1
        );
        assert_eq!(wanted.pending(later + WANTED_FOR, |_| false), vec![]);
    }

    #[test]
    fn the_list_stays_bounded_and_keeps_the_most_recently_needed() {
        let start = Instant::now();
        let mut wanted = WantedModules::default();
        for i in 0..100_000u32 {
            let mut hash = [0; 32];
            hash[..4].copy_from_slice(&i.to_be_bytes());
            let now = start + Duration::from_millis(u64::from(i));
            wanted.needed(Kind::Deposits, ModuleHash(hash), 1, now);
            assert!(wanted.entries.len() <= MAX_WANTED);
        }
        let now = start + Duration::from_millis(100_000);
        let pending = wanted.pending(now, |_| false);
        assert_eq!(pending.len(), MAX_WANTED);
        let newest = 100_000u32 - MAX_WANTED as u32;
        assert!(
            pending.iter().all(|(_, h, _)| {
                u32::from_be_bytes([h.0[0], h.0[1], h.0[2], h.0[3]]) >= newest
            })
        );
    }

    #[test]
    fn fetches_take_turns_so_an_unobtainable_module_does_not_block_the_others() {
        let (a, b, c) = (
            ModuleHash([1; 32]),
            ModuleHash([2; 32]),
            ModuleHash([3; 32]),
        );
        let missing = [a, b, c];
        assert_eq!(next_in_turn(&missing, None), Some(a));
        assert_eq!(next_in_turn(&missing, Some(&a)), Some(b));
        assert_eq!(next_in_turn(&missing, Some(&c)), Some(a));
        // The last one fetched is gone from the list (ready): the next after it.
        assert_eq!(next_in_turn(&[a, c], Some(&b)), Some(c));
        assert_eq!(next_in_turn(&[], Some(&b)), None);
    }
}

//! The node's one wall clock and its one rule for blocks from slots that have not started.
//!
//! Everything that reads the time of day reads [`unix_ms`]; everything that decides whether a
//! block's slot is in the future uses [`early_by_ms`] with [`CLOCK_SKEW_MS`], and whether that
//! is the sender's fault with [`FAR_FUTURE_MS`]: the gossip intake, the chain worker's import
//! (every path: gossip, range sync, branch fetches) and range sync's bound on peers' head claims.
//! This module imports nothing from the crate, so every layer may import it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How far ahead of our clock a peer's clock may be: a block whose slot starts within this
/// is accepted.
pub const CLOCK_SKEW_MS: u64 = 500;

/// How far beyond our clock a block's slot may start before sending it is the sender's fault.
/// Closer than this the block is only early — our own clock may be the one behind, and an
/// honest peer must not be banned for our drift — so it is not held against its sender;
/// beyond it, no honest clock explains it: the block was made up in advance.
pub const FAR_FUTURE_MS: u64 = 10_000;

/// The offset [`unix_ms`] adds to the system clock, in ms (0 unless a test skews it).
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Makes this process's [`unix_ms`] run `skew_ms` ahead of the system clock (behind if
/// negative): `modnode run --clock-skew-ms`, for testnets that exercise skewed clocks.
pub fn set_clock_skew_ms(skew_ms: i64) {
    OFFSET_MS.store(skew_ms, Ordering::Relaxed);
}

/// Milliseconds since the Unix epoch (plus the skew [`set_clock_skew_ms`] set, if any).
pub fn unix_ms() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let skew = OFFSET_MS.load(Ordering::Relaxed);
    if skew >= 0 {
        now.saturating_add(skew.unsigned_abs())
    } else {
        now.saturating_sub(skew.unsigned_abs())
    }
}

/// The latest instant (Unix ms) a slot may start at `now_ms` and its blocks still be taken:
/// `now_ms` plus the skew allowance. The slot containing it is the current slot as far as
/// blocks are concerned, and the highest head height that can exist now.
pub fn latest_slot_start_ms(now_ms: u64) -> u64 {
    now_ms.saturating_add(CLOCK_SKEW_MS)
}

/// Whether a block whose slot starts at `slot_start_ms` is early at `now_ms` (its slot starts
/// beyond [`latest_slot_start_ms`]), and if so by how many milliseconds its slot starts after
/// `now_ms`.
pub fn early_by_ms(slot_start_ms: u64, now_ms: u64) -> Option<u64> {
    (slot_start_ms > latest_slot_start_ms(now_ms)).then(|| slot_start_ms.saturating_sub(now_ms))
}

/// Whether a block early by `ahead_ms` (from [`early_by_ms`]) is its sender's fault: its slot
/// starts more than [`FAR_FUTURE_MS`] from now.
pub fn is_far_future(ahead_ms: u64) -> bool {
    ahead_ms > FAR_FUTURE_MS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::genesis::Genesis;

    #[test]
    fn a_slot_starting_within_the_skew_is_taken_and_one_after_it_is_early() {
        let now = 1_000_000;
        assert_eq!(early_by_ms(now, now), None);
        assert_eq!(early_by_ms(now + CLOCK_SKEW_MS, now), None);
        assert_eq!(
            early_by_ms(now + CLOCK_SKEW_MS + 1, now),
            Some(CLOCK_SKEW_MS + 1)
        );
        assert!(!is_far_future(FAR_FUTURE_MS));
        assert!(is_far_future(FAR_FUTURE_MS + 1));
        assert_eq!(early_by_ms(u64::MAX, u64::MAX), None);
    }

    /// The rule by slot start is the rule the chain worker applied by slot number
    /// (`slot > genesis.slot_at(now + CLOCK_SKEW_MS)`) for every slot after genesis.
    #[test]
    fn the_rule_by_slot_start_is_the_rule_by_current_slot() {
        let mut genesis = Genesis::dev();
        genesis.genesis_time_ms = 1_000_000;
        genesis.slot_ms = 700;
        for now in (999_000..1_010_000).step_by(37) {
            for slot in 1..30 {
                let by_slot = slot > genesis.slot_at(latest_slot_start_ms(now));
                let early = early_by_ms(genesis.slot_start_ms(slot), now);
                assert_eq!(early.is_some(), by_slot, "slot {slot} at {now}");
                if let Some(ahead) = early {
                    assert_eq!(ahead, genesis.slot_start_ms(slot) - now);
                }
            }
        }
    }
}

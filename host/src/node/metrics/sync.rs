//! Where the head is against the slot clock, and whether the node is ready (`/readyz`'s verdict
//! as a gauge), on `/metrics`: what "falling behind" alerts and the head-lag panel read.

use super::Snapshot;

/// The figures of one scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncFigures {
    /// The head block's slot.
    pub head_slot: u64,
    /// The wall-clock slot now.
    pub wall_slot: u64,
    /// Whether `/readyz` would answer ok.
    pub ready: bool,
}

/// `modnode_head_slot`, `modnode_wall_clock_slot`, `modnode_head_lag_slots` (0 when the head
/// is at or ahead of the clock) and `modnode_ready` as OpenMetrics lines, without the closing
/// `# EOF`.
pub fn render_sync(f: SyncFigures) -> String {
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let snapshot = Snapshot {
        counters: [],
        gauges: [
            ("head_slot", "Slot of the head block", as_i64(f.head_slot)),
            (
                "wall_clock_slot",
                "The slot the wall clock is in",
                as_i64(f.wall_slot),
            ),
            (
                "head_lag_slots",
                "Slots the head is behind the wall clock",
                as_i64(f.wall_slot.saturating_sub(f.head_slot)),
            ),
            (
                "ready",
                "1 when /readyz answers ok (synced, near the clock, not restoring)",
                i64::from(f.ready),
            ),
        ],
    };
    super::without_eof(snapshot.encode_with_prefix("modnode"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_clock_minus_the_head_and_never_negative() {
        let text = render_sync(SyncFigures {
            head_slot: 90,
            wall_slot: 100,
            ready: false,
        });
        for line in [
            "modnode_head_lag_slots 10",
            "modnode_wall_clock_slot 100",
            "modnode_ready 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
        let ahead = render_sync(SyncFigures {
            head_slot: 101,
            wall_slot: 100,
            ready: true,
        });
        assert!(
            ahead.lines().any(|l| l == "modnode_head_lag_slots 0"),
            "{ahead}"
        );
        assert!(ahead.lines().any(|l| l == "modnode_ready 1"), "{ahead}");
    }
}

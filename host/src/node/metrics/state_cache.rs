//! The state cache's figures on `/metrics` (`modnode_state_cache_*`): accounted, allocator and
//! resident bytes side by side, and the cache's counters.

use super::{Snapshot, as_i64};

/// The state cache's figures as OpenMetrics lines (prefix `modnode_state_cache_`), without the
/// closing `# EOF`: accounted, allocator-reported and resident bytes side by side, the
/// unexplained gap, and the cache's counters.
pub fn render_state_cache(m: &crate::state_cache::CacheMetrics) -> String {
    let snapshot = Snapshot {
        gauges: [
            ("states", "States cached", as_i64(m.states as u64)),
            (
                "accounted_bytes",
                "Bytes the budget counts (states beyond the head, reservations)",
                as_i64(m.accounted_bytes),
            ),
            (
                "reserved_bytes",
                "Bytes reserved for regenerations in flight",
                as_i64(m.reserved_bytes),
            ),
            (
                "head_bytes",
                "Bytes of the head state",
                as_i64(m.head_bytes),
            ),
            ("max_bytes", "The budget", as_i64(m.max_bytes)),
            (
                "allocator_bytes",
                "Live heap bytes the allocator reports",
                as_i64(m.allocator_bytes),
            ),
            (
                "rss_bytes",
                "Resident set size of the process",
                as_i64(m.rss_bytes),
            ),
            (
                "unexplained_bytes",
                "Allocator bytes minus accounted and head bytes",
                m.unexplained_bytes,
            ),
        ],
        counters: [
            ("hits", "Lookups answered from the cache", m.hits),
            ("misses", "Lookups that missed", m.misses),
            ("regenerations", "Replays run", m.regenerations),
            ("replayed_blocks", "Blocks replayed", m.replayed_blocks),
            (
                "coalesced",
                "Requests that joined another request's replay",
                m.coalesced,
            ),
            ("evictions", "States evicted for the budget", m.evictions),
            ("shed", "Queries refused while import was behind", m.shed),
            (
                "anchors_loaded",
                "Anchors rebuilt from the persisted anchor records",
                m.anchors_loaded,
            ),
        ],
    };
    // Appended to the node's scrape, which carries the one closing `# EOF`.
    super::without_eof(snapshot.encode_with_prefix("modnode_state_cache"))
}

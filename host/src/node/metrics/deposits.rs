//! The deposit queue of a producing node on `/metrics`: deposits its follower has logged from
//! the deposit contract, and how many of them the head state has not applied yet.

use super::Snapshot;

/// `modnode_eth1_deposits_followed` and `modnode_eth1_deposits_pending` (followed minus applied
/// by the head, 0 when the head is ahead of this node's follower) as OpenMetrics lines, without
/// the closing `# EOF`.
pub fn render_deposit_queue(followed: u64, applied: u64) -> String {
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let snapshot = Snapshot {
        counters: [],
        gauges: [
            (
                "eth1_deposits_followed",
                "Deposits this node's follower has logged from the deposit contract",
                as_i64(followed),
            ),
            (
                "eth1_deposits_pending",
                "Followed deposits the head state has not applied yet",
                as_i64(followed.saturating_sub(applied)),
            ),
        ],
    };
    super::without_eof(snapshot.encode_with_prefix("modnode"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_is_followed_minus_applied() {
        let text = render_deposit_queue(10, 7);
        assert!(
            text.lines().any(|l| l == "modnode_eth1_deposits_pending 3"),
            "{text}"
        );
        let text = render_deposit_queue(5, 7);
        assert!(
            text.lines().any(|l| l == "modnode_eth1_deposits_pending 0"),
            "{text}"
        );
    }
}

//! `snapshot_us` / `snapshot_bytes` of `modnode bench deposits-v3`: what taking a state
//! snapshot costs once deposits@3's pending-deposit queue holds `entries` deposits (the issue's
//! target: under 1 ms and 1 MB with a million).
//!
//! A snapshot is what the chain publishes after every block (`Chain::snapshot`: the registry,
//! eth1 state, schedule and queue cloned into a [`StateSnapshot`], its root computed). The
//! queue's entries and tree sit in copy-on-write chunks, so the clone copies chunk tables, not
//! entries: its time and its bytes follow the number of chunks (n / 1024), not the bytes
//! queued. `snapshot_bytes` is the allocator's delta on the measuring thread while the
//! snapshot is held (`alloc_stats::thread_net_bytes`, the binary's counting allocator), the
//! median of 101 snapshots, as `bench state-cache` measures the registry's.

use std::time::Instant;

use serde::Serialize;

use modnode::checkpoint::synthetic_state;
use modnode::state::{PendingDelta, PendingDeposit, PendingQueue, StateSnapshot};

/// Snapshots measured; the median is reported.
const SAMPLES: usize = 101;

/// What a snapshot of a state with a long queue costs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueueSnapshotCost {
    /// Deposits queued.
    pub entries: u64,
    /// Validators in the registry.
    pub validators: u32,
    /// Median time to take a snapshot, in µs.
    pub snapshot_us: f64,
    /// Median allocator bytes a held snapshot takes.
    pub snapshot_bytes: i64,
}

/// Measures [`QueueSnapshotCost`] for a registry of `validators` (synthetic) and a queue of
/// `entries` distinct deposits, none drained.
#[allow(
    dead_code,
    reason = "the snapshot figures of `modnode bench deposits-v3`, which calls it"
)]
pub fn run(validators: u32, entries: u64) -> anyhow::Result<QueueSnapshotCost> {
    let base = synthetic_state(validators, 1)?;
    let mut queue = PendingQueue::new();
    let pushed = (0..entries)
        .map(|i| {
            let mut pubkey = [0u8; 48];
            pubkey[..8].copy_from_slice(&i.to_le_bytes());
            PendingDeposit {
                pubkey,
                withdrawal_credentials: [1; 32],
                amount: 32_000_000_000,
                signature: [2; 96],
                slot: i / 16,
                height: i / 16,
            }
        })
        .collect();
    queue.apply(&PendingDelta {
        pushed,
        dropped: 0,
        balance_to_consume: Some(0),
    })?;
    let take = || {
        StateSnapshot::with_pending(
            [9; 32],
            base.height().saturating_add(1),
            base.registry().clone(),
            base.eth1().clone(),
            base.schedule().clone(),
            Some(queue.clone()),
        )
    };
    // Warm: the first snapshot pays for lazily built parts (none today) and page faults.
    drop(take());
    let mut times = Vec::with_capacity(SAMPLES);
    let mut sizes = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let before = modnode::alloc_stats::thread_net_bytes();
        let start = Instant::now();
        let snapshot = take();
        times.push(start.elapsed().as_secs_f64() * 1e6);
        sizes.push((modnode::alloc_stats::thread_net_bytes() - before) as f64);
        anyhow::ensure!(
            snapshot.pending().map(PendingQueue::len) == Some(entries),
            "the snapshot lost queued deposits"
        );
        drop(snapshot);
    }
    Ok(QueueSnapshotCost {
        entries,
        validators,
        snapshot_us: super::median(&mut times),
        snapshot_bytes: super::median(&mut sizes) as i64,
    })
}

//! Benchmarks behind `modnode bench`. Each measures in one run and reports medians, so ratios
//! between its numbers are meaningful on a shared, noisy machine.

pub mod checkpoint;
pub mod deposits;
pub mod deposits_v3;
pub mod gossip;
pub mod gossip_sim;
pub mod host_call;
pub mod prune;
pub mod state_cache;
pub mod swap;

/// Median of a sample set (the lower middle for even counts); 0 for an empty set.
pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples
        .get(samples.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0.0)
}

/// Milliseconds since `start`.
pub fn ms_since(start: std::time::Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// The `pct`-th percentile (nearest rank) of `samples`; 0 for an empty set.
pub fn percentile(samples: &[f64], pct: usize) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = sorted.len().saturating_mul(pct).div_ceil(100).max(1);
    sorted
        .get(rank.min(sorted.len()).saturating_sub(1))
        .copied()
        .unwrap_or(0.0)
}

/// `count` signed new-validator deposits (keys seeded from `first_seed` on), signed under
/// `fork`. Keygen and signing dominate a benchmark's setup, so they are spread over the cores.
pub fn signed_deposits(
    first_seed: u64,
    fork: [u8; 4],
    count: usize,
) -> Vec<modnode::chain::block::DepositData> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = count.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..count)
            .step_by(chunk)
            .map(|start| {
                scope.spawn(move || {
                    (start..start.saturating_add(chunk).min(count))
                        .map(|i| {
                            modnode::chain::workload::new_validator(
                                first_seed.saturating_add(i as u64),
                                32_000_000_000,
                                fork,
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

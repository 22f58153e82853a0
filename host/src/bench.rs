//! Benchmarks behind `modnode bench`. Each measures in one run and reports medians, so ratios
//! between its numbers are meaningful on a shared, noisy machine.

pub mod checkpoint;
pub mod deposits;
pub mod gossip;
pub mod host_call;
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

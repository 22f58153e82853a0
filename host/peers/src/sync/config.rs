//! The tunables of a range sync and the checks that refuse an unusable combination.

use super::*;

/// Tunables of a [`RangeSync`]. `Default` gives 4 × 64 blocks in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncConfig {
    /// Most blocks per request. Default 64.
    pub batch_size: u64,
    /// Most requests in flight over all peers (M). Default 4.
    pub max_in_flight: usize,
    /// Most requests in flight to one peer. Default 4 (new requests go to the least loaded
    /// peer anyway).
    pub max_in_flight_per_peer: usize,
    /// How long a peer may take to answer before its request is retried elsewhere.
    /// Default 10 s.
    pub request_timeout: Time,
    /// Furthest a request may reach beyond the local head, bounding the blocks buffered while
    /// an earlier range is outstanding. Default 512.
    pub lookahead: u64,
    /// How long a peer is left alone after a request to it failed or timed out, or a block it
    /// served could not be taken for a reason that is not proven its fault; doubled on each
    /// further failure up to [`retry_backoff_max`](Self::retry_backoff_max), reset when a block
    /// it served is imported. Default 1 s.
    pub retry_backoff: Time,
    /// Longest back-off from one peer. Default 32 s.
    pub retry_backoff_max: Time,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            batch_size: 64,
            max_in_flight: 4,
            max_in_flight_per_peer: 4,
            request_timeout: 10 * SECONDS,
            lookahead: 512,
            retry_backoff: SECONDS,
            retry_backoff_max: 32 * SECONDS,
        }
    }
}

impl SyncConfig {
    /// Checks that the values make sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let counts = [
            ("batch_size", self.batch_size > 0),
            ("max_in_flight", self.max_in_flight > 0),
            ("max_in_flight_per_peer", self.max_in_flight_per_peer > 0),
            ("request_timeout", self.request_timeout > 0),
            ("retry_backoff", self.retry_backoff > 0),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, ok)| !ok) {
            return Err(ConfigError::Zero(name));
        }
        if self.retry_backoff_max < self.retry_backoff {
            return Err(ConfigError::BackoffMaxBelowFirst {
                first: self.retry_backoff,
                max: self.retry_backoff_max,
            });
        }
        if self.lookahead < self.batch_size {
            return Err(ConfigError::LookaheadBelowBatch {
                lookahead: self.lookahead,
                batch_size: self.batch_size,
            });
        }
        Ok(())
    }
}

//! [`Backoff`]: how long to wait before redialing a peer after consecutive failures —
//! exponential with a cap, minus a random share so that nodes which lost the same peer at the
//! same moment do not all redial it at the same moment.

use rand::Rng;

use crate::Time;
use crate::error::ConfigError;

/// Exponential backoff with a cap and subtractive jitter.
///
/// After `n ≥ 1` consecutive failures the ceiling is `min(cap, base · 2^(n-1))`; the actual
/// delay is drawn uniformly from `[ceiling · (100 - jitter_percent) / 100, ceiling]`, so the
/// cap is never exceeded and `jitter_percent = 0` gives exact, testable delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Time,
    /// Largest delay.
    pub cap: Time,
    /// Largest share of a delay, in percent, that jitter may remove.
    pub jitter_percent: u8,
}

impl Backoff {
    /// Checks that the parameters make sense: `0 < base ≤ cap`, `jitter_percent ≤ 100`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.base == 0 {
            return Err(ConfigError::ZeroBackoffBase);
        }
        if self.cap < self.base {
            return Err(ConfigError::BackoffCapBelowBase {
                base: self.base,
                cap: self.cap,
            });
        }
        if self.jitter_percent > 100 {
            return Err(ConfigError::JitterPercent(self.jitter_percent));
        }
        Ok(())
    }

    /// The delay before jitter after `failures` consecutive failures (0 for none).
    pub fn ceiling(&self, failures: u32) -> Time {
        let Some(doublings) = failures.checked_sub(1) else {
            return 0;
        };
        // 2^63 already exceeds any sensible cap; clamping keeps the shift defined.
        let factor = 1u64 << doublings.min(63);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The delay to wait after `failures` consecutive failures, with jitter drawn from `rng`.
    pub fn delay(&self, failures: u32, rng: &mut impl Rng) -> Time {
        let ceiling = self.ceiling(failures);
        let max_jitter = (ceiling / 100).saturating_mul(u64::from(self.jitter_percent.min(100)));
        if max_jitter == 0 {
            return ceiling;
        }
        ceiling.saturating_sub(rng.random_range(0..=max_jitter))
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::{MILLIS, SECONDS};

    const DEFAULT: Backoff = Backoff {
        base: 500 * MILLIS,
        cap: 60 * SECONDS,
        jitter_percent: 50,
    };

    #[test]
    fn ceiling_doubles_from_base_up_to_cap() {
        let ceilings: Vec<Time> = (0..=10).map(|n| DEFAULT.ceiling(n) / MILLIS).collect();
        assert_eq!(
            ceilings,
            [
                0, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000
            ]
        );
        assert_eq!(DEFAULT.ceiling(u32::MAX), 60 * SECONDS);
    }

    #[test]
    fn jittered_delay_stays_within_half_and_full_ceiling() {
        let mut rng = StdRng::seed_from_u64(7);
        for failures in 1..=12 {
            let ceiling = DEFAULT.ceiling(failures);
            let delays: Vec<Time> = (0..200)
                .map(|_| DEFAULT.delay(failures, &mut rng))
                .collect();
            assert!(delays.iter().all(|d| *d >= ceiling / 2 && *d <= ceiling));
            // The jitter actually varies the delay.
            assert!(delays.iter().any(|d| *d != delays[0]));
        }
    }

    #[test]
    fn zero_jitter_is_exact() {
        let exact = Backoff {
            jitter_percent: 0,
            ..DEFAULT
        };
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(exact.delay(3, &mut rng), 2 * SECONDS);
    }

    #[test]
    fn validate_rejects_nonsense() {
        assert!(DEFAULT.validate().is_ok());
        let zero = Backoff { base: 0, ..DEFAULT };
        assert_eq!(zero.validate(), Err(ConfigError::ZeroBackoffBase));
        let low_cap = Backoff { cap: 1, ..DEFAULT };
        assert!(matches!(
            low_cap.validate(),
            Err(ConfigError::BackoffCapBelowBase { .. })
        ));
        let jitter = Backoff {
            jitter_percent: 101,
            ..DEFAULT
        };
        assert_eq!(jitter.validate(), Err(ConfigError::JitterPercent(101)));
    }
}

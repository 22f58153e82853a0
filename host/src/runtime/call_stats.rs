//! [`CallStats`]: what one loaded module has done since it was warmed — calls, the faults it
//! is to blame for, and the fuel it burnt — for `/metrics` (`modnode_module_calls_total`,
//! `_faults_total`, `_fuel_total` per kind and version).
//!
//! A [`Module`](super::Module) and its clones share one `CallStats`, so the chain's deposits
//! engine, a slot's versions and a checkpoint session all count towards the version they ran.
//! The counters start at zero once the warm-up is over (its dry runs are not service).

use std::sync::atomic::{AtomicU64, Ordering};

use super::CallError;

/// Counters of one loaded module, updated lock-free by every call.
#[derive(Debug, Default)]
pub struct CallStats {
    calls: AtomicU64,
    faults: AtomicU64,
    fuel: AtomicU64,
}

/// A reading of [`CallStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallCounts {
    /// Calls made (served or failed).
    pub calls: u64,
    /// Calls that failed by the module's own fault ([`CallError::blames_module`]: a trap, out
    /// of fuel, a limit); failures of the host are not counted against it.
    pub faults: u64,
    /// Fuel the calls used, wasm and host calls together.
    pub fuel: u64,
}

impl CallStats {
    /// Counts one call that used `fuel` and ended with `error`, if any.
    pub(crate) fn record(&self, fuel: u64, error: Option<&CallError>) {
        // Relaxed: independent monotonic counters; `fetch_add` wraps only after 2^64 calls.
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.fuel.fetch_add(fuel, Ordering::Relaxed);
        if error.is_some_and(CallError::blames_module) {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets what the warm-up counted: the figures are the module's service from here on.
    pub(crate) fn reset(&self) {
        self.calls.store(0, Ordering::Relaxed);
        self.faults.store(0, Ordering::Relaxed);
        self.fuel.store(0, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn counts(&self) -> CallCounts {
        CallCounts {
            calls: self.calls.load(Ordering::Relaxed),
            faults: self.faults.load(Ordering::Relaxed),
            fuel: self.fuel.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::error::{HostFailure, HostFailureKind};

    #[test]
    fn counts_calls_fuel_and_only_the_module_s_faults() {
        let stats = CallStats::default();
        stats.record(10, None);
        let host = CallError::Host(HostFailure::new(
            "m",
            HostFailureKind::PoolExhausted,
            "full",
        ));
        stats.record(5, Some(&host));
        let fuel = CallError::Module(crate::runtime::ModuleFault::OutOfFuel {
            module: "m".into(),
            budget: 7,
        });
        stats.record(7, Some(&fuel));
        assert_eq!(
            stats.counts(),
            CallCounts {
                calls: 3,
                faults: 1,
                fuel: 22
            }
        );
        stats.reset();
        assert_eq!(stats.counts(), CallCounts::default());
    }
}

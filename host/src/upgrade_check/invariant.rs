//! What must hold between deposits versions of different contracts, by name (the
//! `invariant` of a [`Failure::Invariant`](super::Failure::Invariant)).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What must hold between deposits versions of different contracts (@2.0.0 applies at once,
/// @3.0.0 queues), which cannot be compared output for output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// Both versions accept or both reject every block (proofs are checked at the block in
    /// both contracts).
    Acceptance,
    /// The eth1 deposit index after each block is the same in both versions.
    DepositIndex,
    /// Every deposit index is consumed exactly once: applied at once by @2.0.0; queued once and
    /// applied once (never dropped unapplied) by @3.0.0.
    ExactlyOnce,
    /// Deposited amounts = balance increases + amounts still queued + amounts dropped for an
    /// invalid signature, after every block.
    Conservation,
    /// Each deposit index has the same outcome in both versions once applied (created at the
    /// same validator index, topped up, or dropped for its signature).
    SameOutcome,
    /// The queue drains within the bound empty epochs allow, and then the registries agree
    /// except for the documented differences.
    Drain,
    /// An epoch transition never fails (no block could be built on it: the chain would stop).
    Liveness,
    /// An epoch transition touches only final entries at the front of the queue: its result
    /// does not depend on what is queued behind them.
    Finality,
}

impl Invariant {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::Acceptance => "acceptance",
            Invariant::DepositIndex => "deposit-index",
            Invariant::ExactlyOnce => "exactly-once",
            Invariant::Conservation => "conservation",
            Invariant::SameOutcome => "same-outcome",
            Invariant::Drain => "drain",
            Invariant::Liveness => "liveness",
            Invariant::Finality => "finality",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

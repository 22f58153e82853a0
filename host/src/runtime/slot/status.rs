//! What a slot reports: which version served a call, each version's status, shadow and
//! canary counters, breaker trips, and why a swap was refused.

use super::super::{Kind, Scope};
use crate::hashes::ModuleHash;
use crate::runtime::module::WarmupReport;

/// A version that is on a consensus kind's schedule (data only; on-chain scheduling decides).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Scheduled {
    /// Module hash (hex in JSON).
    pub hash: ModuleHash,
    /// Height from which it is active.
    pub height: u64,
    /// Connected peers that report the module ready; `None` until nodes exchange readiness
    /// (the on-chain upgrade protocol fills it).
    pub peers_ready: Option<u32>,
    /// Authorities that report the module ready; `None` like `peers_ready`.
    pub authorities_ready: Option<u32>,
}

/// Which version served a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The active version.
    Active,
    /// The canary.
    Canary,
    /// The previous version, after the active one (on probation) failed.
    Previous,
}

/// A version as the status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VersionStatus {
    /// `<kind>-v<version>@<hash prefix>`.
    pub name: String,
    /// Full sha256 (hex).
    pub hash: ModuleHash,
    /// The module's own version number.
    pub version: u32,
    /// The contract it declares (`modnode:<kind>@<version>`); the host runs it on its
    /// implementation of that contract.
    pub contract: String,
    /// Bytes of the state the host keeps for it (0 for contracts that keep none).
    pub state_bytes: usize,
    /// What its warm-up measured.
    pub warmup: WarmupReport,
}

/// A divergence between a shadow and the active version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Divergence {
    /// The input both ran on.
    pub input: String,
    /// The active version's output.
    pub active: String,
    /// The shadow's output (or its error).
    pub shadow: String,
}

/// A shadow candidate's trial.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShadowStatus {
    /// The candidate.
    pub version: VersionStatus,
    /// Inputs compared so far.
    pub compared: u64,
    /// Outputs that differed (shadow faults included).
    pub divergences: u64,
    /// Inputs not compared because the worker was behind.
    pub skipped: u64,
    /// Faults of the shadow the module is to blame for ([`CallError::blames_module`]).
    pub faults: u64,
    /// The latest divergences, oldest first.
    pub recent_divergences: Vec<Divergence>,
}

/// A canary candidate's trial.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CanaryStatus {
    /// The candidate.
    pub version: VersionStatus,
    /// Share of calls it serves, in percent.
    pub percent: u8,
    /// Calls it was chosen for.
    pub calls: u64,
    /// Faults the module is to blame for ([`CallError::blames_module`]; each such call was
    /// served by the active version instead).
    pub faults: u64,
}

/// An automatic rollback by the circuit breaker.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BreakerTrip {
    /// The version rolled back.
    pub module: String,
    /// How it was running: `shadow`, `canary N%` or `live`.
    pub mode: String,
    /// Faults counted.
    pub faults: u64,
    /// The last fault.
    pub last_fault: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

/// What `module list` shows for one kind.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotStatus {
    /// The kind.
    pub kind: Kind,
    /// Consensus or local.
    pub scope: Scope,
    /// The version serving calls.
    pub active: VersionStatus,
    /// Deterministic faults of the active version since its live activation, while `previous`
    /// is kept (the breaker's count); `None` when not on probation.
    pub active_faults: Option<u64>,
    /// The scheduled version (consensus kinds).
    pub scheduled: Option<Scheduled>,
    /// The shadow candidate.
    pub shadow: Option<ShadowStatus>,
    /// The canary candidate.
    pub canary: Option<CanaryStatus>,
    /// The version a rollback returns to.
    pub previous: Option<VersionStatus>,
    /// Faults after which the breaker rolls back.
    pub breaker_threshold: u32,
    /// Automatic rollbacks so far.
    pub breaker_trips: u64,
    /// Calls that failed after every fallback (the caller got the error: the gossip engine
    /// floods such a message instead).
    pub failed_calls: u64,
    /// The latest automatic rollbacks, oldest first.
    pub recent_trips: Vec<BreakerTrip>,
}

/// Why a slot refused a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwapError {
    /// The version is already active.
    #[error("{module} is already the active {kind} module")]
    AlreadyActive {
        /// The kind.
        kind: Kind,
        /// The module.
        module: String,
    },
    /// There is nothing to roll back to.
    #[error("the {kind} slot has no previous version to roll back to")]
    NoPrevious {
        /// The kind.
        kind: Kind,
    },
    /// A canary share outside 1..=100.
    #[error("canary share {0}% is outside 1..=100")]
    BadShare(u8),
    /// There is no candidate to cancel.
    #[error("the {kind} slot has no shadow or canary candidate")]
    NoCandidate {
        /// The kind.
        kind: Kind,
    },
}

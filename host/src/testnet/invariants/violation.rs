//! [`Violation`]: what the [`Checker`](super::Checker) reports, one variant per invariant.

use serde::{Deserialize, Serialize};

/// A broken invariant, naming the node(s), height and hashes involved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Violation {
    /// Two different blocks at one height, each at or below the finalized height of the node
    /// that reported it: a safety failure of the chain (ours).
    #[error(
        "safety: height {height} finalized as {first_hash} by {first_node} but as {hash} by {node}"
    )]
    FinalizedConflict {
        /// The height.
        height: u64,
        /// The node that reported the first finalized block there.
        first_node: String,
        /// That block's hash.
        first_hash: String,
        /// The node reporting a different one.
        node: String,
        /// Its hash.
        hash: String,
    },
    /// One block with two state roots: state transition is not deterministic (ours).
    #[error(
        "safety: block {hash} at height {height} has state root {first_root} on {first_node} but {root} on {node}"
    )]
    StateRootMismatch {
        /// The height.
        height: u64,
        /// The block hash.
        hash: String,
        /// The node that reported the first root.
        first_node: String,
        /// The first root.
        first_root: String,
        /// The node reporting another root.
        node: String,
        /// Its root.
        root: String,
    },
    /// A head state's balance sum exceeds genesis plus the deposits it claims to have applied:
    /// a deposit applied twice (ours).
    #[error(
        "deposits: {node} applied {count} deposits but holds {balance_sum_gwei} gwei, more than the {expected_gwei} gwei genesis plus deposits [0, {count}) allow: a deposit applied twice"
    )]
    DepositDoubled {
        /// The node.
        node: String,
        /// Its deposit count.
        count: u64,
        /// Its balance sum.
        balance_sum_gwei: u128,
        /// Genesis balance plus the accepted amounts of deposits `[0, count)`.
        expected_gwei: u128,
    },
    /// At the end a node applied fewer deposits than the contract accepted (ours).
    #[error(
        "deposits: {node} applied {count} deposits at the end, {submitted} were accepted: lost"
    )]
    DepositLost {
        /// The node.
        node: String,
        /// Its final deposit count.
        count: u64,
        /// Deposits the contract accepted.
        submitted: u64,
    },
    /// At the end a node applied more deposits than the contract accepted (ours).
    #[error("deposits: {node} applied {count} deposits at the end, only {submitted} were accepted")]
    DepositUnknown {
        /// The node.
        node: String,
        /// Its final deposit count.
        count: u64,
        /// Deposits the contract accepted.
        submitted: u64,
    },
    /// An honest node banned another honest node (ours: a false accusation).
    #[error("bans: honest {node} banned honest {banned}")]
    HonestBan {
        /// The banning node.
        node: String,
        /// The banned node.
        banned: String,
    },
    /// A node process ended without the runner causing it (ours).
    #[error("process: {node} exited unexpectedly")]
    UnexpectedExit {
        /// The node.
        node: String,
    },
    /// A node's log shows a panic (ours).
    #[error("log: {node} panicked: {line}")]
    Panic {
        /// The node.
        node: String,
        /// The log line.
        line: String,
    },
    /// A node logged an ERROR line no allowed pattern explains (ours until explained).
    #[error("log: {node} logged an unexplained error: {line}")]
    UnexplainedError {
        /// The node.
        node: String,
        /// The log line.
        line: String,
    },
    /// A node's RSS exceeded the bound (ours: memory not bounded).
    #[error("memory: {node} RSS {rss_bytes} bytes exceeds the bound of {limit_bytes} bytes")]
    RssOverLimit {
        /// The node.
        node: String,
        /// Its RSS.
        rss_bytes: u64,
        /// The bound.
        limit_bytes: u64,
    },
    /// The nodes were not on one head within the bound after a heal (ours: liveness).
    #[error(
        "liveness: nodes not on one head {waited_ms} ms after the heal at {heal_ms} ms (heads: {heads})"
    )]
    NotConverged {
        /// When the heal happened.
        heal_ms: u64,
        /// How long the checker waited.
        waited_ms: u64,
        /// Each live node's latest head, `node=height`.
        heads: String,
    },
}

impl Violation {
    /// A short name of the invariant, for counting by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::FinalizedConflict { .. } => "finalized_conflict",
            Self::StateRootMismatch { .. } => "state_root_mismatch",
            Self::DepositDoubled { .. } => "deposit_doubled",
            Self::DepositLost { .. } => "deposit_lost",
            Self::DepositUnknown { .. } => "deposit_unknown",
            Self::HonestBan { .. } => "honest_ban",
            Self::UnexpectedExit { .. } => "unexpected_exit",
            Self::Panic { .. } => "panic",
            Self::UnexplainedError { .. } => "unexplained_error",
            Self::RssOverLimit { .. } => "rss_over_limit",
            Self::NotConverged { .. } => "not_converged",
        }
    }
}

//! Parts of a multi-process testnet that is broken on purpose (issue 25): the pieces a runner
//! combines to start many `modnode` processes, perturb them and check that nothing was lost.
//!
//! - [`invariants`]: the invariants (safety, deposits, bans, liveness…) checked on every sample.
//! - [`network`]: the genesis, keys and command lines of a network of separate processes.
//! - [`relay`]: a fault-injecting UDP relay, one socket per directed link between nodes.
//! - [`report`]: the run's figures as JSON and its timeline as a PNG.

pub mod invariants;
pub mod network;
pub mod relay;
pub mod report;

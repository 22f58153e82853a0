//! Parts of a multi-process testnet that is broken on purpose (issue 25): the pieces a runner
//! combines to start many `modnode` processes, perturb them and check that nothing was lost.
//!
//! - [`relay`]: a fault-injecting UDP relay, one socket per directed link between nodes.

pub mod relay;

//! Parts of a multi-process testnet that is broken on purpose: the pieces a runner
//! combines to start many `modnode` processes, perturb them and check that nothing was lost.
//!
//! - [`invariants`]: the invariants (safety, deposits, bans, liveness…) checked on every sample.
//! - [`network`]: the genesis, keys and command lines of a network of separate processes.
//! - [`relay`]: a fault-injecting UDP relay, one socket per directed link between nodes.
//! - [`report`]: the run's figures as JSON and its timeline as a PNG.
//! - [`manifest`]: the TOML description of a run (`modnode testnet run <manifest.toml>`).
//! - [`perturb`]: the seeded plan of perturbations and its sans-IO schedule.
//! - [`node_process`]: one node as a child process (start, `kill -9`, pause, wipe, logs, RSS).
//! - [`runner`]: `modnode testnet run`: the processes, the relay, deposits, polling, checks.

pub mod invariants;
pub mod manifest;
pub mod network;
pub mod node_process;
pub mod perturb;
pub mod relay;
pub mod report;
pub mod runner;

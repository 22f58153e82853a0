//! A multi-process testnet that is broken on purpose (issue 25): `modnode testnet run
//! <manifest.toml>` starts many `modnode run` processes whose peers reach each other only
//! through a fault-injecting relay, perturbs them, and checks continuously that nothing was
//! lost.
//!
//! - [`manifest`]: the TOML description of a run.
//! - [`perturb`]: the seeded plan of perturbations and its sans-IO schedule.
//! - [`node_process`]: one node as a child process (start, `kill -9`, pause, wipe, logs, RSS).

pub mod manifest;
pub mod node_process;
pub mod perturb;

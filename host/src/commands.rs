//! One module per `modnode` subcommand group.

pub mod bench;
pub mod deposit;
pub mod devnet;
pub mod module;
pub mod run;

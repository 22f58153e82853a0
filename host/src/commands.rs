//! One module per `modnode` subcommand group.

pub mod bench;
pub mod module;
pub mod run;

//! Integration tests of modnode-peers, in one binary so they link once. Everything runs on
//! virtual time: no sockets, no sleeps.

#![allow(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code and its helpers: a panic is a test failure"
)]

mod peers;
mod sybil;
mod sync;
mod sync_props;
mod sync_sim;

//! The gossip crate's one integration-test binary.

mod engine;
mod sim;
mod wire_props;

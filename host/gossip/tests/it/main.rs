//! The gossip crate's one integration-test binary.

mod engine;
mod hostile;
mod sim;
mod wire_props;

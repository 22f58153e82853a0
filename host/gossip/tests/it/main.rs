//! The gossip crate's one integration-test binary.

mod engine;
mod gossipsub;
mod hostile;
mod links;
mod routes;
mod sim;
mod tree;
mod wire_props;

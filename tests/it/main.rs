//! The workspace integration-test binary.

mod deposits_equivalence;

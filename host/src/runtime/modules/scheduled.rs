//! Admission of modules the chain scheduled: the chain's word beats local policy, so a failed
//! warm-up on this node's own history only warns
//! ([`ReadyVersions::warm_scheduled`](super::ReadyVersions::warm_scheduled)), and only the
//! module's kind and contract (and whether it links and describes itself) can refuse it.

use super::SlotError;
use crate::runtime::{ComponentInfo, Kind, Scope};

/// Refuses a module whose kind is not the one the chain scheduled (`Some`), or not a
/// consensus kind (`None`: a module fetched for a chain is always one).
pub fn check_scheduled_kind(info: &ComponentInfo, kind: Option<Kind>) -> Result<(), SlotError> {
    let name = crate::runtime::display_name(info, None);
    match kind {
        Some(expected) if info.kind != expected => Err(SlotError::WrongKind {
            module: name,
            expected,
            found: info.kind,
        }),
        None if info.kind.scope() != Scope::Consensus => {
            Err(SlotError::LocalKind { kind: info.kind })
        }
        _ => Ok(()),
    }
}

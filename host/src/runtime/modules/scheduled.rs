//! Admission of modules the chain scheduled: the chain's word beats local policy, so a failed
//! warm-up on this node's own history only warns, and only the module's kind and contract (and
//! whether it links and describes itself) can refuse it.

use super::{AnyReady, Modules, Prepared, SlotError, Warmed};
use crate::runtime::module::{Module, World};
use crate::runtime::slot::Ready;
use crate::runtime::{ComponentInfo, Kind, LoadError, LoadedModule, Scope, WarmupReport};

/// `module` admitted without a warm-up (the chain scheduled it and its warm-up failed here):
/// the report says nothing ran.
fn unwarmed(module: LoadedModule) -> AnyReady {
    fn ready<W: World>(module: Module<W>) -> Ready<W> {
        Ready::new(
            module,
            WarmupReport {
                failed: true,
                ..WarmupReport::default()
            },
        )
    }
    match module {
        LoadedModule::Deposits(m) => AnyReady::Deposits(ready(m)),
        LoadedModule::Checkpoint(m) => AnyReady::Checkpoint(ready(m)),
        LoadedModule::GossipPolicy(m) => AnyReady::GossipPolicy(ready(m)),
    }
}

impl Modules {
    /// [`warm_loaded`](Self::warm_loaded) for a module the chain scheduled: a failed warm-up
    /// (a trap or running out of fuel on the built-in inputs or on this node's own recent
    /// blocks, which other nodes do not share) is logged as a warning and returned beside the
    /// module, never a refusal. Only the module's hash and its kind and contract decide whether
    /// the chain can run it; whether a block it runs is valid is decided block by block.
    pub fn warm_scheduled(&self, module: LoadedModule) -> (Warmed, Option<SlotError>) {
        match self.warm_loaded(module.clone()) {
            Ok(warmed) => (warmed, None),
            Err(e) => {
                tracing::warn!(
                    module = %module.meta().name(),
                    error = %e,
                    "a module the chain scheduled failed its warm-up on this node; admitted \
                     anyway (the chain's schedule decides, local checks only warn)"
                );
                (Warmed(unwarmed(module)), Some(e))
            }
        }
    }

    /// [`prepare`](Self::prepare) for a module the chain scheduled as `kind`: only the bytes'
    /// validity as a component, its kind (`kind`, or any consensus kind when `None`) and its
    /// contract, linking and its own `describe` may refuse it; a failed warm-up is a warning
    /// ([`warm_scheduled`](Self::warm_scheduled)).
    pub fn prepare_scheduled(
        &self,
        bytes: &[u8],
        kind: Option<Kind>,
    ) -> Result<Prepared, SlotError> {
        let info = crate::runtime::inspect::validate(bytes).map_err(LoadError::from)?;
        check_scheduled_kind(&info, kind)?;
        if let Some(known) = self.lookup(&info.sha256) {
            return Ok(known.prepared(false));
        }
        let (warmed, _) = self.warm_scheduled(self.runtime.load(bytes)?);
        Ok(self.admit(warmed))
    }
}

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

//! A version ready to serve in a slot: the module, what its warm-up measured, and the state
//! the host keeps for it.

use std::sync::{Arc, Mutex};

use super::super::CallError;
use super::super::module::{Module, WarmupReport, World};
use super::VersionStatus;

/// The state the host keeps for one version in a slot between calls (a stateful contract's
/// bytes; empty otherwise). A call holds the lock while it runs, so calls on one version see
/// each other's states in order and none is lost.
#[derive(Debug, Default)]
pub struct KeptState(Mutex<Vec<u8>>);

impl KeptState {
    /// State holding `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(Mutex::new(bytes))
    }

    /// Locks the state for one call (a poisoned lock still holds a whole state).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.lock().clone()
    }
}

/// A loaded version that passed warm-up.
pub struct Ready<W: World> {
    /// The module.
    pub module: Arc<Module<W>>,
    /// What warm-up measured.
    pub warmup: WarmupReport,
    /// The state kept for this version while it is in a slot.
    pub(super) state: Arc<KeptState>,
}

impl<W: World> Clone for Ready<W> {
    fn clone(&self) -> Self {
        Self {
            module: self.module.clone(),
            warmup: self.warmup,
            state: self.state.clone(),
        }
    }
}

impl<W: World> Ready<W> {
    /// `module`, with what its warm-up measured (or did not: see `WarmupReport::failed`).
    pub fn new(module: Module<W>, warmup: WarmupReport) -> Self {
        Self {
            module: Arc::new(module),
            warmup,
            state: Arc::new(KeptState::default()),
        }
    }

    /// The state kept for this version.
    pub fn state(&self) -> &KeptState {
        &self.state
    }

    /// This version entering a slot in place of `previous`, with state of its own: what
    /// [`World::take_over`] makes of `previous` and its state. A take-over that fails starts
    /// from empty state (logged): the hand-over never blocks a swap.
    pub(super) fn taking_over(&self, previous: Option<&Ready<W>>) -> Self {
        let from = previous.map(|p| (&*p.module, p.state.bytes()));
        let state = W::take_over(&self.module, from).unwrap_or_else(|e| {
            tracing::warn!(kind = %W::KIND, module = %self.module.meta().name(), error = %e, "take-over failed; the version starts from empty state");
            Vec::new()
        });
        Self {
            module: self.module.clone(),
            warmup: self.warmup,
            state: Arc::new(KeptState::new(state)),
        }
    }

    /// Warms `module` (instantiate + dry run on realistic inputs); only a warmed module can
    /// enter a slot.
    pub fn warm(module: Module<W>) -> Result<Self, CallError> {
        Self::warm_with(module, |_| Ok((0, 0)))
    }

    /// [`warm`](Self::warm), also replaying recent real inputs (see [`Module::warm_with`]).
    pub fn warm_with(
        module: Module<W>,
        real: impl FnOnce(&Module<W>) -> Result<(u64, u32), CallError>,
    ) -> Result<Self, CallError> {
        let warmup = module.warm_with(real)?;
        Ok(Self::new(module, warmup))
    }

    pub(super) fn status(&self) -> VersionStatus {
        let meta = self.module.meta();
        VersionStatus {
            name: meta.name(),
            hash: meta.component.sha256,
            version: meta.info.version,
            contract: meta.component.contract_name(),
            state_bytes: self.state.lock().len(),
            warmup: self.warmup,
        }
    }

    pub(super) fn same(&self, other: &Ready<W>) -> bool {
        self.module.hash() == other.module.hash()
    }
}

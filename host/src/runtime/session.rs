//! [`Session`]: one instance of a module kept across many calls on one guest thread.
//!
//! A [`Module`] call instantiates in a fresh store each time, which is right for consensus
//! calls (nothing carries over). Bulk work that makes hundreds of calls with megabytes of
//! arguments each (building or opening checkpoint chunks) pays for that: every call faults its
//! linear memory in again and returns it to the pool with `madvise`, whose TLB shootdowns stall
//! every other thread of the process, block import included. A session instantiates once and
//! reuses the instance and its memory; each call gets the module's full fuel budget again.
//!
//! Only for calls whose outputs depend on their arguments alone: whatever the guest leaves in
//! its memory between calls must not change what later calls return.

use wasmtime::Store;

use super::CallError;
use super::error::{HostFailure, HostFailureKind};
use super::module::{CallBase, Module, StoreData as _, World, new_store};

/// A live instance of a module of world `W` in its own store; not `Sync`, one per thread.
pub struct Session<W: World> {
    store: Store<W::Data>,
    instance: W::Instance,
    fuel: u64,
    name: String,
    /// Set by a failed call: a trapped instance is not entered again.
    failed: bool,
    /// The module's counters: a session's calls are the version's calls.
    stats: std::sync::Arc<super::call_stats::CallStats>,
}

impl<W: World> Module<W> {
    /// Instantiates the module once in a store holding `data`, for [`Session::call`]s. Must run
    /// on a guest thread (the host functions a guest calls need its large native stack).
    pub(crate) fn session(
        &self,
        data: impl FnOnce(CallBase) -> Result<W::Data, HostFailure>,
    ) -> Result<Session<W>, CallError> {
        let name = self.meta().name();
        if !super::threads::on_guest_thread() {
            return Err(HostFailure::new(
                &name,
                HostFailureKind::Runtime,
                "a module session was opened outside a guest thread",
            )
            .into());
        }
        let settings = self.settings();
        let data = data(CallBase::new(settings))?;
        let mut store = new_store(settings, data, &name)?;
        let instance = W::instantiate(self.pre(), &mut store).map_err(|e| {
            let breach = store.data_mut().base().limiter.breach();
            CallError::classify(&name, &e, breach, settings.fuel, false)
        })?;
        Ok(Session {
            store,
            instance,
            fuel: settings.fuel,
            name,
            failed: false,
            stats: self.stats().clone(),
        })
    }
}

impl<W: World> Session<W> {
    /// Runs `f` on the session's instance with the module's whole fuel budget. After a failed
    /// call the session refuses further calls.
    /// The module's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn call<R>(
        &mut self,
        f: impl FnOnce(&W::Instance, &mut Store<W::Data>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        if self.failed {
            return Err(HostFailure::new(
                &self.name,
                HostFailureKind::Runtime,
                "the module session's instance failed an earlier call",
            )
            .into());
        }
        if let Err(e) = self.store.set_fuel(self.fuel) {
            self.failed = true;
            return Err(HostFailure::new(
                &self.name,
                HostFailureKind::Runtime,
                format!("cannot set fuel: {e:?}"),
            )
            .into());
        }
        let result = f(&self.instance, &mut self.store).map_err(|e| {
            self.failed = true;
            let breach = self.store.data_mut().base().limiter.breach();
            CallError::classify(&self.name, &e, breach, self.fuel, true)
        });
        let used = self.fuel.saturating_sub(self.store.get_fuel().unwrap_or(0));
        self.stats.record(used, result.as_ref().err());
        result
    }
}

//! Host side of the optional `migration` export (`wit/deposits-3`, world `migrating`): a
//! deposits module of any contract may export `modnode:deposits/migration@3.0.0` beside its
//! `processor`; the host finds the export when it links the module ([`Module::has_migration`])
//! and the chain runs it once, at the module's activation height, on that block's parent state
//! ([`Module::migrate`]). The migration imports the `@3.0.0` registry, queue and crypto, served
//! by the same host implementation (the kind's one store data type) as the processor's calls:
//! its writes go to the call's overlays, which become deltas the caller applies only when the
//! whole call succeeded. A module without the export keeps its bytes: nothing about it changes.

use super::Deposits;
use super::v3::ProcessErrorV3;
use crate::deposit::{ChainContext, DepositRejection};
use crate::runtime::CallError;
use crate::runtime::error::{HostFailure, HostFailureKind};
use crate::runtime::module::{CallBase, Module, StoreData as _, new_store};
use crate::state::{PendingDelta, PendingQueue, RegistryDelta, SharedRegistry};

pub(super) mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/deposits-3"],
        world: "modnode:deposits/migrating",
        additional_derives: [PartialEq, Eq],
        imports: { default: trappable },
        with: {
            "modnode:deposits/types": crate::runtime::deposits::v3::bindings::modnode::deposits::types,
            "modnode:deposits/registry": crate::runtime::deposits::v3::bindings::modnode::deposits::registry,
            "modnode:deposits/queue": crate::runtime::deposits::v3::bindings::modnode::deposits::queue,
            "modnode:deposits/crypto": crate::runtime::deposits::v3::bindings::modnode::deposits::crypto,
        },
    });
}

pub use bindings::exports::modnode::deposits::migration::{Migrated, MigrationContext};

/// The export's name: a module that has it migrates at its activation.
pub const MIGRATION_EXPORT: &str = "modnode:deposits/migration@3.0.0";

/// The typed pre-instance of a module's migration, when it exports one; a module that exports
/// the name with other functions or types is refused when it is linked.
pub(super) fn pre(
    pre: &wasmtime::component::InstancePre<super::DepositsCtx>,
) -> wasmtime::Result<Option<bindings::MigratingPre<super::DepositsCtx>>> {
    if pre
        .component()
        .get_export_index(None, MIGRATION_EXPORT)
        .is_none()
    {
        return Ok(None);
    }
    bindings::MigratingPre::new(pre.clone())
        .map(Some)
        .map_err(|e| {
            e.context(format!(
                "the module's `{MIGRATION_EXPORT}` export is mistyped"
            ))
        })
}

/// What a successful migration produced: its answer (the WIT record, or in the chain's types
/// the count of entries it reports it changed) and the changes to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationOutput<M = Migrated> {
    /// The module's answer.
    pub migrated: M,
    /// The registry changes to apply.
    pub delta: RegistryDelta,
    /// The queue changes to apply.
    pub pending: PendingDelta,
    /// Fuel the call used, host calls included.
    pub fuel_used: u64,
}

/// A migration's answer: the module's refusal inside, call failures outside.
pub type MigrationResult = Result<Result<MigrationOutput, ProcessErrorV3>, CallError>;

impl Module<Deposits> {
    /// Whether the module exports a migration the chain runs at its activation height.
    pub fn has_migration(&self) -> bool {
        self.pre().migration().is_some()
    }

    /// [`Module::migrate`] in the chain's types: the migration's answer is the count of
    /// entries it reports it changed.
    pub fn run_migration(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        ctx: &ChainContext,
    ) -> Result<Result<MigrationOutput<u64>, DepositRejection>, CallError> {
        let ctx = super::convert::migration_context(ctx);
        Ok(self
            .migrate(registry, pending, ctx)?
            .map(|out| MigrationOutput {
                migrated: out.migrated.changed,
                delta: out.delta,
                pending: out.pending,
                fuel_used: out.fuel_used,
            })
            .map_err(DepositRejection::from))
    }

    /// Runs the module's migration over `registry` and `pending` (the activation block's
    /// parent state) in a fresh store, on a guest thread, within one call's fuel budget, with
    /// the host-call fuel, limits and fault classification of every call. `Ok(Err(_))`: the
    /// migration refused the state; `Err(_)`: it trapped, ran out of fuel, or the host failed
    /// (see [`CallError`]). Nothing is written either way: the caller applies the deltas of
    /// `Ok(Ok(_))`.
    pub fn migrate(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        ctx: MigrationContext,
    ) -> MigrationResult {
        let name = self.meta().name();
        let Some(pre) = self.pre().migration().cloned() else {
            return Err(HostFailure::new(
                &name,
                HostFailureKind::Runtime,
                "the module exports no migration",
            )
            .into());
        };
        let settings = self.settings().clone();
        let budget = settings.fuel;
        let (result, data, fuel_used) = crate::runtime::threads::run_on_guest_thread(move || {
            let data = super::data(registry, pending, CallBase::new(&settings));
            let mut store = match new_store(&settings, data, &name) {
                Ok(store) => store,
                Err(e) => return (Err(e), None, 0),
            };
            let (result, instantiated) = match pre.instantiate(&mut store) {
                Ok(instance) => (
                    instance
                        .modnode_deposits_migration()
                        .call_migrate(&mut store, &ctx),
                    true,
                ),
                Err(e) => (Err(e), false),
            };
            let remaining = store.get_fuel().unwrap_or(0);
            let fuel_used = settings.fuel.saturating_sub(remaining);
            let breach = store.data_mut().base().limiter.breach();
            let result =
                result.map_err(|e| CallError::classify(&name, &e, breach, budget, instantiated));
            (result, Some(store.into_data()), fuel_used)
        });
        self.stats().record(fuel_used, result.as_ref().err());
        let result = result?;
        let Some(data) = data else {
            return Err(HostFailure::new(
                &self.meta().name(),
                HostFailureKind::Runtime,
                "the call's store data is missing",
            )
            .into());
        };
        Ok(result.map(|migrated| MigrationOutput {
            migrated,
            delta: data.overlay.into_delta(),
            pending: data.pending.into_delta(),
            fuel_used,
        }))
    }
}

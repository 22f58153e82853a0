//! One generic loaded module for every kind: preparation (`InstancePre`), the per-call store
//! (fuel, limits, host-call fuel), error classification, warm-up and timing live here once. A
//! WIT world contributes only what is its own through [`World`]: its bindings, its store data and
//! its realistic dry run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{InstancePre, Linker};
use wasmtime::{CallHook, Engine, Store, StoreContextMut};

use super::call_stats::{CallCounts, CallStats};
use super::error::{HostFailure, HostFailureKind};
use super::inspect::{Kind, Version};
use super::limits::{Limiter, Limits};
use super::profile::HostCallFuel;
use super::{CallError, ComponentInfo, LoadError, ModuleInfo, ModuleMeta};
use crate::crypto::SigCache;

/// What every world's store data carries: the call's resource limiter and host-call fuel meter.
pub struct CallBase {
    /// The call's resource limiter.
    pub(crate) limiter: Limiter,
    /// The call's host-call fuel meter.
    pub(crate) fuel: HostFuel,
    /// The runtime's cache of signature sets known valid.
    pub(crate) sig_cache: Arc<SigCache>,
}

impl CallBase {
    pub(crate) fn new(settings: &CallSettings) -> Self {
        Self {
            limiter: Limiter::new(settings.limits),
            fuel: HostFuel::new(settings.host_calls),
            sig_cache: settings.sig_cache.clone(),
        }
    }

    /// The host-call fuel meter.
    pub fn fuel(&mut self) -> &mut HostFuel {
        &mut self.fuel
    }
}

/// Store data of a world: gives the generic call machinery its [`CallBase`].
pub trait StoreData: Send + 'static {
    /// The call's limiter and fuel meter.
    fn base(&mut self) -> &mut CallBase;
}

/// Charges host functions' work to the store's fuel.
///
/// wasmtime meters wasm operators only; a host function's work (a BLS pairing, a registry write)
/// is free unless the host charges it. Host functions call [`HostFuel::charge`] *before* doing
/// their work: the charge is refused (an out-of-fuel trap) when it exceeds the fuel the store had
/// when the module called the host, so an unaffordable verification never runs. The call hook
/// then deducts the charges from the store when the host call returns. Both points are
/// deterministic: the fuel left at a host call depends only on the module and its input.
pub struct HostFuel {
    costs: HostCallFuel,
    available: u64,
    pending: u64,
    charged: u64,
}

impl HostFuel {
    fn new(costs: HostCallFuel) -> Self {
        Self {
            costs,
            available: 0,
            pending: 0,
            charged: 0,
        }
    }

    /// The profile's host-call costs.
    pub fn costs(&self) -> &HostCallFuel {
        &self.costs
    }

    /// Charges `amount` for the host call in progress; out of fuel when the store cannot pay.
    pub fn charge(&mut self, amount: u64) -> wasmtime::Result<()> {
        match self.pending.checked_add(amount) {
            Some(p) if p <= self.available => {
                self.pending = p;
                Ok(())
            }
            _ => {
                self.pending = self.available.saturating_add(1);
                Err(wasmtime::Trap::OutOfFuel.into())
            }
        }
    }

    /// Charges the boundary crossing plus `bytes` of list arguments, then `work`.
    pub fn charge_call(&mut self, bytes: usize, work: u64) -> wasmtime::Result<()> {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let total = self
            .costs
            .per_argument_byte
            .checked_mul(bytes)
            .and_then(|b| b.checked_add(self.costs.call))
            .and_then(|b| b.checked_add(work))
            .unwrap_or(u64::MAX);
        self.charge(total)
    }

    /// Fuel charged for host calls so far in this call.
    pub fn charged(&self) -> u64 {
        self.charged
    }
}

fn host_fuel_hook<T: StoreData>(
    mut store: StoreContextMut<'_, T>,
    hook: CallHook,
) -> wasmtime::Result<()> {
    match hook {
        CallHook::CallingHost => {
            let fuel = store.get_fuel()?;
            let meter = &mut store.data_mut().base().fuel;
            meter.available = fuel;
            meter.pending = 0;
        }
        CallHook::ReturningFromHost => {
            let meter = &mut store.data_mut().base().fuel;
            let pending = std::mem::take(&mut meter.pending);
            if pending > 0 {
                meter.charged = meter.charged.saturating_add(pending);
                let fuel = store.get_fuel()?;
                match fuel.checked_sub(pending) {
                    Some(left) => store.set_fuel(left)?,
                    None => {
                        store.set_fuel(0)?;
                        return Err(wasmtime::Trap::OutOfFuel.into());
                    }
                }
            }
        }
        CallHook::CallingWasm | CallHook::ReturningFromWasm => {}
    }
    Ok(())
}

/// A WIT world: the one part of a module kind that is not data. One world serves every contract
/// version of its kind ([`Kind::contracts`]): its pre-instance and instance say which
/// contract's bindings a module was linked with (an enum with one variant per contract), so
/// slots, shadows and canaries hold versions of different contracts side by side.
pub trait World: Sized + Send + Sync + 'static {
    /// The kind (its row of [`KINDS`](super::kinds::KINDS)).
    const KIND: Kind;
    /// Store data of one call, shared by every contract of the kind.
    type Data: StoreData;
    /// The bindgen-generated pre-instance of the module's contract.
    type Pre: Clone + Send + Sync + 'static;
    /// The bindgen-generated instance of the module's contract.
    type Instance;

    /// The host interfaces of contract `contract` (one of [`Kind::contracts`]).
    fn linker(engine: &Engine, contract: Version) -> wasmtime::Result<Linker<Self::Data>>;
    /// Typed pre-instance, with `contract`'s bindings, from one linked by `contract`'s linker.
    fn pre(pre: InstancePre<Self::Data>, contract: Version) -> wasmtime::Result<Self::Pre>;
    /// Instantiates in `store`.
    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<Self::Data>,
    ) -> wasmtime::Result<Self::Instance>;
    /// Store data for calls that need no input state (describe, warm-up).
    fn idle_data(base: CallBase) -> Result<Self::Data, HostFailure>;
    /// Calls the world's `describe` export.
    fn describe(
        instance: &Self::Instance,
        store: &mut Store<Self::Data>,
    ) -> wasmtime::Result<ModuleInfo>;
    /// Runs the module once on realistic inputs of its kind (warm-up); returns the fuel used.
    fn dry_run(module: &Module<Self>) -> Result<u64, CallError>;
    /// The state `module` starts with when it takes over a slot from `previous` (that version
    /// and the state the host kept for it; `None` at the node's start). Contracts that keep
    /// no state start from nothing, without a call.
    fn take_over(
        module: &Module<Self>,
        previous: Option<(&Module<Self>, Vec<u8>)>,
    ) -> Result<Vec<u8>, CallError> {
        let _ = (module, previous);
        Ok(Vec::new())
    }
}

/// What a world's [`World::linker`] or [`World::pre`] answers for a contract version it has no
/// bindings of (a row of [`KINDS`](super::kinds::KINDS) without its bindgen module: the host's
/// bug, caught when the runtime starts).
pub(crate) fn unimplemented_contract(kind: Kind, contract: Version) -> wasmtime::Error {
    wasmtime::Error::msg(format!(
        "the host lists modnode:{}@{contract} but has no bindings of it",
        kind.package()
    ))
}

/// The host implementation of every contract of a world's kind: one linker per contract
/// version, built once per runtime. [`Module::prepare`] picks the one of the module's declared
/// contract.
pub(crate) struct ContractLinkers<W: World> {
    linkers: Vec<(Version, Linker<W::Data>)>,
}

impl<W: World> ContractLinkers<W> {
    /// A linker for each contract of `W`'s kind.
    pub(crate) fn new(engine: &Engine) -> wasmtime::Result<Self> {
        let linkers = W::KIND
            .contracts()
            .iter()
            .map(|c| Ok((c.version, W::linker(engine, c.version)?)))
            .collect::<wasmtime::Result<_>>()?;
        Ok(Self { linkers })
    }

    fn get(&self, contract: Version) -> Option<&Linker<W::Data>> {
        self.linkers
            .iter()
            .find(|(v, _)| *v == contract)
            .map(|(_, l)| l)
    }
}

/// What every call needs from the runtime; cheap to clone into a guest thread.
#[derive(Clone)]
pub(crate) struct CallSettings {
    pub(crate) engine: Engine,
    /// Fuel a call starts with (for deposits calls: the base the per-deposit share is added
    /// to).
    pub(crate) fuel: u64,
    /// Fuel added to a call's budget per item of its input (deposits: per deposit in the
    /// block); 0 for kinds with a fixed budget, and under a fixed `fuel_per_call`.
    pub(crate) fuel_per_item: u64,
    pub(crate) limits: Limits,
    pub(crate) host_calls: HostCallFuel,
    /// The runtime's cache of signature sets known valid, shared by all its modules.
    pub(crate) sig_cache: Arc<SigCache>,
}

/// Result of one call: the value or a typed error, the store data and the fuel used.
pub struct CallOutcome<T, R> {
    /// The value, or why the call failed.
    pub result: Result<R, CallError>,
    /// The store data after the call (overlays and so on).
    pub data: T,
    /// Fuel the call used, wasm and host calls together.
    pub fuel_used: u64,
}

/// What a warm-up found: the module instantiated and ran on realistic inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WarmupReport {
    /// Fuel of the dry run.
    pub fuel: u64,
    /// Wall-clock time of the dry run, in microseconds (instantiation included).
    pub latency_us: u64,
    /// Recent real inputs of the node the dry run replayed (0: only the built-in realistic
    /// inputs of the kind, e.g. on a node that has not seen any yet). `fuel` covers them all.
    pub real_inputs: u32,
    /// The warm-up failed here and the module was admitted on the chain's word anyway (a
    /// scheduled module): it is not attested ready, and nothing above was measured.
    pub failed: bool,
}

/// A loaded, compiled and linked module of world `W`, described by itself. Cloning is cheap.
pub struct Module<W: World> {
    meta: ModuleMeta,
    /// The host contract the module is linked with.
    contract: Version,
    pre: W::Pre,
    settings: CallSettings,
    /// Shared by every clone: the version's calls, faults and fuel.
    stats: Arc<CallStats>,
}

impl<W: World> Clone for Module<W> {
    fn clone(&self) -> Self {
        Self {
            meta: self.meta.clone(),
            contract: self.contract,
            pre: self.pre.clone(),
            settings: self.settings.clone(),
            stats: self.stats.clone(),
        }
    }
}

impl<W: World> Module<W> {
    /// Prepares a compiled component: links it with the host implementation of the contract it
    /// declares, instantiates it once and reads its `describe`.
    pub(crate) fn prepare(
        settings: CallSettings,
        linkers: &ContractLinkers<W>,
        component: &wasmtime::component::Component,
        info: ComponentInfo,
    ) -> Result<Self, LoadError> {
        let name = super::display_name(&info, None);
        let link = |e: wasmtime::Error| LoadError::Link {
            module: name.clone(),
            message: format!("{e:?}"),
        };
        // Validation refused every module whose contract the host does not implement.
        let contract = info
            .host_contract()
            .map(|c| c.version)
            .filter(|v| linkers.get(*v).is_some())
            .ok_or_else(|| LoadError::Link {
                module: name.clone(),
                message: format!(
                    "the module declares {}; this node implements {}",
                    info.contract_name(),
                    W::KIND.implemented_exports()
                ),
            })?;
        let linker = linkers.get(contract).ok_or_else(|| LoadError::Link {
            module: name.clone(),
            message: format!("no host implementation of {}", info.contract_name()),
        })?;
        // Before linking: a wrong signature otherwise surfaces at the first instantiation as
        // a conversion failure naming no function.
        super::signatures::check_exports(W::KIND, contract, &settings.engine, component).map_err(
            |source| LoadError::Signature {
                module: name.clone(),
                source: Box::new(source),
            },
        )?;
        let pre =
            W::pre(linker.instantiate_pre(component).map_err(link)?, contract).map_err(link)?;
        let described = run::<W, _>(&settings, &pre, &name, W::idle_data, W::describe);
        let module_info = described
            .result
            .and_then(|info| {
                let output = super::bounds::Output {
                    module: &name,
                    kind: W::KIND,
                };
                output.describe(&info)?;
                Ok(info)
            })
            .map_err(|e| LoadError::Warmup {
                module: name.clone(),
                source: Box::new(e),
            })?;
        Ok(Self {
            meta: ModuleMeta {
                component: info,
                info: module_info,
            },
            contract,
            pre,
            settings,
            stats: Arc::default(),
        })
    }

    /// The host contract the module runs on (the version of its kind's contract whose bindings
    /// and host implementation it is linked with).
    pub fn contract(&self) -> Version {
        self.contract
    }

    /// The module's identity.
    pub fn meta(&self) -> &ModuleMeta {
        &self.meta
    }

    /// The component's sha256.
    pub fn hash(&self) -> crate::hashes::ModuleHash {
        self.meta.component.sha256
    }

    /// The settings every call of this module uses.
    /// The cache of signature sets known valid its BLS host calls answer from (its runtime's).
    pub fn sig_cache(&self) -> Arc<SigCache> {
        self.settings.sig_cache.clone()
    }

    pub(crate) fn settings(&self) -> &CallSettings {
        &self.settings
    }

    /// The linked pre-instance.
    pub(crate) fn pre(&self) -> &W::Pre {
        &self.pre
    }

    /// What this version has done since its warm-up: calls, its own faults, fuel.
    pub fn call_counts(&self) -> CallCounts {
        self.stats.counts()
    }

    /// The counters calls of this version go to (sessions share them).
    pub(crate) fn stats(&self) -> &Arc<CallStats> {
        &self.stats
    }

    /// Fuel budget of each call.
    pub fn fuel_budget(&self) -> u64 {
        self.settings.fuel
    }

    /// Warms the module: instantiates it and runs it on realistic inputs of its kind, recording
    /// fuel and latency. A module must pass this before it may serve calls from a slot.
    pub fn warm(&self) -> Result<WarmupReport, CallError> {
        self.warm_with(|_| Ok((0, 0)))
    }

    /// [`warm`](Self::warm), then `real`: a replay of recent real inputs of the kind the node
    /// saw, returning the fuel they used and how many ran. The caller bounds `real` (count and
    /// time); a fault on a real input fails the warm-up like a fault on the built-in ones.
    pub fn warm_with(
        &self,
        real: impl FnOnce(&Self) -> Result<(u64, u32), CallError>,
    ) -> Result<WarmupReport, CallError> {
        let start = Instant::now();
        let built_in = W::dry_run(self)?;
        let (real_fuel, real_inputs) = real(self)?;
        // The dry runs were not service: the counters start here.
        self.stats.reset();
        Ok(WarmupReport {
            fuel: built_in.saturating_add(real_fuel),
            latency_us: micros(start.elapsed()),
            real_inputs,
            failed: false,
        })
    }

    /// Runs one call in a fresh store made by `data`, on a guest thread.
    pub(crate) fn call<R: Send + 'static>(
        &self,
        data: impl FnOnce(CallBase) -> Result<W::Data, HostFailure> + Send + 'static,
        f: impl FnOnce(&W::Instance, &mut Store<W::Data>) -> wasmtime::Result<R> + Send + 'static,
    ) -> CallOutcome<Option<W::Data>, R> {
        let outcome = run::<W, R>(&self.settings, &self.pre, &self.meta.name(), data, f);
        self.stats
            .record(outcome.fuel_used, outcome.result.as_ref().err());
        outcome
    }

    /// The fuel budget of a call over `items` items of input: the base budget plus the
    /// per-item share; `None` if it does not fit a `u64`.
    pub(crate) fn budget_for(&self, items: u64) -> Option<u64> {
        self.settings
            .fuel_per_item
            .checked_mul(items)?
            .checked_add(self.settings.fuel)
    }

    /// [`call`](Self::call) starting with `fuel` instead of the base budget.
    pub(crate) fn call_with_fuel<R: Send + 'static>(
        &self,
        fuel: u64,
        data: impl FnOnce(CallBase) -> Result<W::Data, HostFailure> + Send + 'static,
        f: impl FnOnce(&W::Instance, &mut Store<W::Data>) -> wasmtime::Result<R> + Send + 'static,
    ) -> CallOutcome<Option<W::Data>, R> {
        let settings = CallSettings {
            fuel,
            ..self.settings.clone()
        };
        let outcome = run::<W, R>(&settings, &self.pre, &self.meta.name(), data, f);
        self.stats
            .record(outcome.fuel_used, outcome.result.as_ref().err());
        outcome
    }

    /// Instantiates the module `iterations` times in fresh idle stores and returns the
    /// nanoseconds each took (for `modnode bench host-call`).
    pub fn time_instantiation(&self, iterations: usize) -> Result<Vec<u64>, CallError> {
        let name = self.meta.name();
        let settings = self.settings.clone();
        let pre = self.pre.clone();
        super::threads::run_on_guest_thread(move || {
            let mut samples = Vec::with_capacity(iterations);
            for _ in 0..iterations {
                let data = W::idle_data(CallBase::new(&settings))?;
                let mut store = new_store(&settings, data, &name)?;
                let start = Instant::now();
                let instance = W::instantiate(&pre, &mut store);
                let elapsed = start.elapsed();
                instance.map_err(|e| {
                    let breach = store.data_mut().base().limiter.breach();
                    CallError::classify(&name, &e, breach, settings.fuel, false)
                })?;
                samples.push(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
            }
            Ok(samples)
        })
    }
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

pub(crate) fn new_store<T: StoreData>(
    settings: &CallSettings,
    data: T,
    name: &str,
) -> Result<Store<T>, CallError> {
    let mut store = Store::new(&settings.engine, data);
    store.limiter(|d| &mut d.base().limiter);
    store.call_hook(host_fuel_hook::<T>);
    store.set_fuel(settings.fuel).map_err(|e| {
        HostFailure::new(
            name,
            HostFailureKind::Runtime,
            format!("cannot set fuel: {e:?}"),
        )
    })?;
    Ok(store)
}

/// Runs `f` on a fresh instance in a fresh store holding `data`, on a guest thread.
fn run<W: World, R: Send + 'static>(
    settings: &CallSettings,
    pre: &W::Pre,
    name: &str,
    data: impl FnOnce(CallBase) -> Result<W::Data, HostFailure> + Send + 'static,
    f: impl FnOnce(&W::Instance, &mut Store<W::Data>) -> wasmtime::Result<R> + Send + 'static,
) -> CallOutcome<Option<W::Data>, R> {
    let settings = settings.clone();
    let pre = pre.clone();
    let module = name.to_string();
    super::threads::run_on_guest_thread(move || {
        let data = match data(CallBase::new(&settings)) {
            Ok(d) => d,
            Err(e) => {
                return CallOutcome {
                    result: Err(e.into()),
                    data: None,
                    fuel_used: 0,
                };
            }
        };
        let mut store = match new_store(&settings, data, &module) {
            Ok(s) => s,
            Err(e) => {
                return CallOutcome {
                    result: Err(e),
                    data: None,
                    fuel_used: 0,
                };
            }
        };
        let (result, instantiated) = match W::instantiate(&pre, &mut store) {
            Ok(i) => (f(&i, &mut store), true),
            Err(e) => (Err(e), false),
        };
        let remaining = store.get_fuel().unwrap_or(0);
        let fuel_used = settings.fuel.saturating_sub(remaining);
        let breach = store.data_mut().base().limiter.breach();
        let result = result
            .map_err(|e| CallError::classify(&module, &e, breach, settings.fuel, instantiated));
        CallOutcome {
            result,
            data: Some(store.into_data()),
            fuel_used,
        }
    })
}

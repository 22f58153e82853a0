//! Host side of the `modnode:deposits` world: the registry overlay and BLS verification a
//! deposits module imports, and typed calls into its `processor` export.

use wasmtime::component::{HasSelf, Linker};

use super::limits::Limiter;
use super::{
    CallError, CallSettings, ComponentInfo, HasLimiter, LoadError, ModuleInfo, ModuleMeta, Runtime,
};
use crate::state::{OverlayError, RegistryDelta, RegistryOverlay, SharedRegistry};

mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/deposits"],
        world: "modnode:deposits/deposits",
        additional_derives: [PartialEq, Eq],
        imports: { default: trappable },
    });
}

pub use bindings::modnode::deposits::types::{
    BlockContext, Deposit, Eth1Data as WitEth1Data, Outcome, ProcessError, RegistryError,
    SignatureSet,
};
use bindings::modnode::deposits::{crypto, registry, types};

/// What `registry.index-of` returns for an unknown pubkey (never a valid index).
pub const NOT_FOUND: u32 = u32::MAX;

/// Store data of one deposits call.
pub struct DepositsCtx {
    overlay: RegistryOverlay,
    limiter: Limiter,
}

impl HasLimiter for DepositsCtx {
    fn limiter(&mut self) -> &mut Limiter {
        &mut self.limiter
    }
}

/// The WIT error for an overlay refusal; `None` for host failures (which trap).
pub fn registry_error(e: &OverlayError) -> Option<RegistryError> {
    Some(match e {
        OverlayError::DuplicatePubkey => RegistryError::DuplicatePubkey,
        OverlayError::BadLength(field) => RegistryError::BadLength((*field).to_string()),
        OverlayError::UnknownIndex(i) => RegistryError::UnknownIndex(*i),
        OverlayError::BalanceOverflow(i) => RegistryError::BalanceOverflow(*i),
        OverlayError::RegistryFull => RegistryError::RegistryFull,
        OverlayError::Poisoned => return None,
    })
}

/// Maps an overlay refusal to the WIT error, or to a trap for host failures.
fn registry_result<T>(r: Result<T, OverlayError>) -> wasmtime::Result<Result<T, RegistryError>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => match registry_error(&e) {
            Some(wit) => Ok(Err(wit)),
            None => Err(wasmtime::format_err!("{e}")),
        },
    }
}

impl registry::Host for DepositsCtx {
    fn index_of(&mut self, pubkey: Vec<u8>) -> wasmtime::Result<u32> {
        self.overlay
            .index_of(&pubkey)
            .map(|found| found.unwrap_or(NOT_FOUND))
            .map_err(|e| wasmtime::format_err!("{e}"))
    }

    fn validator_count(&mut self) -> wasmtime::Result<u32> {
        Ok(self.overlay.validator_count())
    }

    fn add_validator(
        &mut self,
        pubkey: Vec<u8>,
        withdrawal_credentials: Vec<u8>,
        effective_balance: u64,
        balance: u64,
    ) -> wasmtime::Result<Result<u32, RegistryError>> {
        registry_result(self.overlay.add_validator(
            &pubkey,
            &withdrawal_credentials,
            effective_balance,
            balance,
        ))
    }

    fn increase_balance(
        &mut self,
        index: u32,
        amount: u64,
    ) -> wasmtime::Result<Result<(), RegistryError>> {
        registry_result(self.overlay.increase_balance(index, amount))
    }
}

impl crypto::Host for DepositsCtx {
    fn bls_verify(
        &mut self,
        pubkey: Vec<u8>,
        message: Vec<u8>,
        signature: Vec<u8>,
    ) -> wasmtime::Result<bool> {
        Ok(crate::crypto::verify(&pubkey, &message, &signature))
    }

    fn bls_verify_batch(&mut self, sets: Vec<SignatureSet>) -> wasmtime::Result<bool> {
        let sets: Vec<crate::crypto::SignatureSet<'_>> = sets
            .iter()
            .map(|s| crate::crypto::SignatureSet {
                pubkey: &s.pubkey,
                message: &s.message,
                signature: &s.signature,
            })
            .collect();
        Ok(crate::crypto::verify_batch(&sets))
    }
}

impl types::Host for DepositsCtx {}
impl bindings::modnode::types::types::Host for DepositsCtx {}

/// The deposits world's host interfaces, linked once per runtime.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<DepositsCtx>> {
    let mut linker = Linker::new(engine);
    bindings::Deposits::add_to_linker::<_, HasSelf<DepositsCtx>>(&mut linker, |ctx| ctx)?;
    Ok(linker)
}

/// What a successful deposits call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositsOutput {
    /// One outcome per deposit, in order.
    pub outcomes: Vec<Outcome>,
    /// The registry changes to apply.
    pub delta: RegistryDelta,
    /// The `eth1_deposit_index` after the block, as the module reports it.
    pub eth1_deposit_index: u64,
    /// Fuel the call used.
    pub fuel_used: u64,
}

/// A loaded deposits module.
#[derive(Clone)]
pub struct DepositsModule {
    meta: ModuleMeta,
    pre: bindings::DepositsPre<DepositsCtx>,
    settings: CallSettings,
}

impl DepositsModule {
    pub(crate) fn prepare(
        runtime: &Runtime,
        pre: wasmtime::component::InstancePre<DepositsCtx>,
        component: ComponentInfo,
    ) -> Result<Self, LoadError> {
        let name = super::display_name(&component, None);
        let pre = bindings::DepositsPre::new(pre).map_err(|e| LoadError::Link {
            module: name.clone(),
            message: format!("{e:?}"),
        })?;
        let settings = runtime.call_settings();
        // Warm-up: instantiate and describe once, so the first real call is not the first run.
        let info = describe(&settings, &pre, &name).map_err(|e| LoadError::Warmup {
            module: name,
            source: Box::new(e),
        })?;
        Ok(Self {
            meta: ModuleMeta { component, info },
            pre,
            settings,
        })
    }

    /// The module's identity.
    pub fn meta(&self) -> &ModuleMeta {
        &self.meta
    }

    /// Applies a block's deposits over `registry`. `Ok(Err(_))` means the module rejected the
    /// block (it is invalid); `Err(_)` means the module failed. Either way nothing was written:
    /// the caller applies [`DepositsOutput::delta`] only on `Ok(Ok(_))`.
    pub fn process(
        &self,
        registry: SharedRegistry,
        ctx: BlockContext,
        deposits: Vec<Deposit>,
    ) -> Result<Result<DepositsOutput, ProcessError>, CallError> {
        let name = self.meta.name();
        let overlay = RegistryOverlay::new(registry).map_err(|e| CallError::Host {
            module: name.clone(),
            message: e.to_string(),
        })?;
        let data = DepositsCtx {
            overlay,
            limiter: Limiter::new(self.settings.limits),
        };
        let pre = self.pre.clone();
        let outcome = super::call(self.settings.clone(), name, data, move |store| {
            let instance = pre.instantiate(&mut *store)?;
            instance
                .modnode_deposits_processor()
                .call_process(&mut *store, &ctx, &deposits)
        });
        let fuel_used = outcome.fuel_used;
        Ok(outcome.result?.map(|processed| DepositsOutput {
            outcomes: processed.outcomes,
            delta: outcome.data.overlay.into_delta(),
            eth1_deposit_index: processed.eth1_deposit_index,
            fuel_used,
        }))
    }

    /// Instantiates the module `iterations` times in fresh stores and returns the nanoseconds
    /// each took (for `modnode bench host-call`).
    pub fn time_instantiation(
        &self,
        registry: SharedRegistry,
        iterations: usize,
    ) -> Result<Vec<u64>, CallError> {
        let name = self.meta.name();
        let settings = self.settings.clone();
        let pre = self.pre.clone();
        super::threads::run_on_guest_thread(move || {
            let mut samples = Vec::with_capacity(iterations);
            for _ in 0..iterations {
                let overlay =
                    RegistryOverlay::new(registry.clone()).map_err(|e| CallError::Host {
                        module: name.clone(),
                        message: e.to_string(),
                    })?;
                let data = DepositsCtx {
                    overlay,
                    limiter: Limiter::new(settings.limits),
                };
                let mut store = wasmtime::Store::new(&settings.engine, data);
                store.limiter(|d| d.limiter());
                store.set_fuel(settings.fuel).map_err(|e| CallError::Host {
                    module: name.clone(),
                    message: format!("{e:?}"),
                })?;
                let start = std::time::Instant::now();
                let instance = pre.instantiate(&mut store);
                let elapsed = start.elapsed();
                instance.map_err(|e| CallError::classify(&name, &e, None, settings.fuel))?;
                samples.push(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
            }
            Ok(samples)
        })
    }
}

fn describe(
    settings: &CallSettings,
    pre: &bindings::DepositsPre<DepositsCtx>,
    name: &str,
) -> Result<ModuleInfo, CallError> {
    let registry: SharedRegistry =
        std::sync::Arc::new(std::sync::RwLock::new(crate::state::Registry::new()));
    let overlay = RegistryOverlay::new(registry).map_err(|e| CallError::Host {
        module: name.to_string(),
        message: e.to_string(),
    })?;
    let data = DepositsCtx {
        overlay,
        limiter: Limiter::new(settings.limits),
    };
    let pre = pre.clone();
    let info = super::call(settings.clone(), name.to_string(), data, move |store| {
        let instance = pre.instantiate(&mut *store)?;
        instance
            .modnode_deposits_processor()
            .call_describe(&mut *store)
    })
    .result?;
    Ok(ModuleInfo {
        kind: info.kind,
        version: info.version,
        description: info.description,
        params: info.params,
    })
}

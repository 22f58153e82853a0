//! The sandboxed, deterministic module runtime.
//!
//! - One process-wide [`Engine`](wasmtime::Engine) ([`engine::engine`]), configured for
//!   determinism and fuel metering.
//! - Components are validated ([`inspect`]), compiled once and cached on disk ([`cache`]), and
//!   prepared as one `InstancePre` per loaded module.
//! - Every call gets a fresh `Store` with its own fuel budget and [`limits`], runs on a
//!   big-stack guest thread ([`threads`]), and writes only to an overlay the caller applies on
//!   success: a trap, an out-of-fuel or a limit breach is a typed [`CallError`] and changes
//!   nothing.
//! - The kinds are data ([`kinds::KINDS`]); one generic [`module::Module`] does loading,
//!   instantiation, fuel (wasm and host calls), limits, error mapping and warm-up for all of
//!   them; one small host module per WIT world ([`deposits`], [`checkpoint`],
//!   [`gossip_policy`]) adds only its bindings and typed calls.
//! - The [`profile::EngineProfile`] pins everything that decides consensus outcomes.
//! - Each kind has a [`slot::Slot`] (active, scheduled, shadow, canary, previous) and
//!   [`modules::Modules`] is the node-facing API over them.

pub mod bounds;
pub mod cache;
pub mod call_stats;
pub mod checkpoint;
pub mod deposits;
pub mod engine;
pub mod error;
pub mod gossip_policy;
pub mod inspect;
pub mod kinds;
pub mod limits;
pub mod module;
pub mod modules;
pub mod profile;
pub mod session;
pub mod signatures;
pub mod slot;
pub mod threads;

use std::path::PathBuf;

use wasmtime::Engine;

pub use error::{CallError, HostFailure, HostFailureKind, LoadError, ModuleFault, OverBound};
pub use inspect::{ComponentInfo, ValidationError, Version};
pub use kinds::{KINDS, Kind, KindSpec, Scope};
pub use limits::{Limits, Resource};
pub use module::{Module, WarmupReport, World};
pub use modules::{Modules, SlotError};
pub use profile::EngineProfile;
pub use slot::{Mode, SlotStatus};

/// Tunables of a [`Runtime`].
#[derive(Debug, Clone, Default)]
pub struct RuntimeConfig {
    /// Fuel each call starts with, for every kind and whatever its input (tests and benches:
    /// no per-deposit share); `None` takes each kind's budget from this build's
    /// [`EngineProfile`] (for deposits, scaled with the block's deposits). Running out is a
    /// deterministic failure.
    pub fuel_per_call: Option<u64>,
    /// Memory, table and instance limits of each call's store.
    pub limits: Limits,
    /// Directory for compiled artifacts; `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
}

/// What a module says about itself, read at load time from its `describe` export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Module kind as the module reports it.
    pub kind: String,
    /// Algorithm version.
    pub version: u32,
    /// Short description.
    pub description: String,
    /// Output-changing parameters.
    pub params: Vec<(String, String)>,
}

/// Identity of a loaded module: what validation found plus what the module reported.
#[derive(Debug, Clone)]
pub struct ModuleMeta {
    /// Static facts (kind, contract, hash, imports, exports).
    pub component: ComponentInfo,
    /// The module's own description.
    pub info: ModuleInfo,
}

impl ModuleMeta {
    /// `<kind>-v<version>@<first 12 hex digits of sha256>`: how errors and logs name a module.
    pub fn name(&self) -> String {
        display_name(&self.component, Some(self.info.version))
    }
}

fn display_name(component: &ComponentInfo, version: Option<u32>) -> String {
    let hash = hex::encode(component.sha256.0.get(..6).unwrap_or_default());
    match version {
        Some(v) => format!("{}-v{v}@{hash}", component.kind),
        None => format!("{}@{hash}", component.kind),
    }
}

/// A compiled, linked and described module of any kind: what the engine makes of a module
/// (each a [`Module`], the typed form), before its warm-up.
#[derive(Clone)]
pub enum LinkedModule {
    /// A deposits module.
    Deposits(deposits::DepositsModule),
    /// A checkpoint module.
    Checkpoint(checkpoint::CheckpointModule),
    /// A gossip-policy module.
    GossipPolicy(gossip_policy::GossipPolicyModule),
}

impl LinkedModule {
    /// The module's identity.
    pub fn meta(&self) -> &ModuleMeta {
        match self {
            LinkedModule::Deposits(m) => m.meta(),
            LinkedModule::Checkpoint(m) => m.meta(),
            LinkedModule::GossipPolicy(m) => m.meta(),
        }
    }

    /// Warms the module (see [`Module::warm`]).
    pub fn warm(&self) -> Result<WarmupReport, CallError> {
        match self {
            LinkedModule::Deposits(m) => m.warm(),
            LinkedModule::Checkpoint(m) => m.warm(),
            LinkedModule::GossipPolicy(m) => m.warm(),
        }
    }
}

/// Loads modules and runs calls into them.
pub struct Runtime {
    engine: Engine,
    cache: cache::ArtifactCache,
    config: RuntimeConfig,
    linkers: Linkers,
    /// Signature sets known valid, shared by every module loaded here (`crypto::cache`).
    sig_cache: std::sync::Arc<crate::crypto::SigCache>,
}

/// The host implementation of every contract of every kind.
struct Linkers {
    deposits: module::ContractLinkers<deposits::Deposits>,
    checkpoint: module::ContractLinkers<checkpoint::Checkpoint>,
    gossip_policy: module::ContractLinkers<gossip_policy::GossipPolicy>,
}

impl Runtime {
    /// A runtime on the process-wide engine.
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let engine = engine::engine().clone();
        let link_err = |kind: Kind, e: wasmtime::Error| LoadError::Link {
            module: format!("{kind} host interfaces"),
            message: format!("{e:?}"),
        };
        let linkers = Linkers {
            deposits: module::ContractLinkers::new(&engine)
                .map_err(|e| link_err(Kind::Deposits, e))?,
            checkpoint: module::ContractLinkers::new(&engine)
                .map_err(|e| link_err(Kind::Checkpoint, e))?,
            gossip_policy: module::ContractLinkers::new(&engine)
                .map_err(|e| link_err(Kind::GossipPolicy, e))?,
        };
        let cache = cache::ArtifactCache::new(&engine, config.cache_dir.clone())?;
        Ok(Self {
            engine,
            cache,
            config,
            linkers,
            sig_cache: std::sync::Arc::default(),
        })
    }

    /// The cache of signature sets known valid that the BLS host calls of every module loaded
    /// here answer from; the chain's pre-verifier fills it.
    pub fn sig_cache(&self) -> std::sync::Arc<crate::crypto::SigCache> {
        self.sig_cache.clone()
    }

    /// This runtime with `cache` for the modules loaded from now on (e.g.
    /// `SigCache::off()` for benchmarks that time BLS on inputs they repeat).
    pub fn with_sig_cache(mut self, cache: std::sync::Arc<crate::crypto::SigCache>) -> Self {
        self.sig_cache = cache;
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The artifact cache (for its statistics).
    pub fn cache(&self) -> &cache::ArtifactCache {
        &self.cache
    }

    /// Validates, compiles (or loads from the cache), links with the host implementation of the
    /// contract the module declares, and instantiates a module once (its `describe`): after this
    /// returns, no call pays compilation. [`LinkedModule::warm`] then
    /// runs it on realistic inputs.
    pub fn load(&self, bytes: &[u8]) -> Result<LinkedModule, LoadError> {
        let info = inspect::validate(bytes)?;
        self.load_validated(bytes, info)
    }

    /// [`load`](Self::load) of bytes already validated (`info` is what validation found): the
    /// bytes are not parsed again before compiling.
    pub fn load_validated(
        &self,
        bytes: &[u8],
        info: ComponentInfo,
    ) -> Result<LinkedModule, LoadError> {
        let name = display_name(&info, None);
        let component = self
            .cache
            .load(&self.engine, bytes, info.sha256.as_bytes(), &name)?;
        self.link(component, info)
    }

    /// Loads the validated module `info` from `artifact`, a file its upload's compiler wrote
    /// outside the artifact cache (the module lifecycle's staging directory), with this
    /// runtime's engine: the cache is neither read nor written, so a module that fails later
    /// leaves nothing in it. The file must be this process's own compiler output (see
    /// [`cache::ArtifactCache::load_staged`]).
    pub fn load_staged(
        &self,
        artifact: &std::path::Path,
        info: ComponentInfo,
    ) -> Result<LinkedModule, LoadError> {
        let name = display_name(&info, None);
        let component = cache::ArtifactCache::load_staged(&self.engine, artifact, &name)?;
        self.link(component, info)
    }

    /// Links `component` with the host implementation of the contract `info` declares and
    /// instantiates it once (its `describe`).
    fn link(
        &self,
        component: wasmtime::component::Component,
        info: ComponentInfo,
    ) -> Result<LinkedModule, LoadError> {
        let settings = self.call_settings(info.kind);
        Ok(match info.kind {
            Kind::Deposits => LinkedModule::Deposits(Module::prepare(
                settings,
                &self.linkers.deposits,
                &component,
                info,
            )?),
            Kind::Checkpoint => LinkedModule::Checkpoint(Module::prepare(
                settings,
                &self.linkers.checkpoint,
                &component,
                info,
            )?),
            Kind::GossipPolicy => LinkedModule::GossipPolicy(Module::prepare(
                settings,
                &self.linkers.gossip_policy,
                &component,
                info,
            )?),
        })
    }

    /// Loads a module that must be of `kind`.
    pub fn load_kind(&self, bytes: &[u8], kind: Kind) -> Result<LinkedModule, LoadError> {
        let info = inspect::validate(bytes)?;
        let found = info.kind;
        if found != kind {
            return Err(LoadError::Link {
                module: format!("{found} module"),
                message: format!("expected a {kind} module, got a {found} module"),
            });
        }
        self.load_validated(bytes, info)
    }

    fn call_settings(&self, kind: Kind) -> module::CallSettings {
        let profile = EngineProfile::build();
        let fuel_per_item = match (kind, self.config.fuel_per_call) {
            (Kind::Deposits, None) => profile.deposits_budget_per_deposit,
            _ => 0,
        };
        module::CallSettings {
            engine: self.engine.clone(),
            fuel: self
                .config
                .fuel_per_call
                .unwrap_or_else(|| profile.budget(kind)),
            fuel_per_item,
            limits: Limits {
                memory_bytes: kind
                    .bounds()
                    .memory_bytes
                    .map_or(self.config.limits.memory_bytes, |m| {
                        m.min(self.config.limits.memory_bytes)
                    }),
                ..self.config.limits
            },
            host_calls: profile.host_calls,
            sig_cache: self.sig_cache.clone(),
        }
    }
}

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
//! - One host module per WIT world: [`deposits`], [`checkpoint`], [`gossip_policy`].

pub mod cache;
pub mod checkpoint;
pub mod deposits;
pub mod engine;
pub mod error;
pub mod gossip_policy;
pub mod inspect;
pub mod limits;
pub mod threads;

use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::{Engine, Store};

pub use error::{CallError, LoadError};
pub use inspect::{ComponentInfo, Kind, ValidationError, Version};
pub use limits::{Limits, Resource};

/// Tunables of a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Fuel each call starts with. Running out is a deterministic failure.
    pub fuel_per_call: u64,
    /// Memory, table and instance limits of each call's store.
    pub limits: Limits,
    /// Directory for compiled artifacts; `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            fuel_per_call: 2_000_000_000,
            limits: Limits::default(),
            cache_dir: None,
        }
    }
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
    let hash = hex::encode(component.sha256.get(..6).unwrap_or_default());
    match version {
        Some(v) => format!("{}-v{v}@{hash}", component.kind),
        None => format!("{}@{hash}", component.kind),
    }
}

/// A loaded, compiled, linked and warmed module of any kind.
#[derive(Clone)]
pub enum LoadedModule {
    /// A deposits module.
    Deposits(deposits::DepositsModule),
    /// A checkpoint module.
    Checkpoint(checkpoint::CheckpointModule),
    /// A gossip-policy module.
    GossipPolicy(gossip_policy::GossipPolicyModule),
}

impl LoadedModule {
    /// The module's identity.
    pub fn meta(&self) -> &ModuleMeta {
        match self {
            LoadedModule::Deposits(m) => m.meta(),
            LoadedModule::Checkpoint(m) => m.meta(),
            LoadedModule::GossipPolicy(m) => m.meta(),
        }
    }
}

/// Loads modules and runs calls into them.
pub struct Runtime {
    engine: Engine,
    cache: cache::ArtifactCache,
    config: RuntimeConfig,
    linkers: Arc<Linkers>,
}

struct Linkers {
    deposits: wasmtime::component::Linker<deposits::DepositsCtx>,
    checkpoint: wasmtime::component::Linker<checkpoint::CheckpointCtx>,
    gossip_policy: wasmtime::component::Linker<gossip_policy::PolicyCtx>,
}

impl Runtime {
    /// A runtime on the process-wide engine.
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let engine = engine::engine().clone();
        let link_err = |kind: &str, e: wasmtime::Error| LoadError::Link {
            module: format!("{kind} host interfaces"),
            message: format!("{e:?}"),
        };
        let linkers = Linkers {
            deposits: deposits::linker(&engine).map_err(|e| link_err("deposits", e))?,
            checkpoint: checkpoint::linker(&engine).map_err(|e| link_err("checkpoint", e))?,
            gossip_policy: gossip_policy::linker(&engine)
                .map_err(|e| link_err("gossip-policy", e))?,
        };
        let cache = cache::ArtifactCache::new(&engine, config.cache_dir.clone())?;
        Ok(Self {
            engine,
            cache,
            config,
            linkers: Arc::new(linkers),
        })
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

    /// Validates, compiles (or loads from the cache), links and warms a module: after this
    /// returns, the first real call pays no compilation.
    pub fn load(&self, bytes: &[u8]) -> Result<LoadedModule, LoadError> {
        let component_info = inspect::validate(bytes)?;
        let name = display_name(&component_info, None);
        let component = self
            .cache
            .load(&self.engine, bytes, &component_info.sha256, &name)?;
        let link = |e: wasmtime::Error| LoadError::Link {
            module: name.clone(),
            message: format!("{e:?}"),
        };
        let module = match component_info.kind {
            Kind::Deposits => {
                let pre = self
                    .linkers
                    .deposits
                    .instantiate_pre(&component)
                    .map_err(link)?;
                LoadedModule::Deposits(deposits::DepositsModule::prepare(
                    self,
                    pre,
                    component_info,
                )?)
            }
            Kind::Checkpoint => {
                let pre = self
                    .linkers
                    .checkpoint
                    .instantiate_pre(&component)
                    .map_err(link)?;
                LoadedModule::Checkpoint(checkpoint::CheckpointModule::prepare(
                    self,
                    pre,
                    component_info,
                )?)
            }
            Kind::GossipPolicy => {
                let pre = self
                    .linkers
                    .gossip_policy
                    .instantiate_pre(&component)
                    .map_err(link)?;
                LoadedModule::GossipPolicy(gossip_policy::GossipPolicyModule::prepare(
                    self,
                    pre,
                    component_info,
                )?)
            }
        };
        Ok(module)
    }

    /// Loads a module that must be of `kind`.
    pub fn load_kind(&self, bytes: &[u8], kind: Kind) -> Result<LoadedModule, LoadError> {
        let found = inspect::validate(bytes)?.kind;
        if found != kind {
            return Err(LoadError::Link {
                module: format!("{found} module"),
                message: format!("expected a {kind} module, got a {found} module"),
            });
        }
        self.load(bytes)
    }

    fn call_settings(&self) -> CallSettings {
        CallSettings {
            engine: self.engine.clone(),
            fuel: self.config.fuel_per_call,
            limits: self.config.limits,
        }
    }
}

/// What every call needs from the runtime; cheap to clone into a guest thread.
#[derive(Clone)]
pub(crate) struct CallSettings {
    pub(crate) engine: Engine,
    pub(crate) fuel: u64,
    pub(crate) limits: Limits,
}

/// Store data of every world gives access to the call's limiter.
pub(crate) trait HasLimiter: Send + 'static {
    fn limiter(&mut self) -> &mut limits::Limiter;
}

/// Result of one call: the value or a typed error, the store data (overlays and so on) and the
/// fuel used.
pub(crate) struct CallOutcome<T, R> {
    pub(crate) result: Result<R, CallError>,
    pub(crate) data: T,
    pub(crate) fuel_used: u64,
}

/// Runs `f` in a fresh store holding `data`, on a guest thread.
pub(crate) fn call<T, R>(
    settings: CallSettings,
    module: String,
    data: T,
    f: impl FnOnce(&mut Store<T>) -> wasmtime::Result<R> + Send + 'static,
) -> CallOutcome<T, R>
where
    T: HasLimiter,
    R: Send + 'static,
{
    threads::run_on_guest_thread(move || {
        let mut store = Store::new(&settings.engine, data);
        store.limiter(|d| d.limiter());
        let fueled = store.set_fuel(settings.fuel);
        let result = match fueled {
            Ok(()) => f(&mut store),
            Err(e) => Err(e),
        };
        let remaining = store.get_fuel().unwrap_or(0);
        let fuel_used = settings.fuel.saturating_sub(remaining);
        let breach = store.data_mut().limiter().breach();
        let result = result.map_err(|e| CallError::classify(&module, &e, breach, settings.fuel));
        CallOutcome {
            result,
            data: store.into_data(),
            fuel_used,
        }
    })
}

//! Host side of the `modnode:checkpoint` world: read-only state access for a checkpoint module
//! and typed calls into its `chunker` export.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::limits::Limiter;
use super::{
    CallError, CallSettings, ComponentInfo, HasLimiter, LoadError, ModuleInfo, ModuleMeta, Runtime,
};

mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/checkpoint"],
        world: "modnode:checkpoint/checkpoint",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::modnode::checkpoint::types::{ChunkContents, ChunkError, LeafRange, PlanParams};
use bindings::modnode::checkpoint::{state_reader, types};

/// The state a checkpoint is made of, as position-indexed fixed-size leaves.
pub trait StateReader: Send + Sync {
    /// Number of leaves.
    fn leaf_count(&self) -> u64;
    /// Bytes per leaf.
    fn leaf_size(&self) -> u32;
    /// Leaves in `[start, end)`; empty when out of range.
    fn read_leaves(&self, start: u64, end: u64) -> Vec<Vec<u8>>;
    /// Proof of the leaves in `[start, end)` against the state root.
    fn range_proof(&self, start: u64, end: u64) -> Vec<u8>;
}

/// Store data of one checkpoint call.
pub struct CheckpointCtx {
    reader: Arc<dyn StateReader>,
    limiter: Limiter,
}

impl HasLimiter for CheckpointCtx {
    fn limiter(&mut self) -> &mut Limiter {
        &mut self.limiter
    }
}

impl state_reader::Host for CheckpointCtx {
    fn leaf_count(&mut self) -> u64 {
        self.reader.leaf_count()
    }

    fn leaf_size(&mut self) -> u32 {
        self.reader.leaf_size()
    }

    fn read_leaves(&mut self, range: LeafRange) -> Vec<Vec<u8>> {
        self.reader.read_leaves(range.start, range.end)
    }

    fn range_proof(&mut self, range: LeafRange) -> Vec<u8> {
        self.reader.range_proof(range.start, range.end)
    }
}

impl types::Host for CheckpointCtx {}
impl bindings::modnode::types::types::Host for CheckpointCtx {}

/// The checkpoint world's host interfaces, linked once per runtime.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<CheckpointCtx>> {
    let mut linker = Linker::new(engine);
    bindings::Checkpoint::add_to_linker::<_, HasSelf<CheckpointCtx>>(&mut linker, |ctx| ctx)?;
    Ok(linker)
}

/// A state with no leaves, for calls that do not read the state (warm-up, opening chunks).
struct NoState;

impl StateReader for NoState {
    fn leaf_count(&self) -> u64 {
        0
    }
    fn leaf_size(&self) -> u32 {
        0
    }
    fn read_leaves(&self, _: u64, _: u64) -> Vec<Vec<u8>> {
        Vec::new()
    }
    fn range_proof(&self, _: u64, _: u64) -> Vec<u8> {
        Vec::new()
    }
}

/// A loaded checkpoint module.
#[derive(Clone)]
pub struct CheckpointModule {
    meta: ModuleMeta,
    pre: bindings::CheckpointPre<CheckpointCtx>,
    settings: CallSettings,
}

impl CheckpointModule {
    pub(crate) fn prepare(
        runtime: &Runtime,
        pre: wasmtime::component::InstancePre<CheckpointCtx>,
        component: ComponentInfo,
    ) -> Result<Self, LoadError> {
        let name = super::display_name(&component, None);
        let pre = bindings::CheckpointPre::new(pre).map_err(|e| LoadError::Link {
            module: name.clone(),
            message: format!("{e:?}"),
        })?;
        let settings = runtime.call_settings();
        let info = run(&settings, &pre, &name, Arc::new(NoState), |i, s| {
            i.modnode_checkpoint_chunker().call_describe(s)
        })
        .map_err(|e| LoadError::Warmup {
            module: name.clone(),
            source: Box::new(e),
        })?;
        let info = ModuleInfo {
            kind: info.kind,
            version: info.version,
            description: info.description,
            params: info.params,
        };
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

    /// Splits the state into chunk ranges.
    pub fn plan(
        &self,
        reader: Arc<dyn StateReader>,
        params: PlanParams,
    ) -> Result<Vec<LeafRange>, CallError> {
        self.plan_metered(reader, params).map(|(r, _)| r)
    }

    /// [`plan`](Self::plan), also returning the fuel the call used (`upgrade-check`).
    pub fn plan_metered(
        &self,
        reader: Arc<dyn StateReader>,
        params: PlanParams,
    ) -> Result<(Vec<LeafRange>, u64), CallError> {
        let count = reader.leaf_count();
        run_metered(
            &self.settings,
            &self.pre,
            &self.meta.name(),
            reader,
            move |i, s| i.modnode_checkpoint_chunker().call_plan(s, count, params),
        )
    }

    /// Builds the chunk for one range.
    pub fn build_chunk(
        &self,
        reader: Arc<dyn StateReader>,
        range: LeafRange,
    ) -> Result<Result<Vec<u8>, ChunkError>, CallError> {
        self.build_chunk_metered(reader, range).map(|(r, _)| r)
    }

    /// [`build_chunk`](Self::build_chunk), also returning the fuel the call used.
    pub fn build_chunk_metered(
        &self,
        reader: Arc<dyn StateReader>,
        range: LeafRange,
    ) -> Result<(Result<Vec<u8>, ChunkError>, u64), CallError> {
        run_metered(
            &self.settings,
            &self.pre,
            &self.meta.name(),
            reader,
            move |i, s| i.modnode_checkpoint_chunker().call_build_chunk(s, range),
        )
    }

    /// Decodes a chunk (the caller verifies its proof).
    pub fn open_chunk(
        &self,
        chunk: Vec<u8>,
    ) -> Result<Result<ChunkContents, ChunkError>, CallError> {
        self.open_chunk_metered(chunk).map(|(r, _)| r)
    }

    /// [`open_chunk`](Self::open_chunk), also returning the fuel the call used.
    pub fn open_chunk_metered(
        &self,
        chunk: Vec<u8>,
    ) -> Result<(Result<ChunkContents, ChunkError>, u64), CallError> {
        run_metered(
            &self.settings,
            &self.pre,
            &self.meta.name(),
            Arc::new(NoState),
            move |i, s| i.modnode_checkpoint_chunker().call_open_chunk(s, &chunk),
        )
    }
}

fn run<R: Send + 'static>(
    settings: &CallSettings,
    pre: &bindings::CheckpointPre<CheckpointCtx>,
    name: &str,
    reader: Arc<dyn StateReader>,
    f: impl FnOnce(&bindings::Checkpoint, &mut wasmtime::Store<CheckpointCtx>) -> wasmtime::Result<R>
    + Send
    + 'static,
) -> Result<R, CallError> {
    run_metered(settings, pre, name, reader, f).map(|(r, _)| r)
}

/// [`run`], also returning the fuel the call used.
fn run_metered<R: Send + 'static>(
    settings: &CallSettings,
    pre: &bindings::CheckpointPre<CheckpointCtx>,
    name: &str,
    reader: Arc<dyn StateReader>,
    f: impl FnOnce(&bindings::Checkpoint, &mut wasmtime::Store<CheckpointCtx>) -> wasmtime::Result<R>
    + Send
    + 'static,
) -> Result<(R, u64), CallError> {
    let data = CheckpointCtx {
        reader,
        limiter: Limiter::new(settings.limits),
    };
    let pre = pre.clone();
    let outcome = super::call(settings.clone(), name.to_string(), data, move |store| {
        let instance = pre.instantiate(&mut *store)?;
        f(&instance, store)
    });
    let fuel = outcome.fuel_used;
    outcome.result.map(|r| (r, fuel))
}

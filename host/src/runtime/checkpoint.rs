//! Host side of the `modnode:checkpoint` world: read-only state access for a checkpoint module
//! and typed calls into its `chunker` export.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::error::HostFailure;
use super::module::{CallBase, Module, StoreData, World, unimplemented_contract};
use super::session::Session;
use super::{CallError, Kind, ModuleInfo, Version};

mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/checkpoint"],
        world: "modnode:checkpoint/checkpoint",
        additional_derives: [PartialEq, Eq],
        imports: { default: trappable },
    });
}

use crate::chunk::{ChunkContents, ChunkError, LeafRange, PlanParams};
use bindings::modnode::checkpoint::{state_reader, types};

mod convert;

/// The state a checkpoint is made of, as position-indexed fixed-size leaves.
pub trait StateReader: Send + Sync {
    /// Number of leaves.
    fn leaf_count(&self) -> u64;
    /// Bytes per leaf.
    fn leaf_size(&self) -> u32;
    /// Leaves in `[start, end)`; empty when out of range.
    fn read_leaves(&self, start: u64, end: u64) -> Vec<Vec<u8>>;
    /// Leaves in `[start, end)` concatenated; empty when out of range. The default concatenates
    /// [`read_leaves`](Self::read_leaves); readers that hold leaves contiguously do better.
    fn read_leaf_bytes(&self, start: u64, end: u64) -> Vec<u8> {
        self.read_leaves(start, end).concat()
    }
    /// Proof of the leaves in `[start, end)` against the state root.
    fn range_proof(&self, start: u64, end: u64) -> Vec<u8>;
}

/// Store data of one checkpoint call.
pub struct CheckpointCtx {
    reader: Arc<dyn StateReader>,
    base: CallBase,
}

impl StoreData for CheckpointCtx {
    fn base(&mut self) -> &mut CallBase {
        &mut self.base
    }
}

impl CheckpointCtx {
    /// Charges for `[start, end)` clipped to the state: the leaves a read or proof touches.
    fn charge_leaves(&mut self, range: types::LeafRange) -> wasmtime::Result<()> {
        let end = range.end.min(self.reader.leaf_count());
        let leaves = end.saturating_sub(range.start);
        let per_leaf = self.base.fuel().costs().state_read_per_leaf;
        self.base
            .fuel()
            .charge_call(0, per_leaf.saturating_mul(leaves))
    }
}

impl state_reader::Host for CheckpointCtx {
    fn leaf_count(&mut self) -> wasmtime::Result<u64> {
        self.base.fuel().charge_call(0, 0)?;
        Ok(self.reader.leaf_count())
    }

    fn leaf_size(&mut self) -> wasmtime::Result<u32> {
        self.base.fuel().charge_call(0, 0)?;
        Ok(self.reader.leaf_size())
    }

    fn read_leaves(&mut self, range: types::LeafRange) -> wasmtime::Result<Vec<Vec<u8>>> {
        self.charge_leaves(range)?;
        Ok(self.reader.read_leaves(range.start, range.end))
    }

    fn read_leaf_bytes(&mut self, range: types::LeafRange) -> wasmtime::Result<Vec<u8>> {
        self.charge_leaves(range)?;
        Ok(self.reader.read_leaf_bytes(range.start, range.end))
    }

    fn range_proof(&mut self, range: types::LeafRange) -> wasmtime::Result<Vec<u8>> {
        self.charge_leaves(range)?;
        Ok(self.reader.range_proof(range.start, range.end))
    }
}

impl types::Host for CheckpointCtx {}
impl bindings::modnode::types::types::Host for CheckpointCtx {}

/// A state with no leaves, for calls that do not read the state (describe, opening chunks).
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

/// A small synthetic state for warm-up: 256 leaves of 8 bytes.
struct WarmupState;

impl StateReader for WarmupState {
    fn leaf_count(&self) -> u64 {
        256
    }
    fn leaf_size(&self) -> u32 {
        8
    }
    fn read_leaves(&self, start: u64, end: u64) -> Vec<Vec<u8>> {
        (start..end.min(256))
            .map(|i| i.to_le_bytes().to_vec())
            .collect()
    }
    fn range_proof(&self, start: u64, end: u64) -> Vec<u8> {
        [start.to_le_bytes(), end.to_le_bytes()].concat()
    }
}

/// Many chunk calls on one instance (built by [`CheckpointModule::chunk_session`]). Chunks
/// depend only on their range or bytes, so reusing the instance never changes an output.
pub struct ChunkSession(Session<Checkpoint>);

impl ChunkSession {
    /// Builds the chunk for one range (as [`CheckpointModule::build_chunk`]).
    pub fn build(&mut self, range: LeafRange) -> Result<Result<Vec<u8>, ChunkError>, CallError> {
        let range = range.into();
        let built = self
            .0
            .call(|i, s| i.modnode_checkpoint_chunker().call_build_chunk(s, range))?;
        checked_chunk(self.0.name(), built.map_err(Into::into))
    }

    /// Decodes a chunk (as [`CheckpointModule::open_chunk`]).
    pub fn open(&mut self, chunk: &[u8]) -> Result<Result<ChunkContents, ChunkError>, CallError> {
        let opened = self
            .0
            .call(|i, s| i.modnode_checkpoint_chunker().call_open_chunk(s, chunk))?;
        checked_opened(self.0.name(), convert::opened(opened))
    }
}

fn output(module: &str) -> super::bounds::Output<'_> {
    super::bounds::Output {
        module,
        kind: Kind::Checkpoint,
    }
}

/// A chunk error's message against the kind's bound.
fn check_error(module: &str, call: &str, e: &ChunkError) -> Result<(), CallError> {
    match e {
        ChunkError::Malformed(message) => Ok(output(module).message(call, message)?),
        ChunkError::WrongVersion(_) | ChunkError::OutOfRange(_) => Ok(()),
    }
}

/// A built chunk (or why not) against the kind's bounds.
fn checked_chunk(
    module: &str,
    built: Result<Vec<u8>, ChunkError>,
) -> Result<Result<Vec<u8>, ChunkError>, CallError> {
    match &built {
        Ok(chunk) => output(module).bytes("build-chunk()", chunk.len())?,
        Err(e) => check_error(module, "build-chunk() error", e)?,
    }
    Ok(built)
}

/// An opened chunk (or why not) against the kind's bounds.
fn checked_opened(
    module: &str,
    opened: Result<ChunkContents, ChunkError>,
) -> Result<Result<ChunkContents, ChunkError>, CallError> {
    match &opened {
        Ok(contents) => {
            output(module).bytes("open-chunk().leaves", contents.leaves.len())?;
            output(module).bytes("open-chunk().proof", contents.proof.len())?;
        }
        Err(e) => check_error(module, "open-chunk() error", e)?,
    }
    Ok(opened)
}

/// The `modnode:checkpoint` world.
pub struct Checkpoint;

/// A loaded checkpoint module.
pub type CheckpointModule = Module<Checkpoint>;

impl World for Checkpoint {
    const KIND: Kind = Kind::Checkpoint;
    type Data = CheckpointCtx;
    type Pre = bindings::CheckpointPre<CheckpointCtx>;
    type Instance = bindings::Checkpoint;

    /// One contract so far (2.0.0); a later major adds its bindgen module and an arm here
    /// and in [`pre`](World::pre), with `Pre` and `Instance` becoming one variant per contract.
    fn linker(
        engine: &wasmtime::Engine,
        contract: Version,
    ) -> wasmtime::Result<Linker<CheckpointCtx>> {
        let mut linker = Linker::new(engine);
        match contract.major {
            2 => bindings::Checkpoint::add_to_linker::<_, HasSelf<CheckpointCtx>>(
                &mut linker,
                |ctx| ctx,
            )?,
            _ => return Err(unimplemented_contract(Self::KIND, contract)),
        }
        Ok(linker)
    }

    fn pre(
        pre: wasmtime::component::InstancePre<CheckpointCtx>,
        contract: Version,
    ) -> wasmtime::Result<Self::Pre> {
        match contract.major {
            2 => bindings::CheckpointPre::new(pre),
            _ => Err(unimplemented_contract(Self::KIND, contract)),
        }
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut wasmtime::Store<CheckpointCtx>,
    ) -> wasmtime::Result<Self::Instance> {
        pre.instantiate(store)
    }

    fn idle_data(base: CallBase) -> Result<CheckpointCtx, HostFailure> {
        Ok(CheckpointCtx {
            reader: Arc::new(NoState),
            base,
        })
    }

    fn describe(
        instance: &Self::Instance,
        store: &mut wasmtime::Store<CheckpointCtx>,
    ) -> wasmtime::Result<ModuleInfo> {
        let info = instance.modnode_checkpoint_chunker().call_describe(store)?;
        Ok(ModuleInfo {
            kind: info.kind,
            version: info.version,
            description: info.description,
            params: info.params,
        })
    }

    /// Plans a small state, then builds and opens its first chunk.
    fn dry_run(module: &CheckpointModule) -> Result<u64, CallError> {
        let reader: Arc<dyn StateReader> = Arc::new(WarmupState);
        let params = PlanParams {
            target_chunk_bytes: 512,
        };
        let (plan, mut fuel) = module.plan_metered(reader.clone(), params)?;
        if let Some(range) = plan.first().copied() {
            let (chunk, built) = module.build_chunk_metered(reader, range)?;
            fuel = fuel.saturating_add(built);
            if let Ok(chunk) = chunk {
                let (_, opened) = module.open_chunk_metered(chunk)?;
                fuel = fuel.saturating_add(opened);
            }
        }
        Ok(fuel)
    }
}

impl Module<Checkpoint> {
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
        let params = params.into();
        let (plan, fuel) = self.run_metered(reader, move |i, s| {
            i.modnode_checkpoint_chunker().call_plan(s, count, params)
        })?;
        output(&self.meta().name()).list("plan() ranges", plan.len())?;
        Ok((plan.into_iter().map(Into::into).collect(), fuel))
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
        let range = range.into();
        let (built, fuel) = self.run_metered(reader, move |i, s| {
            i.modnode_checkpoint_chunker().call_build_chunk(s, range)
        })?;
        Ok((
            checked_chunk(&self.meta().name(), built.map_err(Into::into))?,
            fuel,
        ))
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
        let (opened, fuel) = self.run_metered(Arc::new(NoState), move |i, s| {
            i.modnode_checkpoint_chunker().call_open_chunk(s, &chunk)
        })?;
        Ok((
            checked_opened(&self.meta().name(), convert::opened(opened))?,
            fuel,
        ))
    }

    /// One instance of this module reading `reader`, for building or opening many chunks on
    /// the calling guest thread (see [`Session`]). `None` reads an empty state (opening only).
    pub fn chunk_session(
        &self,
        reader: Option<Arc<dyn StateReader>>,
    ) -> Result<ChunkSession, CallError> {
        let reader = reader.unwrap_or_else(|| Arc::new(NoState));
        self.session(move |base| Ok(CheckpointCtx { reader, base }))
            .map(ChunkSession)
    }

    fn run_metered<R: Send + 'static>(
        &self,
        reader: Arc<dyn StateReader>,
        f: impl FnOnce(
            &bindings::Checkpoint,
            &mut wasmtime::Store<CheckpointCtx>,
        ) -> wasmtime::Result<R>
        + Send
        + 'static,
    ) -> Result<(R, u64), CallError> {
        let outcome = self.call(move |base| Ok(CheckpointCtx { reader, base }), f);
        outcome.result.map(|r| (r, outcome.fuel_used))
    }
}

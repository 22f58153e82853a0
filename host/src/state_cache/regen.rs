//! Regenerating an uncached state: replay stored blocks on the nearest cached ancestor.
//!
//! - **Coalesced.** One replay per target at a time: a second request for the same state waits
//!   for the first one's result, and a request for a descendant of a state being regenerated
//!   waits for that replay and continues from its result.
//! - **Reserved.** The bytes of the states in flight (the base being replayed onto and the
//!   state being built) are reserved in the budget before the replay starts; a replay that
//!   cannot fit is refused, never run over budget. Each replayed state is inserted (and
//!   counted, evicting others) as soon as it is built.
//! - **Bounded.** Anchors (see the cache docs) bound a replay to `anchor_every` blocks; a walk
//!   longer than [`max_replay`] is refused as too old.
//! - **Lower priority than import.** Replays run on the caller's thread (never the chain
//!   worker's), one at a time; queries are shed while import is behind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};

use super::StateCache;
use crate::consensus::block::{Block, BlockHash};
use crate::consensus::genesis::Genesis;
use crate::consensus::{DepositEngine, DepositModules};
use crate::consensus::{FailureClass, ImportError};
use crate::consensus::{Rules, apply_block};
use crate::state::State;
use crate::store::{KvStore, StoreError, keys};

/// Why a state could not be had.
#[derive(Debug, thiserror::Error)]
pub enum StateCacheError {
    /// No block with this hash is stored (the asker's mistake).
    #[error("no block {hash} is stored")]
    UnknownBlock {
        /// The block.
        hash: BlockHash,
    },
    /// No canonical block at this height (the asker's mistake).
    #[error("no canonical block at height {height}")]
    UnknownHeight {
        /// The height asked for.
        height: u64,
    },
    /// The nearest cached ancestor is further back than a replay may go.
    #[error(
        "the state after {hash} is more than {limit} blocks from any cached state; \
         states that old are not kept"
    )]
    TooOld {
        /// The block.
        hash: BlockHash,
        /// The replay limit.
        limit: u64,
    },
    /// The replay's states would not fit the budget even after evicting what may go.
    #[error(
        "regenerating needs {needed} bytes the state cache budget ({max_bytes} bytes) cannot \
         free now; retry later or raise state_cache.max_bytes"
    )]
    OverBudget {
        /// Bytes the replay would reserve.
        needed: u64,
        /// The budget.
        max_bytes: u64,
    },
    /// Import is behind: state queries are refused until it catches up. Retry later.
    #[error("the node is behind on block import; state queries are refused until it catches up")]
    Shed,
    /// A stored block did not replay (ours): its scheduled module is not ready here, the host
    /// or a lock failed, or the store is corrupt or this node has a bug.
    #[error("replaying a stored block failed: {0}")]
    Replay(#[from] ImportError),
    /// A block executed on its parent's state is invalid: it caused the failure
    /// ([`FailureClass::Block`]; the block's, hence its sender's, fault).
    #[error("invalid block: {0}")]
    InvalidBlock(ImportError),
    /// A block could not be executed on its parent's state for a reason of ours
    /// ([`FailureClass::Ours`]: its scheduled module not ready here, the host, a lock, the
    /// store): not a verdict on the block; execute it again once the cause is gone.
    #[error("block not executed (not its fault): {0}")]
    NotExecuted(ImportError),
    /// Storage failed (ours).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A persisted state anchor could not be used (ours: the store is damaged or behind).
    #[error("state anchor at height {height} in {location}: {reason}")]
    Anchor {
        /// The anchor's height.
        height: u64,
        /// Where the anchors are stored.
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// The replay this request waited for failed.
    #[error("the regeneration this request joined failed: {0}")]
    Joined(String),
    /// The low-priority thread a query's replay runs on could not be started or gave no
    /// answer (ours: the process is out of threads or memory).
    #[error("the state query's replay thread failed: {0}")]
    QueryThread(String),
}

impl StateCacheError {
    /// The scheduled module (kind, hash) this node lacked, if that is why the state could not
    /// be had.
    pub fn missing_module(&self) -> Option<(crate::runtime::Kind, crate::hashes::ModuleHash)> {
        match self {
            Self::Replay(e) | Self::InvalidBlock(e) | Self::NotExecuted(e) => e.missing_module(),
            _ => None,
        }
    }
}

/// Where replays read blocks and which deposits engine runs them.
pub struct StateSource {
    pub(super) store: Arc<dyn KvStore>,
    genesis: Genesis,
    engine: RwLock<DepositEngine>,
    modules: RwLock<Option<Arc<dyn DepositModules>>>,
}

impl StateSource {
    /// Blocks from `store`, run as `genesis` says with `engine`.
    pub fn new(store: Arc<dyn KvStore>, genesis: Genesis, engine: DepositEngine) -> Self {
        Self {
            store,
            genesis,
            engine: RwLock::new(engine),
            modules: RwLock::new(None),
        }
    }

    /// Replaces the engine (module upgrades).
    pub(crate) fn set_engine(&self, engine: DepositEngine) {
        *self.engine.write().unwrap_or_else(PoisonError::into_inner) = engine;
    }

    /// Where scheduled deposits modules are found (the node's prepared modules).
    pub(crate) fn set_modules(&self, modules: Arc<dyn DepositModules>) {
        *self.modules.write().unwrap_or_else(PoisonError::into_inner) = Some(modules);
    }

    /// The chain's deposits engine and the modules its schedule may name, as they are now
    /// (what [`Rules`] for a replay are made of; copies, so no lock is held while it runs).
    fn engines(&self) -> (DepositEngine, Option<Arc<dyn DepositModules>>) {
        let engine = self.engine.read().unwrap_or_else(PoisonError::into_inner);
        let modules = self.modules.read().unwrap_or_else(PoisonError::into_inner);
        (engine.clone(), modules.clone())
    }

    /// The chain's genesis configuration.
    pub fn genesis(&self) -> &Genesis {
        &self.genesis
    }

    /// Hash of the canonical block at `height`.
    pub fn canonical_hash(&self, height: u64) -> Result<BlockHash, StateCacheError> {
        let bytes = self
            .store
            .get(&keys::height(height))?
            .ok_or(StateCacheError::UnknownHeight { height })?;
        <[u8; 32]>::try_from(bytes)
            .map(BlockHash::new)
            .map_err(|_| StoreError::Corrupt(format!("height index {height} malformed")).into())
    }

    /// The genesis state, built from the configuration (the stored ancestor of every state).
    fn genesis_state(&self, hash: &BlockHash) -> Result<State, StateCacheError> {
        let registry = self.genesis.registry().map_err(|e| {
            StoreError::Corrupt(format!("the configured genesis registry is invalid: {e}"))
        })?;
        let block = self.genesis.block(&registry);
        if block.hash() != *hash {
            return Err(StoreError::Corrupt(format!(
                "stored genesis block {} is not the configured genesis {}",
                hash,
                block.hash()
            ))
            .into());
        }
        Ok(State::new(
            *hash,
            0,
            registry,
            self.genesis.eth1_state(),
            self.genesis.schedule(),
        ))
    }

    fn block(&self, hash: &BlockHash) -> Result<Block, StateCacheError> {
        let bytes = self
            .store
            .get(&keys::block(hash))?
            .ok_or(StateCacheError::UnknownBlock { hash: *hash })?;
        Block::decode(&bytes, self.genesis.max_deposits_per_block)
            .map_err(|e| StoreError::Corrupt(format!("block {hash}: {e}")).into())
    }
}

/// One replay in flight; waiters block on it.
#[derive(Default)]
struct Flight {
    result: Mutex<Option<Result<State, String>>>,
    done: Condvar,
}

impl Flight {
    fn wait(&self) -> Result<State, StateCacheError> {
        let mut result = self.result.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = result.as_ref() {
                return result.clone().map_err(StateCacheError::Joined);
            }
            result = self
                .done
                .wait(result)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn finish(&self, outcome: Result<State, String>) {
        *self.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        self.done.notify_all();
    }
}

/// The replays in flight, the one-at-a-time permit and the counters.
pub(super) struct Regenerator {
    source: StateSource,
    flights: Mutex<HashMap<BlockHash, Arc<Flight>>>,
    permit: Mutex<()>,
    regenerations: AtomicU64,
    replayed: AtomicU64,
    coalesced: AtomicU64,
}

impl Regenerator {
    pub(super) fn new(source: StateSource) -> Self {
        Self {
            source,
            flights: Mutex::new(HashMap::new()),
            permit: Mutex::new(()),
            regenerations: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
        }
    }

    pub(super) fn source(&self) -> &StateSource {
        &self.source
    }

    /// (replays run, blocks replayed, requests coalesced).
    pub(super) fn counters(&self) -> (u64, u64, u64) {
        (
            self.regenerations.load(Ordering::Relaxed),
            self.replayed.load(Ordering::Relaxed),
            self.coalesced.load(Ordering::Relaxed),
        )
    }

    fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<BlockHash, Arc<Flight>>> {
        self.flights.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Executes `block` on its parent's state (cached, or regenerated at the same priority as
/// any request) and caches the result.
pub(super) fn execute(cache: &StateCache, block: &Block) -> Result<State, StateCacheError> {
    if let Some(state) = cache.peek(&block.hash()) {
        return Ok(state);
    }
    let parent = state(cache, &block.header.parent_hash)?;
    let source = cache.regen.source();
    let parent_slot = source.block(&block.header.parent_hash)?.header.slot;
    let (engine, modules) = source.engines();
    let rules = Rules::new(&source.genesis, &engine, modules.as_ref());
    let state = apply_block(&rules, &parent, parent_slot, block)
        .map(|applied| applied.state)
        .map_err(|e| match e.class() {
            FailureClass::Block => StateCacheError::InvalidBlock(e),
            FailureClass::Ours => StateCacheError::NotExecuted(e),
        })?;
    cache.insert(state.clone());
    Ok(state)
}

/// The longest replay a request may start.
pub fn max_replay(cache: &StateCache) -> u64 {
    cache.config.anchor_every.saturating_mul(4).max(64)
}

/// The state after `hash`: cached, joined onto a replay in flight, or replayed here.
pub(super) fn state(cache: &StateCache, hash: &BlockHash) -> Result<State, StateCacheError> {
    if let Some(state) = cache.get(hash) {
        return Ok(state);
    }
    let regen = &cache.regen;
    let (flight, leader) = {
        let mut flights = regen.flights();
        match flights.get(hash) {
            Some(flight) => (flight.clone(), false),
            None => {
                let flight = Arc::new(Flight::default());
                flights.insert(*hash, flight.clone());
                (flight, true)
            }
        }
    };
    if !leader {
        regen.coalesced.fetch_add(1, Ordering::Relaxed);
        return flight.wait();
    }
    let result = regenerate(cache, hash);
    flight.finish(
        result
            .as_ref()
            .map(Clone::clone)
            .map_err(ToString::to_string),
    );
    regen.flights().remove(hash);
    result
}

/// Walks back from `hash` to a cached state (or one being regenerated), then replays.
fn regenerate(cache: &StateCache, hash: &BlockHash) -> Result<State, StateCacheError> {
    let regen = &cache.regen;
    // A replay that finished between this request's cache miss and its becoming the leader
    // produced the state: this request shared that replay.
    if let Some(state) = cache.peek(hash) {
        regen.coalesced.fetch_add(1, Ordering::Relaxed);
        return Ok(state);
    }
    let limit = max_replay(cache);
    let mut blocks = Vec::new();
    let mut cursor = *hash;
    let base = loop {
        if let Some(state) = cache.peek(&cursor) {
            break state;
        }
        if cursor != *hash {
            let joined = regen.flights().get(&cursor).cloned();
            if let Some(flight) = joined {
                regen.coalesced.fetch_add(1, Ordering::Relaxed);
                break flight.wait()?;
            }
        }
        if u64::try_from(blocks.len()).unwrap_or(u64::MAX) >= limit {
            return Err(StateCacheError::TooOld { hash: *hash, limit });
        }
        let block = regen.source.block(&cursor)?;
        // A canonical anchor height not cached (after a restart): rebuilt from the persisted
        // anchors without replaying; if that fails the walk goes on to an older state.
        let height = block.header.height;
        if cache.is_anchor(height)
            && let Some(anchors) = &cache.anchors
            && regen.source.canonical_hash(height).ok() == Some(cursor)
        {
            match anchors.load(cache, &block) {
                Ok(state) => {
                    cache.insert(state.clone());
                    break state;
                }
                Err(e) => tracing::warn!(height, error = %e, "state anchor not loaded"),
            }
        }
        if height == 0 {
            break regen.source.genesis_state(&cursor)?;
        }
        cursor = block.header.parent_hash;
        blocks.push(block);
    };
    if blocks.is_empty() {
        return Ok(base);
    }
    // In flight at any time: the state being replayed onto and the one being built; every
    // state replayed is inserted (and counted) as it is done, evicting others as needed.
    let reserved = cache.reserve(blocks.len().min(2) as u64)?;
    let _permit = regen.permit.lock().unwrap_or_else(PoisonError::into_inner);
    regen.regenerations.fetch_add(1, Ordering::Relaxed);
    // The slot of the block each replay runs after (whether a block starts an epoch).
    let mut parent_slot = match regen.source.block(&base.block_hash()) {
        Ok(block) => block.header.slot,
        Err(e) => {
            cache.release(reserved);
            return Err(e);
        }
    };
    let mut state = base;
    let mut outcome = Ok(());
    let (engine, modules) = regen.source.engines();
    let rules = Rules::new(&regen.source.genesis, &engine, modules.as_ref());
    for block in blocks.iter().rev() {
        match apply_block(&rules, &state, parent_slot, block) {
            Ok(next) => {
                state = next.state;
                parent_slot = block.header.slot;
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
        regen.replayed.fetch_add(1, Ordering::Relaxed);
        cache.insert(state.clone());
    }
    cache.release(reserved);
    outcome?;
    Ok(state)
}

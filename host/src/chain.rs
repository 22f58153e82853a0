//! The chain: blocks, genesis, and block import over the durable store.
//!
//! Import validates the header against the head, records the block's eth1 vote
//! ([`eth1`]: phase0 `process_eth1_data`) and its upgrade votes (the module schedule,
//! [`crate::state::schedule`]), checks that the body carries exactly the due deposits, runs the
//! deposits module the parent state schedules for the block's height (which verifies every
//! deposit's proof against the agreed deposit root at the running index) through the runtime,
//! checks the resulting state root (registry, eth1 state and schedule) against the header
//! *before* anything changes, and
//! commits block + state changes + new head as one atomic, flushed batch; only then is the
//! in-memory state updated. On startup the stored head, head block and state root are checked
//! against each other and against the genesis the node is configured with.
//!
//! - [`block`]: header, body, seal, canonical encoding; [`genesis`]: the configuration.
//! - `native_deposits` (with the `test-utils` feature): the native reference transition, the
//!   modules' check in tests and the benchmarks' baseline; [`workload`]: seeded, signed deposits
//!   and an in-memory deposit log (dev chains, tests, benchmarks).
//! - Errors, the deposit engine choice, revert, fork choice and equivocation (one block per
//!   authority per slot) live in private submodules and
//!   are re-exported here.

pub mod block;
mod deposit_engine;
pub mod deposits_v3;
mod equivocation;
mod errors;
pub mod eth1;
mod finality;
mod fork_choice;
mod from_checkpoint;
pub mod genesis;
pub mod migration;
#[cfg(any(test, feature = "test-utils"))]
pub mod native_deposits;
mod pending_store;
pub mod preverify;
mod proposals;
pub mod prune;
mod registry_store;
mod revert;
pub mod transition;
pub mod workload;

use std::sync::{Arc, RwLock};

use block::{Block, BlockHeader, Hash};
pub use deposit_engine::{DepositEngine, DepositModules, DepositsResult, block_context, to_wit};
pub use equivocation::{Evidence, EvidenceSummary, MAX_EVIDENCE, RECENT_EVIDENCE, SignedHeader};
pub use errors::{BuildError, FailureClass, ImportError, OpenError, RevertError};
use eth1::{DepositProofs, DueDeposits, Eth1Data, Eth1State, ProvenDeposit};
pub use finality::SealLock;
pub use fork_choice::{Added, ForkChoiceError};
pub use from_checkpoint::{CheckpointStart, base_height, init_from_checkpoint};
use genesis::Genesis;

use crate::progress::ProgressDisplay;
use crate::runtime::Kind;
use crate::runtime::deposits::{DepositCall, Outcome};
use crate::state::schedule::{Action, BlockVotes, MAX_READY_ATTESTATIONS, MAX_UPGRADE_VOTES};
use crate::state::{
    PendingQueue, Registry, RegistryRead, Schedule, StateError, StateSnapshot, UpgradeOp,
    state_root_with,
};
use crate::state_cache::{StateCache, StateCacheConfig, StateSource};
use crate::store::{KvStore, StoreError, WriteBatch, keys};
use transition::Transition;

/// Version of the store layout this node writes (2: eth1 state per block, state root over
/// registry and eth1 state; 3: module schedule per block, block encoding 3; 4: the registry as
/// one record per chunk of validators and one per chunk of balances instead of two records per
/// validator; 5: on sled, blocks, undo, eth1, schedule and state chunk values in the value log
/// beside sled — `store::value_log` — so that a node from before it refuses the store instead
/// of finding its blocks missing). A format-3 store is migrated when it opens; a format-4 one
/// has had its values moved by the sled store's open and is marked format 5.
pub const STORE_FORMAT: u32 = 5;

/// The format before the value log: read as the current one (nothing in the chain's keys
/// changed).
const BEFORE_VALUE_LOG: u32 = 4;

/// The chain head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Head block hash.
    pub hash: Hash,
    /// Height.
    pub height: u64,
    /// Slot.
    pub slot: u64,
    /// State root after the head block.
    pub state_root: Hash,
}

impl Head {
    fn encode(&self) -> Vec<u8> {
        [
            &self.hash[..],
            &self.height.to_le_bytes(),
            &self.slot.to_le_bytes(),
            &self.state_root,
        ]
        .concat()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let (hash, rest) = bytes.split_first_chunk::<32>()?;
        let (height, rest) = rest.split_first_chunk::<8>()?;
        let (slot, rest) = rest.split_first_chunk::<8>()?;
        let state_root: &[u8; 32] = rest.try_into().ok()?;
        Some(Self {
            hash: *hash,
            height: u64::from_le_bytes(*height),
            slot: u64::from_le_bytes(*slot),
            state_root: *state_root,
        })
    }
}

/// What importing a block did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The new head.
    pub head: Head,
    /// One outcome per deposit.
    pub outcomes: Vec<Outcome>,
}

/// A chain over a store.
pub struct Chain {
    store: Arc<dyn KvStore>,
    genesis: Genesis,
    genesis_hash: Hash,
    registry: Arc<RwLock<Registry>>,
    eth1: Eth1State,
    /// deposits@3's pending-deposit queue after the head, once the chain has run that contract.
    pending: Option<PendingQueue>,
    head: Head,
    deposits: DepositEngine,
    schedule: Schedule,
    modules: Option<Arc<dyn DepositModules>>,
    proposals: Vec<(Action, UpgradeOp)>,
    states: Arc<StateCache>,
    /// Side-branch blocks found invalid (bounded); their descendants are refused.
    invalid: std::collections::HashSet<Hash>,
    /// Evidence of authorities that signed two blocks for one slot (bounded; `equivocation`).
    equivocations: equivocation::Equivocations,
    /// Blocks whose transition import ran (an adopted cached state is not counted).
    executed: u64,
    /// The finalized height: `finality_depth` below the head and sealed over by a majority of
    /// the authorities (`finality`).
    finality: finality::Finality,
    /// The serving floor and heights shared with the pruner (`prune`).
    pruning: Arc<prune::Shared>,
    /// The checkpoint height the chain started from (0: genesis); nothing lies between.
    base: u64,
    /// Where the queue's next deposits are sent to have their signatures verified ahead of
    /// the epoch transition (`preverify`); `None`: not done.
    preverifier: Option<preverify::Preverifier>,
}

/// Why the operator's proposal was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// The vote would break the schedule's rules (too late, too far, nothing to cancel, …).
    #[error(transparent)]
    Schedule(#[from] crate::state::ScheduleError),
    /// Keeping the proposal in the store failed (ours).
    #[error("cannot keep the proposal in the store: {0}")]
    Store(#[from] StoreError),
    /// The operator's: a deposits module whose contract cannot hold deposits@3's queue
    /// (`modnode:deposits@2`), proposed while the queue is not empty: the queued deposits
    /// would never be applied. Wait until the queue drains (`GET /state`'s
    /// `pending_deposits` is 0) and propose again.
    #[error(
        "deposits module {module} implements modnode:deposits@{contract}, which cannot hold the \
         {queued} deposits queued under modnode:deposits@3 (they would never be applied), and \
         brings no migration that drains them: propose it once the queue has drained (GET \
         /state: pending_deposits 0), or propose a module whose down-migration applies them"
    )]
    CannotHoldQueue {
        /// The proposed module (hex sha256).
        module: String,
        /// Its contract.
        contract: String,
        /// Deposits queued after the head.
        queued: u64,
    },
    /// The proposed deposits module's migration fails on the head's state (traps, runs out of
    /// fuel, refuses the state): at its activation height it would stop import. The module's
    /// fault; fix its migration.
    #[error(
        "deposits module {module} cannot be proposed: run on the state at height {height} as \
         its activation would run it, {source}; at its height it would stop import"
    )]
    MigrationFails {
        /// The proposed module (hex sha256).
        module: String,
        /// The head height whose state the migration ran on.
        height: u64,
        /// What failed.
        source: migration::MigrationError,
    },
    /// The operator's: the contract of the proposed deposits module is unknown here (the
    /// module is not prepared on this node) while deposits are queued, so whether it can hold
    /// them cannot be checked. Upload the module first.
    #[error(
        "deposits module {module} is not prepared on this node, so whether its contract can hold \
         the {queued} queued deposits cannot be checked: upload it first"
    )]
    ContractUnknown {
        /// The proposed module (hex sha256).
        module: String,
        /// Deposits queued after the head.
        queued: u64,
    },
}

/// What the producer's next block says about the schedule.
#[derive(Debug, Default)]
struct ScheduleVotes {
    upgrades: Vec<UpgradeOp>,
    cancels: Vec<UpgradeOp>,
    ready: Vec<UpgradeOp>,
}

fn hex32(h: &Hash) -> String {
    hex::encode(h)
}

/// The slot and proposer of the canonical block at `height`; `None` where none is stored
/// (below a checkpoint's base or the pruned floor).
fn slot_and_proposer_at(
    store: &dyn KvStore,
    genesis: &Genesis,
    height: u64,
) -> Result<Option<(u64, u32)>, OpenError> {
    let Some(hash) = store.get(&keys::height(height))? else {
        return Ok(None);
    };
    let hash: Hash = hash.as_slice().try_into().map_err(|_| {
        OpenError::Corrupt(format!(
            "canonical hash record at height {height} is not 32 bytes"
        ))
    })?;
    let Some(block) = store.get(&keys::block(&hash))? else {
        return Ok(None);
    };
    let block = Block::decode(&block, genesis.max_deposits_per_block).map_err(|e| {
        OpenError::Corrupt(format!("block {} at height {height}: {e}", hex32(&hash)))
    })?;
    Ok(Some((block.header.slot, block.header.proposer)))
}

impl Chain {
    /// Opens the chain in `store`, initialising it from `genesis` if the store is empty, and
    /// checking head, head block and state root otherwise.
    pub fn open(
        store: Arc<dyn KvStore>,
        genesis: Genesis,
        deposits: DepositEngine,
    ) -> Result<Self, OpenError> {
        Self::open_batched(
            store,
            genesis,
            deposits,
            registry_store::VALIDATORS_PER_BATCH,
        )
    }

    /// [`Chain::open`], showing a long registry format migration as `display` says (a bar
    /// on a terminal, log lines otherwise).
    pub fn open_showing_progress(
        store: Arc<dyn KvStore>,
        genesis: Genesis,
        deposits: DepositEngine,
        display: ProgressDisplay,
    ) -> Result<Self, OpenError> {
        Self::open_configured(
            store,
            genesis,
            deposits,
            registry_store::VALIDATORS_PER_BATCH,
            display,
        )
    }

    /// [`Chain::open`], writing a genesis registry `per_batch` validators per batch.
    fn open_batched(
        store: Arc<dyn KvStore>,
        genesis: Genesis,
        deposits: DepositEngine,
        per_batch: usize,
    ) -> Result<Self, OpenError> {
        Self::open_configured(store, genesis, deposits, per_batch, ProgressDisplay::Log)
    }

    /// [`Chain::open_batched`], a migration shown as `display` says.
    fn open_configured(
        store: Arc<dyn KvStore>,
        genesis: Genesis,
        deposits: DepositEngine,
        per_batch: usize,
        display: ProgressDisplay,
    ) -> Result<Self, OpenError> {
        let registry_genesis = genesis.registry()?;
        let eth1_genesis = genesis.eth1_state();
        let schedule_genesis = genesis.schedule();
        let genesis_block = genesis.block(&registry_genesis);
        let genesis_hash = genesis_block.hash();
        match store.get(keys::FORMAT)? {
            None => {
                registry_store::write_registry(store.as_ref(), &registry_genesis, per_batch)?;
                let mut batch = WriteBatch::new();
                let head = Head {
                    hash: genesis_hash,
                    height: 0,
                    slot: 0,
                    state_root: genesis_block.header.state_root,
                };
                batch.put(keys::block(&genesis_hash), genesis_block.encode());
                batch.put(keys::eth1(&genesis_hash), eth1_genesis.encode());
                batch.put(keys::schedule(&genesis_hash), schedule_genesis.encode());
                batch.put(keys::height(0), genesis_hash.to_vec());
                batch.put(keys::HEAD, head.encode());
                batch.put(keys::GENESIS, genesis_hash.to_vec());
                batch.put(keys::FORMAT, STORE_FORMAT.to_le_bytes().to_vec());
                store.commit(&batch)?;
                let states = new_state_cache(&store, &genesis, &deposits);
                let finality =
                    finality::Finality::fresh(genesis.authorities.len(), genesis.finality_depth);
                let chain = Self {
                    store,
                    genesis,
                    genesis_hash,
                    registry: Arc::new(RwLock::new(registry_genesis)),
                    eth1: eth1_genesis,
                    pending: None,
                    head,
                    deposits,
                    schedule: schedule_genesis,
                    modules: None,
                    proposals: Vec::new(),
                    states,
                    invalid: Default::default(),
                    equivocations: Default::default(),
                    executed: 0,
                    finality,
                    pruning: prune::Shared::new(0),
                    base: 0,
                    preverifier: None,
                };
                chain.publish_head();
                Ok(chain)
            }
            Some(format) => {
                let format = <[u8; 4]>::try_from(format.as_slice())
                    .map(u32::from_le_bytes)
                    .map_err(|_| {
                        OpenError::Corrupt(format!(
                            "the store format record {format:02x?} is not 4 bytes"
                        ))
                    })?;
                let legacy = registry_store::legacy::PER_VALIDATOR_FORMAT;
                if format != STORE_FORMAT && format != legacy && format != BEFORE_VALUE_LOG {
                    return Err(OpenError::Corrupt(format!(
                        "store format {format}: this node reads format {STORE_FORMAT} and migrates \
                         format {legacy} and format {BEFORE_VALUE_LOG}"
                    )));
                }
                let stored_genesis = store
                    .get(keys::GENESIS)?
                    .ok_or_else(|| OpenError::Corrupt("genesis hash missing".into()))?;
                if stored_genesis.as_slice() != genesis_hash {
                    return Err(OpenError::GenesisMismatch {
                        stored: hex::encode(&stored_genesis),
                        configured: hex32(&genesis_hash),
                    });
                }
                drop(registry_genesis);
                drop(eth1_genesis);
                drop(schedule_genesis);
                if format == legacy {
                    registry_store::legacy::migrate(
                        store.as_ref(),
                        STORE_FORMAT,
                        per_batch,
                        display,
                    )?;
                } else {
                    // Per-validator records a migration was interrupted before deleting.
                    registry_store::legacy::delete_records(store.as_ref(), per_batch)?;
                    if format == BEFORE_VALUE_LOG {
                        let mut batch = WriteBatch::new();
                        batch.put(keys::FORMAT, STORE_FORMAT.to_le_bytes().to_vec());
                        store.commit(&batch)?;
                    }
                }
                let head_bytes = store
                    .get(keys::HEAD)?
                    .ok_or_else(|| OpenError::Corrupt("head record missing".into()))?;
                let head = Head::decode(&head_bytes)
                    .ok_or_else(|| OpenError::Corrupt("head record malformed".into()))?;
                let head_block = store.get(&keys::block(&head.hash))?.ok_or_else(|| {
                    OpenError::Corrupt(format!("head block {} missing", hex32(&head.hash)))
                })?;
                let head_block = Block::decode(&head_block, genesis.max_deposits_per_block)
                    .map_err(|e| {
                        OpenError::Corrupt(format!("head block {}: {e}", hex32(&head.hash)))
                    })?;
                if head_block.hash() != head.hash || head_block.header.state_root != head.state_root
                {
                    return Err(OpenError::Corrupt(format!(
                        "head record and head block {} disagree",
                        hex32(&head.hash)
                    )));
                }
                let registry = registry_store::load_registry(store.as_ref())?;
                let eth1 = load_eth1(store.as_ref(), &head.hash)?;
                let schedule = load_schedule(store.as_ref(), &head.hash)?;
                let pending = pending_store::load(store.as_ref(), &head.hash)?;
                let pending_root = pending.as_ref().map(PendingQueue::root);
                let root =
                    state_root_with(&registry.root(), &eth1, &schedule, pending_root.as_ref());
                if root != head.state_root {
                    return Err(OpenError::Corrupt(format!(
                        "state root {} does not match head block {} (height {}), which commits to {}",
                        hex32(&root),
                        hex32(&head.hash),
                        head.height,
                        hex32(&head.state_root)
                    )));
                }
                let states = new_state_cache(&store, &genesis, &deposits);
                let proposals = proposals::load(store.as_ref())?;
                let equivocations = equivocation::Equivocations::load(store.as_ref())?;
                let stored_root = store
                    .get(keys::FINALITY_ROOT)?
                    .map(|bytes| {
                        <[u8; finality::ROOT_RECORD_LEN]>::try_from(bytes.as_slice()).map_err(
                            |_| {
                                OpenError::Corrupt(format!(
                                    "the finality root record is {} bytes, not {}",
                                    bytes.len(),
                                    finality::ROOT_RECORD_LEN
                                ))
                            },
                        )
                    })
                    .transpose()?;
                let finality = finality::Finality::open(
                    genesis.authorities.len(),
                    genesis.finality_depth,
                    head.height,
                    stored_root,
                    |height| slot_and_proposer_at(store.as_ref(), &genesis, height),
                )?;
                let base = base_height(store.as_ref())?;
                let pruned = prune::Cursors::load(store.as_ref())?;
                let pruning = prune::Shared::new(pruned.blocks.max(base));
                let chain = Self {
                    store,
                    genesis,
                    genesis_hash,
                    registry: Arc::new(RwLock::new(registry)),
                    eth1,
                    pending,
                    head,
                    deposits,
                    schedule,
                    modules: None,
                    proposals,
                    states,
                    invalid: Default::default(),
                    equivocations,
                    executed: 0,
                    finality,
                    pruning,
                    base,
                    preverifier: None,
                };
                chain.publish_head();
                Ok(chain)
            }
        }
    }

    /// The head.
    pub fn head(&self) -> Head {
        self.head
    }

    /// The genesis hash.
    pub fn genesis_hash(&self) -> Hash {
        self.genesis_hash
    }

    /// The genesis configuration.
    pub fn genesis(&self) -> &Genesis {
        &self.genesis
    }

    /// The eth1 state after the head: agreed eth1 data, deposit index, this period's votes.
    pub fn eth1_state(&self) -> &Eth1State {
        &self.eth1
    }

    /// The agreed deposit contract checkpoint (what a producer without a deposit source votes).
    pub fn eth1_data(&self) -> Eth1Data {
        self.eth1.eth1_data
    }

    /// What an authority signs to seal the block with hash `block_hash` on this chain.
    pub fn seal_message(&self, block_hash: &Hash) -> Hash {
        block::seal_message(&self.genesis_hash, block_hash)
    }

    /// The registry, shared with readers.
    pub fn registry(&self) -> Arc<RwLock<Registry>> {
        self.registry.clone()
    }

    /// Replaces the deposit engine (module upgrades; benchmarks).
    pub fn set_deposit_engine(&mut self, engine: DepositEngine) {
        self.states.set_deposit_engine(engine.clone());
        self.deposits = engine;
    }

    /// The state cache: states of recent blocks, the head's included.
    pub fn states(&self) -> Arc<StateCache> {
        self.states.clone()
    }

    /// Replaces the state cache with an empty one bounded by `config` (holding the head).
    pub fn configure_state_cache(&mut self, config: StateCacheConfig) {
        let source = StateSource::new(
            self.store.clone(),
            self.genesis.clone(),
            self.deposits.clone(),
        );
        if let Some(modules) = &self.modules {
            source.set_modules(modules.clone());
        }
        self.states = Arc::new(StateCache::new(config, source));
        self.publish_head();
    }

    /// Blocks whose state transition [`Chain::import`] ran since the chain was opened; a
    /// block whose state was already cached (a side branch executed on arrival, adopted by a
    /// reorg) is not counted.
    pub fn executed_blocks(&self) -> u64 {
        self.executed
    }

    /// The transition of `block` (a child of the head) taken from its cached post-state, if
    /// the cache has one: a side-branch block was executed on its parent's state on arrival,
    /// so a reorg onto its branch reuses that result instead of running the deposits again.
    /// The delta is read off the two registries (shared chunks are skipped); the outcomes of
    /// the deposits are not kept, so they come back empty.
    fn adopt(&self, block: &Block) -> Result<Option<Transition>, ImportError> {
        let hash = block.hash();
        let Some(state) = self.states.peek(&hash) else {
            return Ok(None);
        };
        if state.root() != block.header.state_root || state.height() != block.header.height {
            return Ok(None);
        }
        let delta = self
            .registry
            .read()
            .map_err(|_| ImportError::State {
                hash: hex32(&hash),
                source: StateError::Poisoned,
            })?
            .delta_to(state.registry());
        Ok(delta.map(|delta| Transition {
            outcomes: Vec::new(),
            delta,
            eth1: state.eth1().clone(),
            schedule: state.schedule().clone(),
            pending: state.pending().cloned(),
            root: state.root(),
        }))
    }

    /// Puts a snapshot of the head into the state cache as its head.
    fn publish_head(&self) {
        self.pruning
            .set_heights(self.head.height, self.finalized_height());
        match self.snapshot() {
            Ok(snapshot) => self.states.set_head(snapshot, self.finalized_height()),
            Err(e) => tracing::error!(error = %e, "cannot snapshot the head state"),
        }
    }

    /// An immutable snapshot of the head state: a clone of the registry's chunk tables (no
    /// element is copied), the eth1 state and the schedule.
    pub fn snapshot(&self) -> Result<StateSnapshot, StateError> {
        let registry = self
            .registry
            .read()
            .map_err(|_| StateError::Poisoned)?
            .clone();
        Ok(StateSnapshot::with_pending(
            self.head.hash,
            self.head.height,
            registry,
            self.eth1.clone(),
            self.schedule.clone(),
            self.pending.clone(),
        ))
    }

    /// Where the chain finds the deposits modules its schedule names (the node's prepared
    /// modules). Without it only the engine the chain was opened with can run.
    pub fn set_deposit_modules(&mut self, modules: Arc<dyn DepositModules>) {
        modules.scheduled(&self.schedule);
        self.states.source().set_modules(modules.clone());
        self.modules = Some(modules);
    }

    /// The module schedule after the head.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The deposits engine that runs the block at `height` on the head, chosen by the head's
    /// schedule: the scheduled module, or the engine the chain was opened with when the
    /// schedule names none or names that very module. A module the node does not have ready is
    /// [`ImportError::ModuleMissing`] — our condition, not the block's.
    fn deposit_engine_at(&self, height: u64) -> Result<DepositEngine, ImportError> {
        transition::engine_for(
            &self.schedule,
            height,
            &self.deposits,
            self.modules.as_ref(),
        )
    }

    /// Records the operator's proposal: this node's blocks vote for `op` while the vote still
    /// counts (more than the genesis lead before its height) and until it is scheduled. Kept in
    /// the store, so a restart goes on voting.
    pub fn propose_upgrade(&mut self, op: UpgradeOp) -> Result<(), ProposeError> {
        self.propose(Action::Upgrade, op)
    }

    /// Records the operator's proposal to cancel the scheduled upgrade `op`: this node's blocks
    /// vote for the cancel while it still counts and until it is carried. Kept in the store.
    pub fn propose_cancel(&mut self, op: UpgradeOp) -> Result<(), ProposeError> {
        self.propose(Action::Cancel, op)
    }

    fn propose(&mut self, action: Action, op: UpgradeOp) -> Result<(), ProposeError> {
        self.check_proposal(action, op)?;
        if action == Action::Upgrade && op.kind == Kind::Deposits {
            self.check_holds_queue(&op)?;
        }
        let mut proposals = self.proposals.clone();
        proposals.retain(|(a, p)| !(*a == action && *p == op));
        proposals.push((action, op));
        let mut batch = WriteBatch::new();
        batch.put(keys::PROPOSALS, proposals::encode(&proposals));
        self.store.commit(&batch)?;
        self.proposals = proposals;
        Ok(())
    }

    /// A proposed deposits module's migration, run now on the head's state as the block at
    /// `op.height` would run it: one that fails is refused (it would stop import at that
    /// height). Returns the queue's length after it (`None`: the module has no migration).
    fn check_migration(
        &self,
        op: &UpgradeOp,
        engine: Option<&DepositEngine>,
    ) -> Result<Option<u64>, ProposeError> {
        let Some(DepositEngine::Module(module)) = engine else {
            return Ok(None);
        };
        let registry = self
            .registry
            .read()
            .map_err(|_| ProposeError::MigrationFails {
                module: hex32(&op.module),
                height: self.head.height,
                source: migration::MigrationError::State(crate::state::StateError::Poisoned),
            })?
            .clone();
        let migrated = migration::check(
            module,
            &self.genesis,
            &registry,
            self.pending.as_ref(),
            op.height,
        )
        .map_err(|source| ProposeError::MigrationFails {
            module: hex32(&op.module),
            height: self.head.height,
            source,
        })?;
        Ok(migrated.map(|m| m.pending.len()))
    }

    /// The downgrade rule: while deposits are queued under deposits@3, a deposits module whose
    /// contract cannot hold the queue (an older major) is refused, unless its migration drains
    /// the queue (a down-migration: run on the head's state, it leaves the queue empty). Any
    /// proposed module with a migration must finish it on the head's state.
    fn check_holds_queue(&self, op: &UpgradeOp) -> Result<(), ProposeError> {
        let module = &op.module;
        let engine = if self.deposits.hash() == Some(*module) {
            Some(self.deposits.clone())
        } else {
            self.modules.as_ref().and_then(|m| m.deposits(module))
        };
        let after_migration = self.check_migration(op, engine.as_ref())?;
        let queued = self.pending.as_ref().map_or(0, PendingQueue::len);
        if queued == 0 || after_migration == Some(0) {
            return Ok(());
        }
        let contract = match engine {
            Some(DepositEngine::Module(m)) => m.contract(),
            // The native reference is deposits@2's phase0 semantics.
            #[cfg(any(test, feature = "test-utils"))]
            Some(DepositEngine::Native(_)) => crate::runtime::inspect::Version {
                major: 2,
                minor: 0,
                patch: 0,
            },
            None => {
                return Err(ProposeError::ContractUnknown {
                    module: hex32(module),
                    queued,
                });
            }
        };
        if contract.major >= transition::QUEUE_CONTRACT_MAJOR {
            return Ok(());
        }
        Err(ProposeError::CannotHoldQueue {
            module: hex32(module),
            contract: contract.to_string(),
            queued,
        })
    }

    /// The same rules a block's votes meet, checked now so the operator hears of them; drops
    /// proposals that can no longer count.
    fn check_proposal(
        &mut self,
        action: Action,
        op: UpgradeOp,
    ) -> Result<(), crate::state::ScheduleError> {
        let next = self.head.height.saturating_add(1);
        let rules = self.genesis.governance();
        let one = [op];
        let votes = match action {
            Action::Upgrade => BlockVotes {
                upgrades: &one,
                ..BlockVotes::default()
            },
            Action::Cancel => BlockVotes {
                cancels: &one,
                ..BlockVotes::default()
            },
        };
        // The proposer's own quota is checked when its block is built; here any index that
        // holds no pending vote stands in for it.
        self.schedule.with_block(next, u32::MAX, votes, &rules)?;
        self.proposals
            .retain(|(_, p)| p.height > next.saturating_add(rules.lead));
        Ok(())
    }

    /// The operator's proposals not yet expired: what this node's blocks vote for.
    pub fn proposals(&self) -> &[(Action, UpgradeOp)] {
        &self.proposals
    }

    /// The votes and readiness attestations `proposer`'s block at `height` carries: the
    /// operator's proposals that still count, are not carried yet and lack this proposer's
    /// vote, and every open deposits upgrade whose module this node holds ready that it has not
    /// attested yet. Never what would make the block invalid.
    fn schedule_votes_for(&self, height: u64, proposer: u32) -> ScheduleVotes {
        let rules = self.genesis.governance();
        let voted = |action: Action, op: &UpgradeOp| {
            self.schedule
                .pending
                .iter()
                .any(|p| p.action == action && p.op == *op && p.voters.contains(&proposer))
        };
        let wanted = |action: Action| -> Vec<UpgradeOp> {
            self.proposals
                .iter()
                .filter(|(a, op)| *a == action && op.height > height.saturating_add(rules.lead))
                .filter(|(a, op)| match a {
                    Action::Upgrade => !self.schedule.entries.contains(op),
                    Action::Cancel => self.schedule.upcoming(height).any(|e| e == op),
                })
                .filter(|(a, op)| !voted(*a, op))
                .map(|(_, op)| *op)
                .take(MAX_UPGRADE_VOTES)
                .collect()
        };
        let upgrades = wanted(Action::Upgrade);
        let cancels = wanted(Action::Cancel);
        let mut ready: Vec<UpgradeOp> = Vec::new();
        for op in self.schedule.open_upgrades(height).chain(upgrades.iter()) {
            if op.kind == Kind::Deposits
                && !ready.contains(op)
                && !self.schedule.attesters(op).contains(&proposer)
                && self.holds_ready(&op.module)
            {
                ready.push(*op);
            }
        }
        ready.truncate(MAX_READY_ATTESTATIONS);
        let fits = |votes: BlockVotes<'_>| {
            self.schedule
                .with_block(height, proposer, votes, &rules)
                .map_err(|e| tracing::warn!(error = %e, "not casting these upgrade votes"))
                .is_ok()
        };
        let all = BlockVotes {
            upgrades: &upgrades,
            cancels: &cancels,
            ready: &ready,
        };
        if fits(all) {
            return ScheduleVotes {
                upgrades,
                cancels,
                ready,
            };
        }
        let attested_only = ready
            .iter()
            .filter(|op| self.schedule.open_upgrades(height).any(|o| o == *op))
            .copied()
            .collect::<Vec<_>>();
        let only_ready = BlockVotes {
            ready: &attested_only,
            ..BlockVotes::default()
        };
        ScheduleVotes {
            ready: if fits(only_ready) {
                attested_only
            } else {
                Vec::new()
            },
            ..ScheduleVotes::default()
        }
    }

    /// Whether this node holds the deposits module `hash` compiled and warmed: the engine the
    /// chain was opened with, or a prepared module.
    fn holds_ready(&self, hash: &Hash) -> bool {
        self.deposits.hash() == Some(*hash)
            || self.modules.as_ref().is_some_and(|m| m.is_ready(hash))
    }

    /// The lowest height above genesis this node still holds blocks from (and serves): heights
    /// below it were pruned (`prune`) or lie below the checkpoint the chain started from.
    pub fn served_from(&self) -> u64 {
        self.pruning.floor()
    }

    /// A pruner of this chain's store keeping `history` (see [`prune`]): run its steps, or
    /// [`Pruner::spawn`](prune::Pruner::spawn) it in the background. It stops when the chain
    /// is dropped.
    pub fn pruner(&self, history: prune::History) -> prune::Pruner {
        prune::Pruner::new(
            self.store.clone(),
            &self.pruning,
            self.states.clone(),
            history,
            self.genesis.max_deposits_per_block,
            self.genesis.finality_depth,
            self.base,
        )
    }

    /// The canonical block at `height` (`None` above the head and below
    /// [`Chain::served_from`], genesis excepted).
    pub fn block_at(&self, height: u64) -> Result<Option<Block>, StoreError> {
        let Some(hash) = self.store.get(&keys::height(height))? else {
            return Ok(None);
        };
        let hash: Hash = hash
            .try_into()
            .map_err(|_| StoreError::Corrupt(format!("height index {height} malformed")))?;
        let Some(bytes) = self.store.get(&keys::block(&hash))? else {
            // Pruned between the two reads: the floor rose before the deletion was committed.
            if height < self.served_from() {
                return Ok(None);
            }
            return Err(StoreError::Corrupt(format!(
                "block {} indexed at height {height} missing",
                hex32(&hash)
            )));
        };
        Block::decode(&bytes, self.genesis.max_deposits_per_block)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("block {}: {e}", hex32(&hash))))
    }

    /// The eth1 state after `proposer`'s vote at `slot` (`process_eth1_data`).
    fn voted(
        &self,
        slot: u64,
        proposer: u32,
        vote: Eth1Data,
        name: &str,
    ) -> Result<Eth1State, ImportError> {
        transition::voted(&self.genesis, &self.eth1, slot, proposer, vote, name)
    }

    fn transition(
        &self,
        header: &BlockHeader,
        body: &block::BlockBody,
    ) -> Result<Transition, ImportError> {
        transition::transition(
            &self.genesis,
            &|height| self.deposit_engine_at(height),
            &self.registry,
            &transition::Parent {
                eth1: &self.eth1,
                schedule: &self.schedule,
                pending: self.pending.as_ref(),
                slot: self.head.slot,
            },
            header,
            body,
        )
    }

    /// Checks that the block comes from its slot's authority (chains with an authority set).
    fn check_seal(&self, block: &Block, name: &str) -> Result<(), ImportError> {
        check_seal(&self.genesis, &self.genesis_hash, block, name)
    }

    /// Which deposits the next block at `slot` by `proposer`, voting `vote`, must carry (the
    /// vote counts first, as in phase0). Fails if the vote is invalid.
    pub fn deposits_due(
        &self,
        slot: u64,
        proposer: u32,
        vote: &Eth1Data,
    ) -> Result<DueDeposits, ImportError> {
        let voted = self.voted(slot, proposer, *vote, "being built")?;
        Ok(DueDeposits {
            from: voted.deposit_index,
            count: voted.due(u64::from(self.genesis.max_deposits_per_block)),
            eth1_data: voted.eth1_data,
        })
    }

    /// Builds the next block on the head at `slot`, voting `eth1_vote`, with `deposits` (the
    /// proposer's side; unsealed). The deposits must be exactly the due ones
    /// ([`Chain::deposits_due`]) or the block is refused like an imported one would be.
    pub fn build_block(
        &self,
        slot: u64,
        proposer: u32,
        eth1_vote: Eth1Data,
        deposits: Vec<ProvenDeposit>,
    ) -> Result<Block, ImportError> {
        let height = self.head.height.saturating_add(1);
        let votes = self.schedule_votes_for(height, proposer);
        let body = block::BlockBody {
            eth1_vote,
            deposits,
            upgrade_votes: votes.upgrades,
            cancel_votes: votes.cancels,
            ready: votes.ready,
        };
        let mut header = BlockHeader {
            parent_hash: self.head.hash,
            height,
            slot,
            proposer,
            state_root: [0; 32],
            body_root: body.root(),
        };
        header.state_root = self.transition(&header, &body)?.root;
        Ok(Block {
            header,
            body,
            seal: block::Seal::Unsigned,
        })
    }

    /// Builds the next block voting `eth1_vote`, with the due deposits proven by `source`.
    pub fn build_block_from(
        &self,
        slot: u64,
        proposer: u32,
        eth1_vote: Eth1Data,
        source: &dyn DepositProofs,
    ) -> Result<Block, BuildError> {
        let due = self.deposits_due(slot, proposer, &eth1_vote)?;
        let deposits = if due.count == 0 {
            Vec::new()
        } else {
            source.check_root(&due.eth1_data)?;
            source.proven_deposits(due.from, due.count, due.eth1_data.deposit_count)?
        };
        Ok(self.build_block(slot, proposer, eth1_vote, deposits)?)
    }

    /// Imports the next block. On `Ok` the block, its state changes and the new head are on
    /// disk; on `Err` nothing changed.
    pub fn import(&mut self, block: &Block) -> Result<Imported, ImportError> {
        let header = &block.header;
        let hash = block.hash();
        let name = hex32(&hash);
        let not_next = |reason: String| ImportError::NotNext {
            hash: name.clone(),
            reason,
        };
        if header.parent_hash != self.head.hash {
            return Err(not_next(format!(
                "parent {} is not the head {}",
                hex32(&header.parent_hash),
                hex32(&self.head.hash)
            )));
        }
        if Some(header.height) != self.head.height.checked_add(1) {
            return Err(not_next(format!(
                "height {} after head height {}",
                header.height, self.head.height
            )));
        }
        if header.slot <= self.head.slot {
            return Err(not_next(format!(
                "slot {} is not after the head's slot {}",
                header.slot, self.head.slot
            )));
        }
        if block.body.deposits.len() > usize::from(self.genesis.max_deposits_per_block) {
            return Err(ImportError::BadBody {
                hash: name,
                reason: format!(
                    "{} deposits, limit {}",
                    block.body.deposits.len(),
                    self.genesis.max_deposits_per_block
                ),
            });
        }
        self.check_seal(block, &name)?;
        if block.body.root() != header.body_root {
            return Err(ImportError::BadBody {
                hash: name,
                reason: "body does not match the header's body root".into(),
            });
        }

        let Transition {
            outcomes,
            delta,
            eth1,
            schedule,
            pending,
            root,
        } = match self.adopt(block)? {
            Some(adopted) => adopted,
            None => {
                self.executed = self.executed.saturating_add(1);
                self.transition(header, &block.body)?
            }
        };
        if root != header.state_root {
            return Err(ImportError::StateRootMismatch {
                hash: name,
                claimed: hex32(&header.state_root),
                computed: hex32(&root),
            });
        }

        let head = Head {
            hash,
            height: header.height,
            slot: header.slot,
            state_root: root,
        };
        let mut batch = WriteBatch::new();
        let undo = {
            let registry = self.registry.read().map_err(|_| ImportError::State {
                hash: name.clone(),
                source: StateError::Poisoned,
            })?;
            // The chunks the delta touches, as they will be once memory follows the batch.
            registry_store::put_delta(&mut batch, &registry, &delta)
                .and_then(|()| registry.undo_for(&delta))
                .map_err(|source| ImportError::State {
                    hash: name.clone(),
                    source,
                })?
        };
        let warm_input = self.deposit_call(block, &name);
        self.note_first_header(block, &mut batch)
            .map_err(|source| ImportError::Store {
                hash: name.clone(),
                source,
            })?;
        batch.put(keys::block(&hash), block.encode());
        batch.put(keys::undo(&hash), undo.encode());
        batch.put(keys::eth1(&hash), eth1.encode());
        // The schedule is state like any other: an activation is part of this batch, never a
        // marker written after it.
        batch.put(keys::schedule(&hash), schedule.encode());
        // deposits@3's queue: the entries this block pushed and the extent after it.
        pending_store::put_block(&mut batch, &hash, self.pending.as_ref(), pending.as_ref());
        batch.put(keys::height(head.height), hash.to_vec());
        batch.put(keys::HEAD, head.encode());
        // The finalized root as of the parent (never reverted): a restart walks only above it.
        if let Some(root) = self.finality.root_record() {
            batch.put(keys::FINALITY_ROOT, root.to_vec());
        }
        self.store
            .commit(&batch)
            .map_err(|source| ImportError::Store {
                hash: name.clone(),
                source,
            })?;

        // The batch is durable; mirror it in memory. `root_after` already proved the delta
        // applies, so a failure here means memory and disk disagree: fatal (`Diverged`), the
        // node stops and the next start reloads from disk. As revert does, the in-memory root
        // is checked against the committed one.
        let diverged = |memory_root: String, reason: String| ImportError::Diverged {
            hash: name.clone(),
            height: head.height,
            disk_root: hex32(&root),
            memory_root,
            reason,
        };
        let mut registry = self
            .registry
            .write()
            .map_err(|_| diverged("unreadable".into(), "registry lock poisoned".into()))?;
        let pending_root = pending.as_ref().map(PendingQueue::root);
        let root_of = |registry: &Registry| {
            state_root_with(&registry.root(), &eth1, &schedule, pending_root.as_ref())
        };
        if let Err(e) = registry.apply(&delta) {
            return Err(diverged(hex32(&root_of(&registry)), e.to_string()));
        }
        let memory_root = root_of(&registry);
        if memory_root != root {
            return Err(diverged(
                hex32(&memory_root),
                "the state root in memory after applying differs".into(),
            ));
        }
        drop(registry);
        self.eth1 = eth1;
        self.schedule = schedule;
        self.pending = pending;
        self.head = head;
        self.finality
            .imported(head.height, header.slot, header.proposer);
        if let Some(modules) = &self.modules {
            modules.scheduled(&self.schedule);
            if let Some(call) = warm_input {
                modules.imported(call);
            }
        }
        self.publish_head();
        self.offer_to_preverifier();
        Ok(Imported { head, outcomes })
    }

    /// Has `preverifier` verify, after each import, the signatures of the queue entries the
    /// next epoch transitions may apply (it fills the cache of the runtime the deposits
    /// modules run on). It only warms a cache: results are the same with or without it.
    pub fn set_preverifier(&mut self, preverifier: preverify::Preverifier) {
        self.preverifier = Some(preverifier);
        self.offer_to_preverifier();
    }

    /// The pre-verifier, if one is set.
    pub fn preverifier(&self) -> Option<&preverify::Preverifier> {
        self.preverifier.as_ref()
    }

    /// Sends the first [`preverify::WINDOW`] queue entries whose pubkey is not in the
    /// registry to the pre-verifier, if there is one and a queue; never blocks.
    fn offer_to_preverifier(&self) {
        let (Some(preverifier), Some(queue)) = (&self.preverifier, &self.pending) else {
            return;
        };
        let Ok(registry) = self.registry.read() else {
            return;
        };
        let entries: Vec<_> = queue
            .window(0, preverify::WINDOW)
            .filter(|e| RegistryRead::index_of(&*registry, &e.pubkey).is_none())
            .copied()
            .collect();
        drop(registry);
        preverifier.offer(entries, self.genesis.genesis_fork_version);
    }

    /// The deposits call `block` (valid, about to become the head) makes, for the warm-up of
    /// new deposits modules: only for a block with deposits, on a chain whose modules listen.
    fn deposit_call(&self, block: &Block, name: &str) -> Option<DepositCall> {
        let header = &block.header;
        if block.body.deposits.is_empty() || self.modules.is_none() {
            return None;
        }
        let voted = self
            .voted(header.slot, header.proposer, block.body.eth1_vote, name)
            .ok()?;
        let registry = self.registry.read().ok()?.clone();
        Some(DepositCall {
            registry: Arc::new(RwLock::new(registry)),
            ctx: transition::context(&self.genesis, header, &voted),
            deposits: block.body.deposits.iter().map(to_wit).collect(),
        })
    }
}

/// An empty state cache with the default budget over `store`.
fn new_state_cache(
    store: &Arc<dyn KvStore>,
    genesis: &Genesis,
    deposits: &DepositEngine,
) -> Arc<StateCache> {
    Arc::new(StateCache::new(
        StateCacheConfig::default(),
        StateSource::new(store.clone(), genesis.clone(), deposits.clone()),
    ))
}

/// The eth1 state stored after block `hash`.
pub(crate) fn load_eth1(store: &dyn KvStore, hash: &Hash) -> Result<Eth1State, StoreError> {
    let bytes = store.get(&keys::eth1(hash))?.ok_or_else(|| {
        StoreError::Corrupt(format!("eth1 state of block {} missing", hex32(hash)))
    })?;
    Eth1State::decode(&bytes).ok_or_else(|| {
        StoreError::Corrupt(format!("eth1 state of block {} malformed", hex32(hash)))
    })
}

/// deposits@3's queue extent stored after block `hash` (`None`: that state has no queue).
pub(crate) fn load_pending_extent(
    store: &dyn KvStore,
    hash: &Hash,
) -> Result<Option<crate::state::PendingUndo>, StoreError> {
    pending_store::load_extent(store, hash)
}

/// The queue of an ancestor with extent `extent`, rolled back from a later queue of its chain.
pub(crate) fn pending_rolled_back(
    later: Option<&PendingQueue>,
    extent: Option<&crate::state::PendingUndo>,
) -> Result<Option<PendingQueue>, crate::state::PendingError> {
    pending_store::rolled_back(later, extent)
}

/// The module schedule stored after block `hash`.
pub(crate) fn load_schedule(store: &dyn KvStore, hash: &Hash) -> Result<Schedule, StoreError> {
    let bytes = store.get(&keys::schedule(hash))?.ok_or_else(|| {
        StoreError::Corrupt(format!("module schedule of block {} missing", hex32(hash)))
    })?;
    Schedule::decode(&bytes).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "module schedule of block {} malformed",
            hex32(hash)
        ))
    })
}

/// Checks that `block` comes from its slot's authority (chains with an authority set).
pub(crate) fn check_seal(
    genesis: &Genesis,
    genesis_hash: &Hash,
    block: &Block,
    name: &str,
) -> Result<(), ImportError> {
    let bad = |reason: String| ImportError::BadSeal {
        hash: name.to_string(),
        reason,
    };
    let Some(expected) = genesis.proposer_for(block.header.slot) else {
        return Ok(());
    };
    if block.header.proposer != expected {
        return Err(bad(format!(
            "slot {} belongs to authority {expected}, the header names {}",
            block.header.slot, block.header.proposer
        )));
    }
    let authority = usize::try_from(expected)
        .ok()
        .and_then(|i| genesis.authorities.get(i))
        .ok_or_else(|| bad(format!("authority {expected} does not exist")))?;
    match &block.seal {
        block::Seal::Unsigned => Err(bad("unsigned, but this chain has authorities".into())),
        block::Seal::Ed25519(signature) => {
            let id = crate::crypto::identity::NodeId::from_bytes(*authority);
            if id.verify(&block::seal_message(genesis_hash, &block.hash()), signature) {
                Ok(())
            } else {
                Err(bad(format!(
                    "signature does not verify against authority {id}"
                )))
            }
        }
    }
}

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
//! - What every node computes alike — blocks, genesis, the eth1 state, the deposits engines and
//!   the one transition, [`crate::consensus::apply_block`] — is [`crate::consensus`]'s,
//!   re-exported here under its old paths ([`block`], [`genesis`], [`eth1`], …).
//! - [`workload`]: seeded, signed deposits and an in-memory deposit log (dev chains, tests,
//!   benchmarks); `native_deposits` (re-exported with the `test-utils` feature) is the native
//!   reference transition, the modules' check in tests and the benchmarks' baseline.
//! - Errors, revert, fork choice and equivocation (one block per authority per slot) live in
//!   private submodules and are re-exported here.

#[cfg(any(test, feature = "test-utils"))]
pub use crate::consensus::native_deposits;
pub use crate::consensus::{block, deposits_v3, eth1, genesis, migration};
mod equivocation;
mod errors;
mod finality;
mod fork_choice;
mod from_checkpoint;
mod import;
mod open;
pub mod preverify;
mod proposals;
mod propose;
pub mod prune;
mod registry_store;
mod revert;
pub mod workload;

use std::sync::Arc;

pub use crate::consensus::{
    DepositContext, DepositEngine, DepositModules, DepositOutcome, DepositRejection,
    DepositsResult, FailureClass, ImportError, RegistryRejection,
};
use crate::hashes::ModuleHash;
use crate::state_cache::pending_store;
pub use crate::state_cache::records::base_height;
use crate::state_cache::records::{load_eth1, load_schedule};
use block::{Block, BlockHash, BlockHeader, StateRoot};
pub use equivocation::{Evidence, EvidenceSummary, MAX_EVIDENCE, RECENT_EVIDENCE, SignedHeader};
pub use errors::{BuildError, OpenError, RevertError};
use eth1::{DepositProofs, DueDeposits, Eth1Data, Eth1State, ProvenDeposit};
pub use finality::SealLock;
pub use fork_choice::{Added, ForkChoiceError};
pub use from_checkpoint::{CheckpointStart, init_from_checkpoint};
use genesis::Genesis;
pub use propose::ProposeError;

use crate::consensus::{Applied, Rules, apply_block};
use crate::progress::ProgressDisplay;
use crate::runtime::Kind;
use crate::runtime::deposits::DepositCall;
use crate::state::schedule::{Action, BlockVotes, MAX_READY_ATTESTATIONS, MAX_UPGRADE_VOTES};
use crate::state::{PendingQueue, Registry, RegistryRead, Schedule, State, StatePart, UpgradeOp};
use crate::state_cache::{StateCache, StateCacheConfig, StateSource};
use crate::store::{KvStore, StoreError, WriteBatch, keys};

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
    pub hash: BlockHash,
    /// Height.
    pub height: u64,
    /// Slot.
    pub slot: u64,
    /// State root after the head block.
    pub state_root: StateRoot,
}

impl Head {
    fn encode(&self) -> Vec<u8> {
        [
            self.hash.as_bytes().as_slice(),
            &self.height.to_le_bytes(),
            &self.slot.to_le_bytes(),
            self.state_root.as_bytes(),
        ]
        .concat()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let (hash, rest) = bytes.split_first_chunk::<32>()?;
        let (height, rest) = rest.split_first_chunk::<8>()?;
        let (slot, rest) = rest.split_first_chunk::<8>()?;
        let state_root: &[u8; 32] = rest.try_into().ok()?;
        Some(Self {
            hash: BlockHash::new(*hash),
            height: u64::from_le_bytes(*height),
            slot: u64::from_le_bytes(*slot),
            state_root: StateRoot::new(*state_root),
        })
    }
}

/// What importing a block did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The new head.
    pub head: Head,
    /// One outcome per deposit.
    pub outcomes: Vec<DepositOutcome>,
}

/// A chain over a store.
pub struct Chain {
    store: Arc<dyn KvStore>,
    genesis: Genesis,
    genesis_hash: BlockHash,
    head: Head,
    deposits: DepositEngine,
    modules: Option<Arc<dyn DepositModules>>,
    proposals: Vec<(Action, UpgradeOp)>,
    /// Every state the chain keeps, the head's included: the state after the head (registry,
    /// eth1 state, schedule, deposits@3's queue) is the cache's head ([`Chain::head_state`]),
    /// which commit replaces with what [`apply_block`] made of it.
    states: Arc<StateCache>,
    /// Side-branch blocks found invalid (bounded); their descendants are refused.
    invalid: std::collections::HashSet<BlockHash>,
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

use crate::consensus::shell::{ShellVerified, verify_shell};

impl Chain {
    /// The head.
    pub fn head(&self) -> Head {
        self.head
    }

    /// The genesis hash.
    pub fn genesis_hash(&self) -> BlockHash {
        self.genesis_hash
    }

    /// The genesis configuration.
    pub fn genesis(&self) -> &Genesis {
        &self.genesis
    }

    /// The eth1 state after the head: agreed eth1 data, deposit index, this period's votes.
    pub fn eth1_state(&self) -> StatePart<Eth1State> {
        StatePart::new(self.head_state(), State::eth1)
    }

    /// The agreed deposit contract checkpoint (what a producer without a deposit source votes).
    pub fn eth1_data(&self) -> Eth1Data {
        self.head_state().eth1().eth1_data
    }

    /// What an authority signs to seal the block with hash `block_hash` on this chain.
    pub fn seal_message(&self, block_hash: &BlockHash) -> block::Digest32 {
        block::seal_message(&self.genesis_hash, block_hash)
    }

    /// The head's registry, as it is now (an immutable view: later imports do not change it).
    pub fn registry(&self) -> Arc<Registry> {
        self.head_state().shared_registry().clone()
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
        self.states = Arc::new(StateCache::new(config, source, self.head_state()));
        self.publish_head(self.head_state());
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
    fn adopt(&self, block: &Block) -> Result<Option<Applied>, ImportError> {
        let hash = block.hash();
        let Some(state) = self.states.peek(&hash) else {
            return Ok(None);
        };
        if state.root() != block.header.state_root || state.height() != block.header.height {
            return Ok(None);
        }
        let delta = self.head_state().registry().delta_to(state.registry());
        Ok(delta.map(|delta| Applied {
            state,
            outcomes: Vec::new(),
            delta,
        }))
    }

    /// Makes `state` (the state after [`Chain::head`]) the state cache's head.
    fn publish_head(&self, state: State) {
        self.pruning
            .set_heights(self.head.height, self.finalized_height());
        self.states.set_head(state, self.finalized_height());
    }

    /// The state after the head: the state cache's head, read without a lock.
    fn head_state(&self) -> State {
        self.states.head()
    }

    /// The state after the head (immutable: later imports do not change it; one reference
    /// count).
    pub fn snapshot(&self) -> State {
        self.head_state()
    }

    /// What blocks are applied under on this chain: its genesis, its engine and the modules
    /// its schedule may name.
    fn rules(&self) -> Rules<'_> {
        Rules::new(&self.genesis, &self.deposits, self.modules.as_ref())
    }

    /// Where the chain finds the deposits modules its schedule names (the node's prepared
    /// modules). Without it only the engine the chain was opened with can run.
    pub fn set_deposit_modules(&mut self, modules: Arc<dyn DepositModules>) {
        modules.scheduled(self.head_state().schedule());
        self.states.source().set_modules(modules.clone());
        self.modules = Some(modules);
    }

    /// The module schedule after the head.
    pub fn schedule(&self) -> StatePart<Schedule> {
        StatePart::new(self.head_state(), State::schedule)
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
        let hash = <[u8; 32]>::try_from(hash)
            .map(BlockHash::new)
            .map_err(|_| StoreError::Corrupt(format!("height index {height} malformed")))?;
        let Some(bytes) = self.store.get(&keys::block(&hash))? else {
            // Pruned between the two reads: the floor rose before the deletion was committed.
            if height < self.served_from() {
                return Ok(None);
            }
            return Err(StoreError::Corrupt(format!(
                "block {} indexed at height {height} missing",
                hash
            )));
        };
        Block::decode(&bytes, self.genesis.max_deposits_per_block)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("block {}: {e}", hash)))
    }

    /// Checks the block's seal and body against its header (`consensus::shell`).
    fn verify_shell<'a>(&self, block: &'a Block) -> Result<ShellVerified<'a>, ImportError> {
        verify_shell(block, &self.genesis, &self.genesis_hash)
    }

    /// Which deposits the next block at `slot` by `proposer`, voting `vote`, must carry (the
    /// vote counts first, as in phase0). Fails if the vote is invalid.
    pub fn deposits_due(
        &self,
        slot: u64,
        proposer: u32,
        vote: &Eth1Data,
    ) -> Result<DueDeposits, ImportError> {
        crate::consensus::due_deposits(&self.genesis, &self.head_state(), slot, proposer, *vote)
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
        let header = BlockHeader {
            parent_hash: self.head.hash,
            height,
            slot,
            proposer,
            state_root: StateRoot::default(),
            body_root: body.root(),
        };
        crate::consensus::build_block(
            &self.rules(),
            &self.head_state(),
            self.head.slot,
            header,
            body,
        )
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
}

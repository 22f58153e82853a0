//! The one state transition: [`apply_block`] takes the state after a block's parent and gives
//! the state after the block. Import on the head, regeneration and side-branch execution in
//! the state cache all call it; a producer's [`build_block`] runs the same steps to fill in
//! the root of a block it is building. The steps themselves (`transition`) are private to
//! `consensus`.

use std::sync::Arc;

use super::block::{Block, BlockBody, BlockHeader, Seal};
use super::deposit_engine::{DepositEngine, DepositModules};
use super::errors::ImportError;
use super::eth1::{DueDeposits, Eth1Data};
use super::genesis::Genesis;
use super::transition::{self, Parent, Transition};
use crate::deposit::DepositOutcome;
use crate::runtime::deposits::DepositCall;
use crate::state::{RegistryDelta, Schedule, State};

/// What a block is applied under: the genesis configuration and where the deposits engine
/// of a height comes from.
///
/// Not a single engine: which deposits engine runs a block depends on the schedule of the
/// state it is applied to at the block's height (an upgrade switches it), and a module the
/// schedule names that this node does not have is our condition, which `modules` is told of
/// ([`DepositModules::missing`]) — so the engine is chosen inside the transition, per state.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    genesis: &'a Genesis,
    default: &'a DepositEngine,
    modules: Option<&'a Arc<dyn DepositModules>>,
}

impl<'a> Rules<'a> {
    /// Blocks of `genesis` run the module the schedule names (found in `modules`), or
    /// `default` where it names none or names that very module.
    pub fn new(
        genesis: &'a Genesis,
        default: &'a DepositEngine,
        modules: Option<&'a Arc<dyn DepositModules>>,
    ) -> Self {
        Self {
            genesis,
            default,
            modules,
        }
    }

    /// The genesis configuration.
    pub fn genesis(&self) -> &'a Genesis {
        self.genesis
    }

    /// The deposits engine that runs the block at `height` on a state with `schedule`: the
    /// scheduled module, or the default engine. A module the node does not have ready is
    /// [`ImportError::ModuleMissing`] — our condition, not the block's.
    pub fn engine_at(
        &self,
        schedule: &Schedule,
        height: u64,
    ) -> Result<DepositEngine, ImportError> {
        transition::engine_for(schedule, height, self.default, self.modules)
    }
}

/// A block applied: the state after it, what its deposits did and the registry change (what
/// the chain writes to its store).
pub struct Applied {
    /// The state after the block.
    pub state: State,
    /// One outcome per deposit (empty for a state taken from the cache, which keeps none, and
    /// under deposits@3, whose deposits are queued).
    pub outcomes: Vec<DepositOutcome>,
    /// The registry change from the parent's state to [`Applied::state`].
    pub delta: RegistryDelta,
}

/// The state after `block`, applied to `parent` (the state after the block's parent, a block
/// at `parent_slot`, which says whether `block` starts an epoch): the eth1 vote, the upgrade
/// votes, exactly the due deposits through the engine `rules` gives for the height (a
/// deposits@3 module through its queue step, a module the height activates after its
/// migration), the state root checked against the header. `parent` is never changed: the
/// new state shares every chunk the block does not touch with it.
///
/// The block's header must follow `parent` (parent hash, height). Seal and body are not
/// checked here (`shell::verify_shell` does that once, before).
pub fn apply_block(
    rules: &Rules<'_>,
    parent: &State,
    parent_slot: u64,
    block: &Block,
) -> Result<Applied, ImportError> {
    let header = &block.header;
    let hash = block.hash();
    if header.parent_hash != parent.block_hash()
        || Some(header.height) != parent.height().checked_add(1)
    {
        return Err(ImportError::NotNext {
            hash,
            reason: format!(
                "applied to the state of {} at height {}",
                parent.block_hash(),
                parent.height()
            ),
        });
    }
    let done = run(rules, parent, parent_slot, header, &block.body)?;
    if done.root != header.state_root {
        return Err(ImportError::StateRootMismatch {
            hash,
            claimed: header.state_root,
            computed: done.root,
        });
    }
    // A clone of the parent's chunk tables, the touched chunks copied on write: the parent
    // (the head in the cache, a reader's view) stays as it was.
    let mut registry = Arc::clone(parent.shared_registry());
    Arc::make_mut(&mut registry)
        .apply(&done.delta)
        .map_err(|source| ImportError::State { hash, source })?;
    let state = State::from_shared(
        hash,
        header.height,
        registry,
        done.eth1,
        done.schedule,
        done.pending,
    );
    if state.root() != done.root {
        return Err(ImportError::Diverged {
            hash,
            height: header.height,
            disk_root: done.root,
            memory_root: state.root().to_string(),
            reason: "the state root after applying the registry change differs from the one \
                     computed before",
        });
    }
    Ok(Applied {
        state,
        outcomes: done.outcomes,
        delta: done.delta,
    })
}

/// The block `header` and `body` make on `parent` (a block at `parent_slot`), its header's
/// state root filled in: [`apply_block`]'s transition run for a block being built, which has
/// no root to check yet. Unsealed. Refused as import would refuse the block.
pub fn build_block(
    rules: &Rules<'_>,
    parent: &State,
    parent_slot: u64,
    mut header: BlockHeader,
    body: BlockBody,
) -> Result<Block, ImportError> {
    header.state_root = run(rules, parent, parent_slot, &header, &body)?.root;
    Ok(Block {
        header,
        body,
        seal: Seal::Unsigned,
    })
}

/// The deposits the next block at `slot` by `proposer`, voting `vote`, must carry on `state`
/// (the vote counts first, as in phase0). Fails if the vote is invalid.
pub fn due_deposits(
    genesis: &Genesis,
    state: &State,
    slot: u64,
    proposer: u32,
    vote: Eth1Data,
) -> Result<DueDeposits, ImportError> {
    let voted = transition::voted(genesis, state.eth1(), slot, proposer, vote)
        .map_err(|source| ImportError::BuiltEth1Vote { source })?;
    Ok(DueDeposits {
        from: voted.deposit_index,
        count: voted.due(u64::from(genesis.max_deposits_per_block)),
        eth1_data: voted.eth1_data,
    })
}

/// The deposits call `block` makes on `parent` (what warms a new deposits module on real
/// inputs); `None` when its eth1 vote is invalid there.
pub fn deposit_call(genesis: &Genesis, parent: &State, block: &Block) -> Option<DepositCall> {
    let header = &block.header;
    let voted = transition::voted(
        genesis,
        parent.eth1(),
        header.slot,
        header.proposer,
        block.body.eth1_vote,
    )
    .ok()?;
    Some(DepositCall::new(
        parent.shared_registry().clone(),
        &transition::context(genesis, header, &voted),
        &block.body.deposits,
    ))
}

/// The transition's steps over `parent`, nothing changed.
fn run(
    rules: &Rules<'_>,
    parent: &State,
    parent_slot: u64,
    header: &BlockHeader,
    body: &BlockBody,
) -> Result<Transition, ImportError> {
    transition::transition(
        rules.genesis,
        &|height| rules.engine_at(parent.schedule(), height),
        parent.shared_registry(),
        &Parent {
            eth1: parent.eth1(),
            schedule: parent.schedule(),
            pending: parent.pending(),
            slot: parent_slot,
        },
        header,
        body,
    )
}

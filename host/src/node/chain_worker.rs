//! The chain worker: one OS thread that owns the [`Chain`] and builds our blocks, filling them
//! with the due deposits proven by the [`DepositSource`] an authority follows.
//!
//! Block import runs WebAssembly and writes to sled, both blocking, so it stays off the async
//! runtime. Everything else talks to the worker through a [`ChainHandle`] (a bounded inbox,
//! answers on oneshot channels) and watches its [`ChainView`]. Commands are handled one at a
//! time, so imports, block production and range serving never interleave; they wait in a
//! [`WorkerQueue`](super::worker_queue::WorkerQueue) that puts production before imports before serving peers and bounds each.

use tokio::sync::{oneshot, watch};

use std::sync::Arc;

use super::worker_inbox::{InboxSender, Refused, inbox};
use super::worker_queue::{JobClass, QueueLimits, Requester};
use crate::chain::block::{Block, Seal};
use crate::chain::eth1::{DepositProofs, DepositProofsError, Eth1Data, ProvenDeposit};
use crate::chain::{Added, Chain, ForkChoiceError, Head, ImportError, SealLock};
use crate::checkpoint::service::CreateReply;
use crate::checkpoint::{CheckpointSummary, Checkpointer, FrozenState, checkpoint_height_at};
use crate::clock::{self, unix_ms};
use crate::deposit_source::DepositSource;
use crate::net::identity::NodeIdentity;
use crate::state::schedule::Action;
use crate::state::{RegistryRead, UpgradeOp};

mod checkpoints;
mod produce;

/// What the rest of the node sees of the chain; updated after every change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainView {
    /// The head.
    pub head: Head,
    /// Height at or below which blocks are final.
    pub finalized_height: u64,
    /// Lowest height above genesis whose block this node serves: 1 unless it pruned older
    /// blocks or started from a checkpoint (`/blocks` and range sync below it answer "pruned").
    pub served_from: u64,
    /// Validators in the head state.
    pub validators: u32,
    /// When the head last changed (ms since the Unix epoch; 0 = not since start).
    pub last_block_unix_ms: u64,
    /// Deposits of the deposit contract the head state has applied (`eth1_deposit_index`).
    pub deposit_index: u64,
    /// Times fork choice switched to another branch since start.
    pub reorgs: u64,
    /// Equivocations (an authority signing two blocks for one slot) found since start.
    pub equivocations: u64,
    /// The newest evidence records held, newest slot first.
    pub recent_evidence: [Option<crate::chain::EvidenceSummary>; crate::chain::RECENT_EVIDENCE],
    /// Import stopped above the head: the migration of the deposits module the next height
    /// activates failed there (`None` once a block at that height imports).
    pub import_stopped: Option<ImportStopped>,
}

/// Where and why import stopped: a failed migration at its module's activation height.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportStopped {
    /// The activation height no block could be imported at.
    pub height: u64,
    /// The deposits module whose migration failed.
    pub module: crate::hashes::ModuleHash,
}

/// The stop an import error means: a deposits module's migration failed at its activation
/// height (`None` for every other error).
fn import_stopped_by(e: &ForkChoiceError) -> Option<ImportStopped> {
    match e {
        ForkChoiceError::NotChecked(ImportError::Migration { height, module, .. }) => {
            Some(ImportStopped {
                height: *height,
                module: *module,
            })
        }
        _ => None,
    }
}

/// Why the worker could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The worker thread has stopped.
    #[error("the chain worker has stopped")]
    Stopped,
    /// The block was refused by fork choice or import.
    #[error(transparent)]
    Block(#[from] ForkChoiceError),
    /// Building or signing our own block failed.
    #[error("cannot produce a block at slot {slot}: {reason}")]
    Produce {
        /// The slot.
        slot: u64,
        /// What failed.
        reason: String,
    },
    /// Reading stored blocks failed.
    #[error("cannot read blocks: {0}")]
    Store(String),
    /// The blocks asked for were pruned here (or lie below the checkpoint this node started
    /// from): ask a node that keeps more history.
    #[error("blocks from height {start} are pruned here; this node keeps heights {below} and up")]
    Pruned {
        /// The first height asked for.
        start: u64,
        /// The lowest height above genesis this node serves.
        below: u64,
    },
    /// The worker's queue for this kind of job (or this peer's share of it) is full.
    #[error("the chain worker is busy; try again later")]
    Busy,
    /// The upgrade proposal breaks the schedule's rules.
    #[error("upgrade proposal refused: {0}")]
    Proposal(crate::chain::ProposeError),
    /// The block's slot has not started yet on our clock (beyond the skew allowance).
    #[error("block {height} is for slot {slot}, but the current slot is {current}")]
    FutureSlot {
        /// The block's height.
        height: u64,
        /// Its slot.
        slot: u64,
        /// Our current slot (with the clock-skew allowance).
        current: u64,
        /// How far beyond our clock the block's slot starts, in ms: beyond
        /// [`FAR_FUTURE_MS`](clock::FAR_FUTURE_MS) it is the sender's fault.
        ahead_ms: u64,
    },
}

enum Command {
    Add {
        block: Box<Block>,
        reply: oneshot::Sender<Result<Added, WorkerError>>,
    },
    Produce {
        slot: u64,
        reply: oneshot::Sender<Result<Option<Block>, WorkerError>>,
    },
    Blocks {
        requester: Requester,
        start: u64,
        count: u64,
        max_bytes: usize,
        reply: oneshot::Sender<Result<Vec<Vec<u8>>, WorkerError>>,
    },
    Checkpoint {
        reply: CreateReply,
    },
    Propose {
        action: Action,
        op: UpgradeOp,
        reply: oneshot::Sender<Result<(), WorkerError>>,
    },
}

/// Talks to the chain worker; cheap to clone. The worker stops when every handle is dropped.
#[derive(Clone)]
pub struct ChainHandle {
    commands: InboxSender<Command>,
    view: watch::Receiver<ChainView>,
}

impl std::fmt::Debug for ChainHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainHandle")
            .field("view", &*self.view.borrow())
            .finish_non_exhaustive()
    }
}

impl ChainHandle {
    async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<Result<T, WorkerError>>) -> Command,
    ) -> Result<T, WorkerError> {
        let (reply, rx) = oneshot::channel();
        let command = command(reply);
        let (class, requester) = class_of(&command);
        match self.commands.send(class, requester, command) {
            Ok(()) => {}
            Err(Refused::Full(_)) => return Err(WorkerError::Busy),
            Err(Refused::Closed(_)) => return Err(WorkerError::Stopped),
        }
        rx.await.map_err(|_| WorkerError::Stopped)?
    }

    /// Adds a block from the network (gossip or sync) through fork choice.
    pub async fn add_block(&self, block: Block) -> Result<Added, WorkerError> {
        self.ask(|reply| Command::Add {
            block: Box::new(block),
            reply,
        })
        .await
    }

    /// Builds, seals and imports our block for `slot` with the deposits due (proven by our
    /// deposit source); `None` if the head is already at or past `slot`.
    pub async fn produce(&self, slot: u64) -> Result<Option<Block>, WorkerError> {
        self.ask(|reply| Command::Produce { slot, reply }).await
    }

    /// Encoded canonical blocks from `start`, at most `count` and about `max_bytes` (at least
    /// one block if `start` exists).
    pub async fn blocks(
        &self,
        start: u64,
        count: u64,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, WorkerError> {
        self.blocks_for(None, start, count, max_bytes).await
    }

    /// [`blocks`](Self::blocks) on behalf of peer `requester`: served after production and
    /// imports, limited per peer ([`WorkerError::Busy`] beyond), and skipped if the requester
    /// gave up waiting.
    pub async fn blocks_for(
        &self,
        requester: Requester,
        start: u64,
        count: u64,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, WorkerError> {
        self.ask(|reply| Command::Blocks {
            requester,
            start,
            count,
            max_bytes,
            reply,
        })
        .await
    }

    /// Creates a checkpoint of the state at the finalized height now; resolves once it is
    /// stored (or refused: no checkpointer, no block final yet, one already running and one
    /// waiting).
    pub async fn create_checkpoint(&self) -> Result<CheckpointSummary, String> {
        let (reply, rx) = oneshot::channel();
        let command = Command::Checkpoint { reply };
        let (class, requester) = class_of(&command);
        match self.commands.send(class, requester, command) {
            Ok(()) => {}
            Err(Refused::Full(_)) => return Err(WorkerError::Busy.to_string()),
            Err(Refused::Closed(_)) => return Err(WorkerError::Stopped.to_string()),
        }
        rx.await
            .map_err(|_| "the checkpoint creator stopped before answering".to_string())?
    }

    /// Makes this node's blocks vote for `action` on `op` (schedule the upgrade, or cancel
    /// it) while the vote counts.
    pub async fn propose(&self, action: Action, op: UpgradeOp) -> Result<(), WorkerError> {
        self.ask(|reply| Command::Propose { action, op, reply })
            .await
    }

    /// The current view.
    pub fn view(&self) -> ChainView {
        *self.view.borrow()
    }

    /// A receiver that wakes on every change of the view.
    pub fn watch(&self) -> watch::Receiver<ChainView> {
        self.view.clone()
    }
}

/// Starts the worker thread over `chain`. `identity` seals our blocks when the chain has
/// authorities; `source` (an authority's followed deposit contract) picks our eth1 vote and
/// proves the deposits our blocks must carry. The thread ends (closing the chain) once every
/// handle is dropped.
pub fn spawn(
    chain: Chain,
    identity: NodeIdentity,
    source: Option<Arc<DepositSource>>,
) -> std::io::Result<(ChainHandle, std::thread::JoinHandle<()>)> {
    spawn_with_checkpoints(chain, identity, source, None)
}

/// [`spawn`], handing a finalized state to `checkpointer` whenever the finalized height
/// reaches a new checkpoint height (and on demand).
pub fn spawn_with_checkpoints(
    chain: Chain,
    identity: NodeIdentity,
    source: Option<Arc<DepositSource>>,
    checkpointer: Option<Checkpointer>,
) -> std::io::Result<(ChainHandle, std::thread::JoinHandle<()>)> {
    let (commands, rx) = inbox(QueueLimits::default());
    // The checkpoint height at start was made before (or skipped): the next periodic one is
    // the next multiple of the interval to become final.
    let interval = checkpointer.as_ref().map_or(0, |c| c.config().interval);
    let last_checkpoint = checkpoint_height_at(chain.finalized_height(), interval).unwrap_or(0);
    // After a restart the lock starts from our last vote on the stored chain (votes cast on a
    // branch this node no longer has are forgotten).
    let me = chain
        .genesis()
        .authorities
        .iter()
        .position(|a| a == identity.node_id().as_bytes())
        .and_then(|i| u32::try_from(i).ok());
    let seal_lock = SealLock::after(me.and_then(|me| chain.last_vote_of(me)));
    let mut worker = Worker {
        chain,
        identity,
        source,
        last_block_unix_ms: 0,
        reorgs: 0,
        import_stopped: None,
        fatal: None,
        checkpointer,
        last_checkpoint,
        seal_lock,
    };
    let (view_tx, view) = watch::channel(worker.view());
    let states = worker.chain.states();
    let thread = std::thread::Builder::new()
        .name("chain-worker".into())
        .spawn(crate::log_span::in_current_span(move || {
            while let Some(command) = rx.recv() {
                // Jobs piling up means import is behind: state queries are shed until it is not.
                states.set_behind(rx.len() >= BEHIND_QUEUE_LEN);
                if let Command::Blocks { reply, .. } = &command
                    && reply.is_closed()
                {
                    // The requester timed out and went away: nothing to serve.
                    continue;
                }
                worker.handle(command);
                worker.periodic_checkpoint();
                view_tx.send_if_modified(|v| {
                    let new = worker.view();
                    let changed = *v != new;
                    *v = new;
                    changed
                });
                if let Some(reason) = &worker.fatal {
                    // Disk and memory disagree: going on would build on a state that is not
                    // the one on disk. Every handle now gets `Stopped`.
                    tracing::error!(%reason, "the chain worker stops: restart the node to reload the state from disk");
                    break;
                }
            }
            tracing::debug!("chain worker stopped");
        }))?;
    Ok((ChainHandle { commands, view }, thread))
}

/// Jobs waiting in the worker's queue at which import counts as behind (state queries shed).
const BEHIND_QUEUE_LEN: usize = 4;

/// Where `command` waits: its class, and the peer it serves.
fn class_of(command: &Command) -> (JobClass, Requester) {
    match command {
        Command::Produce { .. } => (JobClass::Produce, None),
        Command::Add { .. } | Command::Propose { .. } => (JobClass::Import, None),
        Command::Blocks { requester, .. } => (JobClass::Serve, *requester),
        Command::Checkpoint { .. } => (JobClass::Serve, None),
    }
}

struct Worker {
    chain: Chain,
    identity: NodeIdentity,
    source: Option<Arc<DepositSource>>,
    last_block_unix_ms: u64,
    reorgs: u64,
    /// The last failed migration's height and module, until a block at that height imports.
    import_stopped: Option<ImportStopped>,
    /// Set when disk and memory disagree; the worker stops after the current command.
    fatal: Option<String>,
    /// Creates checkpoints in the background from the snapshots this worker takes.
    checkpointer: Option<Checkpointer>,
    /// Height of the last periodic checkpoint handed over (or the checkpoint height at start).
    last_checkpoint: u64,
    /// The votes this authority cast by sealing, so that it never casts one surrounding another
    /// (the chain's finality is safe only then; restarted from the stored chain).
    seal_lock: SealLock,
}

/// The deposit proofs of a node that follows no deposit source: none.
struct NoSource;

impl DepositProofs for NoSource {
    fn proven_deposits(
        &self,
        _from: u64,
        count: u64,
        _deposit_count: u64,
    ) -> Result<Vec<ProvenDeposit>, DepositProofsError> {
        if count == 0 {
            return Ok(Vec::new());
        }
        Err(DepositProofsError::Unavailable(
            "deposits are due but this node follows no deposit source (configure one for \
             every authority)"
                .into(),
        ))
    }
}

impl Worker {
    fn view(&self) -> ChainView {
        let validators = self.chain.registry().validator_count();
        ChainView {
            head: self.chain.head(),
            finalized_height: self.chain.finalized_height(),
            served_from: self.chain.served_from(),
            validators,
            last_block_unix_ms: self.last_block_unix_ms,
            deposit_index: self.chain.eth1_state().deposit_index,
            reorgs: self.reorgs,
            equivocations: self.chain.equivocations_found(),
            recent_evidence: self.chain.recent_evidence(),
            import_stopped: self.import_stopped,
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Add { block, reply } => {
                let _ = reply.send(self.add(&block));
            }
            Command::Produce { slot, reply } => {
                let _ = reply.send(self.produce(slot));
            }
            Command::Blocks {
                start,
                count,
                max_bytes,
                reply,
                ..
            } => {
                let _ = reply.send(self.blocks(start, count, max_bytes));
            }
            Command::Propose { action, op, reply } => {
                let proposed = match action {
                    Action::Upgrade => self.chain.propose_upgrade(op),
                    Action::Cancel => self.chain.propose_cancel(op),
                };
                let _ = reply.send(proposed.map_err(WorkerError::Proposal));
            }
            Command::Checkpoint { reply } => {
                let height = self.checkpoint_height(0);
                self.checkpoint(Some(reply), height);
            }
        }
    }

    fn add(&mut self, block: &Block) -> Result<Added, WorkerError> {
        // Every path (gossip, range sync, branch fetch) comes through here: a block from a
        // future slot would let an authority pre-produce its slots and reorg honest nodes.
        let now = unix_ms();
        let genesis = self.chain.genesis();
        if let Some(ahead_ms) = clock::early_by_ms(genesis.slot_start_ms(block.header.slot), now) {
            return Err(WorkerError::FutureSlot {
                height: block.header.height,
                slot: block.header.slot,
                current: genesis.slot_at(clock::latest_slot_start_ms(now)),
                ahead_ms,
            });
        }
        let before = self.chain.head();
        let started = std::time::Instant::now();
        let added = self.chain.add_block(block);
        super::metrics::observe_import(started.elapsed());
        let added = added.inspect_err(|e| {
            let fatal = match e {
                ForkChoiceError::Invalid(e) | ForkChoiceError::NotChecked(e) => e.is_fatal(),
                ForkChoiceError::Revert(e) => e.is_fatal(),
                _ => false,
            };
            if fatal {
                self.fatal = Some(e.to_string());
            }
            if let Some(stopped) = import_stopped_by(e) {
                self.import_stopped = Some(stopped);
            }
            // Evidence voided the slot of a head block: the head moved back, a branch switch.
            if let ForkChoiceError::Equivocation { reverted, .. } = e
                && *reverted > 0
            {
                self.reorgs = self.reorgs.saturating_add(1);
                self.last_block_unix_ms = unix_ms();
            }
        })?;
        let head = self.chain.head().height;
        if self.import_stopped.is_some_and(|s| head >= s.height) {
            self.import_stopped = None;
        }
        match &added {
            Added::Extended(_) => {
                self.last_block_unix_ms = unix_ms();
                let head = self.chain.head();
                tracing::debug!(
                    height = head.height,
                    hash = %hex::encode(head.hash.as_bytes().get(..8).unwrap_or_default()),
                    "imported"
                );
            }
            Added::Reorganised { head, reverted } => {
                // Deposits only the abandoned branch carried are due again on the new one: the
                // state's `eth1_deposit_index` says so, and our source proves them again.
                self.reorgs = self.reorgs.saturating_add(1);
                self.last_block_unix_ms = unix_ms();
                tracing::info!(
                    reverted,
                    height = head.height,
                    from_height = before.height,
                    "switched to a better branch"
                );
            }
            Added::Known | Added::Stored => {}
        }
        Ok(added)
    }

    fn blocks(
        &self,
        start: u64,
        count: u64,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, WorkerError> {
        let below = self.chain.served_from();
        if start > 0 && start < below {
            return Err(WorkerError::Pruned { start, below });
        }
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for height in start..start.saturating_add(count) {
            let Some(block) = self
                .chain
                .block_at(height)
                .map_err(|e| WorkerError::Store(e.to_string()))?
            else {
                break;
            };
            let encoded = block.encode();
            bytes = bytes.saturating_add(encoded.len().saturating_add(4));
            if bytes > max_bytes && !out.is_empty() {
                break;
            }
            out.push(encoded);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::migration::MigrationError;
    use crate::hashes::{BlockHash, ModuleHash};

    /// A failed migration stops import at its height and `/status` names the module: the
    /// worker reads both from the error's typed fields.
    #[test]
    fn a_failed_migration_is_the_import_stop_status_shows() {
        let module = ModuleHash([0xab; 32]);
        let failed = ForkChoiceError::NotChecked(ImportError::Migration {
            hash: BlockHash([1; 32]),
            height: 40,
            module,
            source: Box::new(MigrationError::NotAnExtension),
        });
        assert_eq!(
            import_stopped_by(&failed),
            Some(ImportStopped { height: 40, module })
        );
        let other = ForkChoiceError::NotChecked(ImportError::BadSeal {
            hash: BlockHash([1; 32]),
            reason: "wrong proposer".into(),
        });
        assert_eq!(import_stopped_by(&other), None);
    }
}

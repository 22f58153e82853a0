//! The chain worker: one OS thread that owns the [`Chain`] and the [`Mempool`].
//!
//! Block import runs WebAssembly and writes to sled, both blocking, so it stays off the async
//! runtime. Everything else talks to the worker through a [`ChainHandle`] (a command channel,
//! answers on oneshot channels) and watches its [`ChainView`]. Commands are handled one at a
//! time, so imports, block production and range serving never interleave; they wait in a
//! [`WorkerQueue`] that puts production before imports before serving peers and bounds each.

use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, watch};

use super::mempool::{Mempool, MempoolError};
use super::worker_queue::{JobClass, QueueLimits, Requester, WorkerQueue};
use crate::chain::block::{Block, DepositData, Hash, Seal};
use crate::chain::{Added, Chain, ForkChoiceError, Head};
use crate::checkpoint::service::CreateReply;
use crate::checkpoint::{BlockRef, CheckpointSummary, Checkpointer, RegistrySnapshot};
use crate::net::identity::NodeIdentity;
use crate::state::RegistryRead;

/// What the rest of the node sees of the chain; updated after every change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainView {
    /// The head.
    pub head: Head,
    /// Height at or below which blocks are final.
    pub finalized_height: u64,
    /// Validators in the head state.
    pub validators: u32,
    /// When the head last changed (ms since the Unix epoch; 0 = not since start).
    pub last_block_unix_ms: u64,
    /// Deposits waiting for a block.
    pub mempool: usize,
    /// Times fork choice switched to another branch since start.
    pub reorgs: u64,
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
    /// The deposit was refused.
    #[error(transparent)]
    Mempool(#[from] MempoolError),
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
    /// The worker's queue for this kind of job (or this peer's share of it) is full.
    #[error("the chain worker is busy; try again later")]
    Busy,
    /// The block's slot has not started yet on our clock (beyond the skew allowance).
    #[error("block {height} is for slot {slot}, but the current slot is {current}")]
    FutureSlot {
        /// The block's height.
        height: u64,
        /// Its slot.
        slot: u64,
        /// Our current slot (with the clock-skew allowance).
        current: u64,
    },
}

/// How far ahead of our clock a peer's clock may be: a block whose slot starts within this
/// is accepted.
pub const CLOCK_SKEW_MS: u64 = 500;

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
    Deposit {
        deposit: DepositData,
        reply: oneshot::Sender<Result<Hash, WorkerError>>,
    },
    Checkpoint {
        reply: CreateReply,
    },
}

/// Talks to the chain worker; cheap to clone. The worker stops when every handle is dropped.
#[derive(Clone)]
pub struct ChainHandle {
    commands: mpsc::Sender<Command>,
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
        self.commands
            .send(command(reply))
            .map_err(|_| WorkerError::Stopped)?;
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

    /// Builds, seals and imports our block for `slot` with pending deposits; `None` if the
    /// head is already at or past `slot`.
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

    /// Adds a deposit to the mempool; returns its id.
    pub async fn submit_deposit(&self, deposit: DepositData) -> Result<Hash, WorkerError> {
        self.ask(|reply| Command::Deposit { deposit, reply }).await
    }

    /// Creates a checkpoint of the head state now; resolves once it is stored (or refused:
    /// no checkpointer, one already running).
    pub async fn create_checkpoint(&self) -> Result<CheckpointSummary, String> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Checkpoint { reply })
            .map_err(|_| WorkerError::Stopped.to_string())?;
        rx.await
            .map_err(|_| "the checkpoint creator stopped before answering".to_string())?
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
/// authorities. The thread ends (closing the chain) once every handle is dropped.
pub fn spawn(
    chain: Chain,
    identity: NodeIdentity,
    mempool_capacity: usize,
) -> std::io::Result<(ChainHandle, std::thread::JoinHandle<()>)> {
    spawn_with_checkpoints(chain, identity, mempool_capacity, None)
}

/// [`spawn`], handing a snapshot to `checkpointer` whenever the head reaches a checkpoint
/// height (and on demand).
pub fn spawn_with_checkpoints(
    chain: Chain,
    identity: NodeIdentity,
    mempool_capacity: usize,
    checkpointer: Option<Checkpointer>,
) -> std::io::Result<(ChainHandle, std::thread::JoinHandle<()>)> {
    let (commands, rx) = mpsc::channel();
    let last_checkpoint = chain.head().height;
    let mut worker = Worker {
        chain,
        identity,
        mempool: Mempool::new(mempool_capacity),
        last_block_unix_ms: 0,
        reorgs: 0,
        fatal: None,
        checkpointer,
        last_checkpoint,
    };
    let (view_tx, view) = watch::channel(worker.view());
    let thread = std::thread::Builder::new()
        .name("chain-worker".into())
        .spawn(move || {
            let mut queue = WorkerQueue::new(QueueLimits::default());
            loop {
                // Take everything that arrived, then do the most urgent job.
                if queue.is_empty() {
                    match rx.recv() {
                        Ok(command) => admit(&mut queue, command),
                        Err(_) => break,
                    }
                }
                while let Ok(command) = rx.try_recv() {
                    admit(&mut queue, command);
                }
                let Some(command) = queue.pop() else {
                    continue;
                };
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
        })?;
    Ok((ChainHandle { commands, view }, thread))
}

/// Queues `command`, or answers it with [`WorkerError::Busy`] when its queue is full.
fn admit(queue: &mut WorkerQueue<Command>, command: Command) {
    let (class, requester) = match &command {
        Command::Produce { .. } => (JobClass::Produce, None),
        Command::Add { .. } | Command::Deposit { .. } => (JobClass::Import, None),
        Command::Blocks { requester, .. } => (JobClass::Serve, *requester),
        Command::Checkpoint { .. } => (JobClass::Serve, None),
    };
    if let Err(refused) = queue.push(class, requester, command) {
        match refused {
            Command::Add { reply, .. } => {
                let _ = reply.send(Err(WorkerError::Busy));
            }
            Command::Produce { reply, .. } => {
                let _ = reply.send(Err(WorkerError::Busy));
            }
            Command::Blocks { reply, .. } => {
                let _ = reply.send(Err(WorkerError::Busy));
            }
            Command::Deposit { reply, .. } => {
                let _ = reply.send(Err(WorkerError::Busy));
            }
            Command::Checkpoint { reply } => {
                let _ = reply.send(Err(WorkerError::Busy.to_string()));
            }
        }
    }
}

struct Worker {
    chain: Chain,
    identity: NodeIdentity,
    mempool: Mempool,
    last_block_unix_ms: u64,
    reorgs: u64,
    /// Set when disk and memory disagree; the worker stops after the current command.
    fatal: Option<String>,
    /// Creates checkpoints in the background from the snapshots this worker takes.
    checkpointer: Option<Checkpointer>,
    /// Height of the last periodic checkpoint handed over (or the head at start).
    last_checkpoint: u64,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Worker {
    fn view(&self) -> ChainView {
        let validators = self
            .chain
            .registry()
            .read()
            .map(|r| r.validator_count())
            .unwrap_or(0);
        ChainView {
            head: self.chain.head(),
            finalized_height: self.chain.finalized_height(),
            validators,
            last_block_unix_ms: self.last_block_unix_ms,
            mempool: self.mempool.len(),
            reorgs: self.reorgs,
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
            Command::Deposit { deposit, reply } => {
                let _ = reply.send(self.mempool.insert(deposit).map_err(WorkerError::from));
            }
            Command::Checkpoint { reply } => self.checkpoint(Some(reply)),
        }
    }

    /// Freezes the head state: the only part of creation on this thread (a copy of the
    /// registry; O(1) once the state is a structurally shared snapshot).
    fn snapshot(&self) -> Option<(BlockRef, RegistrySnapshot)> {
        let head = self.chain.head();
        let registry = self.chain.registry().read().ok()?.clone();
        let state = RegistrySnapshot::new(registry, self.chain.eth1_state().clone());
        let at = BlockRef {
            height: head.height,
            hash: head.hash,
        };
        Some((at, state))
    }

    /// Hands the head state to the checkpointer (answering `reply` when it is done).
    fn checkpoint(&mut self, reply: Option<CreateReply>) {
        let Some(checkpointer) = &self.checkpointer else {
            if let Some(reply) = reply {
                let _ = reply.send(Err("this node does not create checkpoints".into()));
            }
            return;
        };
        let Some((at, state)) = self.snapshot() else {
            if let Some(reply) = reply {
                let _ = reply.send(Err("the registry lock is poisoned".into()));
            }
            return;
        };
        if let Err(e) = checkpointer.offer(at, state, reply) {
            tracing::warn!(height = at.height, error = %e, "checkpoint skipped");
        }
    }

    /// Starts a checkpoint when the head has reached a new checkpoint height.
    fn periodic_checkpoint(&mut self) {
        let height = self.chain.head().height;
        let due = self.checkpointer.as_ref().is_some_and(|c| c.due_at(height));
        if due && height != self.last_checkpoint {
            self.last_checkpoint = height;
            self.checkpoint(None);
        }
    }

    fn add(&mut self, block: &Block) -> Result<Added, WorkerError> {
        // Every path (gossip, range sync, branch fetch) comes through here: a block from a
        // future slot would let an authority pre-produce its slots and reorg honest nodes.
        let current = self
            .chain
            .genesis()
            .slot_at(unix_ms().saturating_add(CLOCK_SKEW_MS));
        if block.header.slot > current {
            return Err(WorkerError::FutureSlot {
                height: block.header.height,
                slot: block.header.slot,
                current,
            });
        }
        let before = self.chain.head();
        let added = self.chain.add_block(block).inspect_err(|e| {
            let fatal = match e {
                ForkChoiceError::Invalid(e) => e.is_fatal(),
                ForkChoiceError::Revert(e) => e.is_fatal(),
                _ => false,
            };
            if fatal {
                self.fatal = Some(e.to_string());
            }
        })?;
        match &added {
            Added::Extended(_) => self.included(std::slice::from_ref(block)),
            Added::Reorganised { head, reverted } => {
                // Deposits carried anywhere on the new branch are no longer pending. (Deposits
                // only the abandoned branch carried are not put back: their submitters resend.)
                self.reorgs = self.reorgs.saturating_add(1);
                tracing::info!(
                    reverted,
                    height = head.height,
                    "switched to a better branch"
                );
                let ancestor = before.height.saturating_sub(*reverted);
                let mut branch = Vec::new();
                for height in ancestor.saturating_add(1)..=head.height {
                    if let Ok(Some(b)) = self.chain.block_at(height) {
                        branch.push(b);
                    }
                }
                self.included(&branch);
            }
            Added::Known | Added::Stored => {}
        }
        Ok(added)
    }

    fn included(&mut self, blocks: &[Block]) {
        for block in blocks {
            let included: Vec<_> = block.body.deposits.iter().map(|d| d.data).collect();
            self.mempool.remove_included(&included);
        }
        self.last_block_unix_ms = unix_ms();
    }

    fn produce(&mut self, slot: u64) -> Result<Option<Block>, WorkerError> {
        if slot <= self.chain.head().slot {
            return Ok(None);
        }
        let genesis = self.chain.genesis();
        let proposer = genesis.proposer_for(slot).unwrap_or(0);
        let sealed = !genesis.authorities.is_empty();
        // Until the node follows a deposit source, the producer votes the agreed eth1 data and
        // carries no deposits (valid while none are due). Mempool deposits cannot be included:
        // a block's deposits must be the contract's, with proofs.
        let vote = self.chain.eth1_data();
        let block = self
            .chain
            .build_block(slot, proposer, vote, Vec::new())
            .map_err(|e| WorkerError::Produce {
                slot,
                reason: e.to_string(),
            })?;
        let mut block = block;
        if sealed {
            let signature = self
                .identity
                .sign(&self.chain.seal_message(&block.hash()))
                .map_err(|e| WorkerError::Produce {
                    slot,
                    reason: e.to_string(),
                })?;
            block.seal = Seal::Ed25519(signature);
        }
        self.chain.import(&block).map_err(|e| {
            if e.is_fatal() {
                self.fatal = Some(e.to_string());
            }
            WorkerError::Produce {
                slot,
                reason: e.to_string(),
            }
        })?;
        self.included(std::slice::from_ref(&block));
        Ok(Some(block))
    }

    fn blocks(
        &self,
        start: u64,
        count: u64,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, WorkerError> {
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

//! Sans-IO intake of gossiped blocks: the verdict on a block a peer pushed, as a state machine.
//!
//! [`BlockIntake`] takes what arrives (`handle_*`, each with the time `now_ms` in Unix ms, read
//! by the driver from [`crate::clock::unix_ms`]) and says what to do ([`poll_action`]): hand a
//! block to the chain worker, tell the gossip engine whether to relay it, penalise its sender,
//! or let range sync fetch from a sender that is ahead of us. It reads no clock and touches no
//! socket, so the hostile-peer cases run in virtual time (`intake/tests.rs`); the network task
//! (`network/gossip_blocks.rs`) only carries its actions out.
//!
//! A block goes through, cheapest check first and each at most once here:
//! 1. **decode** — undecodable bytes are the sender's fault;
//! 2. **slot against `now`** ([`crate::clock::early_by_ms`], the one skew rule) — a slot that
//!    starts more than [`FAR_FUTURE_MS`](crate::clock::FAR_FUTURE_MS) from now is the
//!    sender's fault; a block only early is **held** until its slot starts (bounded:
//!    [`IntakeLimits::max_held`], [`IntakeLimits::max_held_per_peer`]; over them it is dropped
//!    unrelayed, as every early block was before, without a penalty);
//! 3. **body against header** (the body root) and **seal** (the slot's authority signed it) —
//!    either failing is the sender's fault: no honest node relays such a block; the outcome of
//!    a seal check is remembered by block hash and signature ([`MAX_SEALS_REMEMBERED`]), so a
//!    block relayed again costs no second signature check;
//! 4. **import request** to the chain worker (bounded in flight: [`IntakeLimits::max_importing`],
//!    [`IntakeLimits::max_importing_per_peer`]; over them the block is dropped unrelayed, not
//!    penalised, as a busy worker's refusal always was), whose answer — extended, reorganised,
//!    known, stored on a side branch, unknown parent, invalid, ours — becomes the relay verdict
//!    and any penalty through [`verdict::gossip_block`] and [`verdict::equivocation_penalty`].
//!
//! The chain worker checks the slot, seal and body again on import: it is also the path of
//! range sync and branch fetches, which do not come through here.
//!
//! [`poll_action`]: BlockIntake::poll_action

use std::collections::{BTreeMap, HashMap, VecDeque};

use modnode_gossip::MessageId;
use modnode_peers::NodeId;

use super::chain_worker::WorkerError;
use super::verdict;
use crate::chain::block::{Block, BlockError, BlockHash, Seal};
use crate::chain::genesis::Genesis;
use crate::chain::{Added, ImportError};
use crate::clock;
use crate::consensus::shell;

/// Early blocks held for their slot, over all peers.
pub const MAX_HELD_BLOCKS: usize = 32;
/// Early blocks held for their slot, per peer.
pub const MAX_HELD_PER_PEER: usize = 4;
/// Gossiped blocks handed to the chain worker and not answered yet, over all peers.
pub const MAX_IMPORTING: usize = 128;
/// Gossiped blocks handed to the chain worker and not answered yet, per peer.
pub const MAX_IMPORTING_PER_PEER: usize = 16;
/// Seal-check outcomes remembered (by block hash and signature).
pub const MAX_SEALS_REMEMBERED: usize = 1_024;

/// What one peer, and all of them together, can make the intake hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntakeLimits {
    /// Early blocks held for their slot, over all peers ([`MAX_HELD_BLOCKS`]).
    pub max_held: usize,
    /// Early blocks held for their slot, per peer ([`MAX_HELD_PER_PEER`]).
    pub max_held_per_peer: usize,
    /// Blocks with the chain worker, over all peers ([`MAX_IMPORTING`]).
    pub max_importing: usize,
    /// Blocks with the chain worker, per peer ([`MAX_IMPORTING_PER_PEER`]).
    pub max_importing_per_peer: usize,
}

impl Default for IntakeLimits {
    fn default() -> Self {
        Self {
            max_held: MAX_HELD_BLOCKS,
            max_held_per_peer: MAX_HELD_PER_PEER,
            max_importing: MAX_IMPORTING,
            max_importing_per_peer: MAX_IMPORTING_PER_PEER,
        }
    }
}

/// What the driver is to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntakeAction {
    /// Hand `block` to the chain worker; give its answer to [`BlockIntake::handle_added`].
    Import {
        /// The gossip message the block came in.
        id: MessageId,
        /// Who sent it.
        from: NodeId,
        /// The block, decoded and shell-checked.
        block: Box<Block>,
    },
    /// Tell the gossip engine whether to forward message `id` (once per delivered block).
    Verdict {
        /// The gossip message.
        id: MessageId,
        /// Forward it.
        relay: bool,
    },
    /// `peer` proved itself at fault: penalise it.
    Penalise {
        /// The sender at fault.
        peer: NodeId,
        /// What it did, for the log and the ban record.
        reason: String,
    },
    /// `peer` holds a real block (seal and body checked) at `height` whose parent we lack:
    /// range sync may fetch the gap from it.
    SyncFrom {
        /// The sender.
        peer: NodeId,
        /// The block's height.
        height: u64,
        /// The block's hash.
        hash: BlockHash,
    },
    /// Count an event in the node's metrics.
    Count(IntakeCount),
}

/// The metrics events of the intake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntakeCount {
    /// A gossiped block was not taken (`modnode_blocks_rejected`).
    Rejected,
    /// A gossiped block extended or reorganised our chain (`blocks_gossip_imported`).
    Imported,
    /// A peer sent a block from a slot beyond the far-future margin (`peer_future_blocks`).
    PeerFutureBlock,
}

/// Why a gossiped block fails the shell check: always its sender's fault.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// The bytes are not a block (the sender's fault).
    #[error("relayed an undecodable block: {0}")]
    Undecodable(BlockError),
    /// The block's slot starts beyond the far-future margin (the sender's fault: made up in
    /// advance).
    #[error("relayed block {height} for slot {slot}, which starts {ahead_ms} ms from now")]
    FarFuture {
        /// The block's height.
        height: u64,
        /// Its slot.
        slot: u64,
        /// How far beyond our clock the slot starts.
        ahead_ms: u64,
    },
    /// The body is not the one the header commits to, or the seal is not the slot's
    /// authority's (the sender's fault).
    #[error("relayed invalid block {height}: {source}")]
    Invalid {
        /// The block's height.
        height: u64,
        /// The failed check.
        source: ImportError,
    },
}

/// When a block that passed the shell check may be imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Its slot has started (within the skew allowance): import now.
    Due,
    /// Its slot starts within the far-future margin: import at `release_ms` (Unix ms).
    Early {
        /// From when the block is no longer early.
        release_ms: u64,
    },
}

/// The shell check of a decoded block at `now_ms`: its slot against our clock with the one
/// skew rule, its body against its header, its seal against the slot's authority. Pure.
pub fn check_shell(
    genesis: &Genesis,
    genesis_hash: &BlockHash,
    block: &Block,
    now_ms: u64,
) -> Result<Timing, ShellError> {
    let timing = check_slot(genesis, block, now_ms)?;
    check_body(genesis, block)?;
    check_seal(genesis, genesis_hash, block)?;
    Ok(timing)
}

/// The block's slot against `now_ms`: due, early (held), or beyond the far-future margin.
fn check_slot(genesis: &Genesis, block: &Block, now_ms: u64) -> Result<Timing, ShellError> {
    let header = &block.header;
    let slot_start = genesis.slot_start_ms(header.slot);
    match clock::early_by_ms(slot_start, now_ms) {
        Some(ahead_ms) if clock::is_far_future(ahead_ms) => Err(ShellError::FarFuture {
            height: header.height,
            slot: header.slot,
            ahead_ms,
        }),
        Some(_) => Ok(Timing::Early {
            release_ms: slot_start.saturating_sub(clock::CLOCK_SKEW_MS),
        }),
        None => Ok(Timing::Due),
    }
}

/// The body is the one the header commits to, within the deposit limit.
fn check_body(genesis: &Genesis, block: &Block) -> Result<(), ShellError> {
    shell::check_body(block, genesis.max_deposits_per_block, block.hash()).map_err(|source| {
        ShellError::Invalid {
            height: block.header.height,
            source,
        }
    })
}

/// The seal is the slot's authority's signature over the block.
fn check_seal(
    genesis: &Genesis,
    genesis_hash: &BlockHash,
    block: &Block,
) -> Result<(), ShellError> {
    shell::check_seal(genesis, genesis_hash, block, block.hash()).map_err(|source| {
        ShellError::Invalid {
            height: block.header.height,
            source,
        }
    })
}

/// What identifies a seal check's outcome: the block hash (which covers slot and proposer)
/// and the signature.
type SealKey = (BlockHash, Option<[u8; 64]>);

/// Outcomes of recent seal checks, so a block relayed again (by the same or another peer, with
/// any body) costs no second signature check. Bounded: [`MAX_SEALS_REMEMBERED`], oldest out.
#[derive(Default)]
struct SealMemory {
    outcomes: HashMap<SealKey, Option<String>>,
    order: VecDeque<SealKey>,
}

impl SealMemory {
    /// `Ok` if the seal verifies; the check runs only when the outcome is not remembered.
    fn check(
        &mut self,
        genesis: &Genesis,
        genesis_hash: &BlockHash,
        block: &Block,
        stats: &mut IntakeStats,
    ) -> Result<(), ShellError> {
        let key = (
            block.hash(),
            match block.seal {
                Seal::Unsigned => None,
                Seal::Ed25519(signature) => Some(signature),
            },
        );
        let refused = |reason: String| ShellError::Invalid {
            height: block.header.height,
            source: ImportError::BadSeal {
                hash: key.0,
                reason,
            },
        };
        if let Some(outcome) = self.outcomes.get(&key) {
            return outcome
                .clone()
                .map_or(Ok(()), |reason| Err(refused(reason)));
        }
        stats.seals_verified = stats.seals_verified.saturating_add(1);
        let outcome = check_seal(genesis, genesis_hash, block);
        let remembered = match &outcome {
            Ok(()) => None,
            Err(ShellError::Invalid {
                source: ImportError::BadSeal { reason, .. },
                ..
            }) => Some(reason.clone()),
            // Not a seal verdict: not remembered.
            Err(_) => return outcome,
        };
        if self.order.len() >= MAX_SEALS_REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.outcomes.remove(&old);
        }
        self.outcomes.insert(key, remembered);
        self.order.push_back(key);
        outcome
    }
}

/// A block held until its slot starts.
struct Held {
    id: MessageId,
    from: NodeId,
    block: Box<Block>,
}

/// How much work the intake did: each counts one operation, for tests that bound the cost of
/// hostile input without a wall clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntakeStats {
    /// Payloads decoded.
    pub decoded: u64,
    /// Decoded blocks shell-checked (at most one body root and one seal check each).
    pub shell_checked: u64,
    /// Signatures verified (a remembered outcome is not verified again).
    pub seals_verified: u64,
    /// Import requests handed to the driver.
    pub imports: u64,
    /// Early blocks held.
    pub held: u64,
    /// Blocks dropped over a bound (held or importing), unpenalised.
    pub dropped_over_bound: u64,
    /// Penalties issued.
    pub penalties: u64,
}

/// How much the intake holds now: each is within its [`IntakeLimits`] bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntakeSizes {
    /// Early blocks held.
    pub held: usize,
    /// Most early blocks held for one peer.
    pub held_by_one_peer: usize,
    /// Blocks with the chain worker.
    pub importing: usize,
    /// Most blocks with the chain worker for one peer.
    pub importing_for_one_peer: usize,
    /// Peers with an entry in a per-peer table.
    pub peer_entries: usize,
    /// Actions not yet polled.
    pub actions: usize,
}

/// The sans-IO intake of gossiped blocks (see the module docs).
pub struct BlockIntake {
    genesis: Genesis,
    genesis_hash: BlockHash,
    limits: IntakeLimits,
    /// Early blocks by (release time, arrival sequence).
    held: BTreeMap<(u64, u64), Held>,
    held_per_peer: HashMap<NodeId, usize>,
    /// Blocks with the chain worker: message id → sender.
    importing: HashMap<MessageId, NodeId>,
    importing_per_peer: HashMap<NodeId, usize>,
    sequence: u64,
    seals: SealMemory,
    actions: VecDeque<IntakeAction>,
    stats: IntakeStats,
}

impl BlockIntake {
    /// An intake for blocks of `genesis` (whose genesis block hashes to `genesis_hash`).
    pub fn new(genesis: Genesis, genesis_hash: BlockHash, limits: IntakeLimits) -> Self {
        Self {
            genesis,
            genesis_hash,
            limits,
            held: BTreeMap::new(),
            held_per_peer: HashMap::new(),
            importing: HashMap::new(),
            importing_per_peer: HashMap::new(),
            sequence: 0,
            seals: SealMemory::default(),
            actions: VecDeque::new(),
            stats: IntakeStats::default(),
        }
    }

    /// A block `from` pushed as gossip message `id`, at `now_ms`.
    pub fn handle_block(&mut self, id: MessageId, from: NodeId, payload: &[u8], now_ms: u64) {
        self.stats.decoded = self.stats.decoded.saturating_add(1);
        let block = match Block::decode(payload, self.genesis.max_deposits_per_block) {
            Ok(block) => Box::new(block),
            Err(e) => return self.refuse(id, from, ShellError::Undecodable(e)),
        };
        self.stats.shell_checked = self.stats.shell_checked.saturating_add(1);
        let checked = check_slot(&self.genesis, &block, now_ms).and_then(|timing| {
            check_body(&self.genesis, &block)?;
            self.seals
                .check(&self.genesis, &self.genesis_hash, &block, &mut self.stats)?;
            Ok(timing)
        });
        match checked {
            Err(e) => self.refuse(id, from, e),
            Ok(Timing::Due) => self.import(id, from, block),
            Ok(Timing::Early { release_ms }) => self.hold(id, from, block, release_ms),
        }
    }

    /// The chain worker's answer for a block of [`IntakeAction::Import`].
    pub fn handle_added(
        &mut self,
        id: MessageId,
        from: NodeId,
        block: &Block,
        result: &Result<Added, WorkerError>,
    ) {
        if self.importing.remove(&id).is_some() {
            decrement(&mut self.importing_per_peer, &from);
        }
        let height = block.header.height;
        let verdict = verdict::gossip_block(height, result);
        match result {
            Ok(Added::Extended(_) | Added::Reorganised { .. }) => self.count(IntakeCount::Imported),
            Ok(_) => {}
            Err(e) => {
                if !verdict.behind_sender {
                    self.count(IntakeCount::Rejected);
                }
                if matches!(e, WorkerError::FutureSlot { ahead_ms, .. } if clock::is_far_future(*ahead_ms))
                {
                    self.count(IntakeCount::PeerFutureBlock);
                }
            }
        }
        if verdict.behind_sender {
            self.actions.push_back(IntakeAction::SyncFrom {
                peer: from,
                height,
                hash: block.hash(),
            });
        }
        let penalty = verdict
            .penalty
            .or_else(|| verdict::equivocation_penalty(&from, &self.genesis.authorities, result));
        if let Some(reason) = penalty {
            self.penalise(from, reason);
        }
        self.actions.push_back(IntakeAction::Verdict {
            id,
            relay: verdict.relay,
        });
    }

    /// Time passed: held blocks whose slot has started at `now_ms` go to import.
    pub fn handle_time(&mut self, now_ms: u64) {
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let held = entry.remove();
            decrement(&mut self.held_per_peer, &held.from);
            self.import(held.id, held.from, held.block);
        }
    }

    /// `peer` left (closed, banned, superseded): the blocks held for it are dropped unrelayed.
    /// Its blocks with the chain worker are still answered through [`Self::handle_added`].
    pub fn handle_peer_left(&mut self, peer: &NodeId) {
        if self.held_per_peer.remove(peer).is_none() {
            return;
        }
        let gone: Vec<(u64, u64)> = self
            .held
            .iter()
            .filter(|(_, h)| h.from == *peer)
            .map(|(k, _)| *k)
            .collect();
        for key in gone {
            if let Some(held) = self.held.remove(&key) {
                self.actions.push_back(IntakeAction::Verdict {
                    id: held.id,
                    relay: false,
                });
            }
        }
    }

    /// The next thing to do, if any.
    pub fn poll_action(&mut self) -> Option<IntakeAction> {
        self.actions.pop_front()
    }

    /// When (Unix ms) [`Self::handle_time`] next has work: the earliest held block's release.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.held.keys().next().map(|(at, _)| *at)
    }

    /// The work done so far.
    pub fn stats(&self) -> IntakeStats {
        self.stats
    }

    /// What the intake holds now.
    pub fn sizes(&self) -> IntakeSizes {
        let max = |m: &HashMap<NodeId, usize>| m.values().copied().max().unwrap_or(0);
        let mut peers: Vec<&NodeId> = self
            .held_per_peer
            .keys()
            .chain(self.importing_per_peer.keys())
            .collect();
        peers.sort_unstable();
        peers.dedup();
        IntakeSizes {
            held: self.held.len(),
            held_by_one_peer: max(&self.held_per_peer),
            importing: self.importing.len(),
            importing_for_one_peer: max(&self.importing_per_peer),
            peer_entries: peers.len(),
            actions: self.actions.len(),
        }
    }

    fn refuse(&mut self, id: MessageId, from: NodeId, error: ShellError) {
        self.count(IntakeCount::Rejected);
        if matches!(error, ShellError::FarFuture { .. }) {
            // An honest relayer imported it first, which its clock allowed only once the slot
            // had started: a block this far ahead was made up in advance.
            self.count(IntakeCount::PeerFutureBlock);
        }
        self.actions
            .push_back(IntakeAction::Verdict { id, relay: false });
        self.penalise(from, error.to_string());
    }

    fn penalise(&mut self, peer: NodeId, reason: String) {
        self.stats.penalties = self.stats.penalties.saturating_add(1);
        self.actions
            .push_back(IntakeAction::Penalise { peer, reason });
    }

    /// Drops a block over a bound: unrelayed, unpenalised (it may be valid).
    fn drop_over_bound(&mut self, id: MessageId) {
        self.stats.dropped_over_bound = self.stats.dropped_over_bound.saturating_add(1);
        self.count(IntakeCount::Rejected);
        self.actions
            .push_back(IntakeAction::Verdict { id, relay: false });
    }

    fn import(&mut self, id: MessageId, from: NodeId, block: Box<Block>) {
        let mine = self.importing_per_peer.get(&from).copied().unwrap_or(0);
        if self.importing.len() >= self.limits.max_importing
            || mine >= self.limits.max_importing_per_peer
            || self.importing.contains_key(&id)
        {
            return self.drop_over_bound(id);
        }
        self.importing.insert(id, from);
        *self.importing_per_peer.entry(from).or_insert(0) = mine.saturating_add(1);
        self.stats.imports = self.stats.imports.saturating_add(1);
        self.actions
            .push_back(IntakeAction::Import { id, from, block });
    }

    fn hold(&mut self, id: MessageId, from: NodeId, block: Box<Block>, release_ms: u64) {
        let mine = self.held_per_peer.get(&from).copied().unwrap_or(0);
        if self.held.len() >= self.limits.max_held || mine >= self.limits.max_held_per_peer {
            tracing::debug!(
                height = block.header.height,
                slot = block.header.slot,
                "gossiped block is early by our clock and the early blocks are full; dropped"
            );
            return self.drop_over_bound(id);
        }
        *self.held_per_peer.entry(from).or_insert(0) = mine.saturating_add(1);
        self.sequence = self.sequence.saturating_add(1);
        self.stats.held = self.stats.held.saturating_add(1);
        self.held
            .insert((release_ms, self.sequence), Held { id, from, block });
    }

    fn count(&mut self, count: IntakeCount) {
        self.actions.push_back(IntakeAction::Count(count));
    }
}

/// Takes one from `peer`'s count, forgetting the peer at zero.
fn decrement(counts: &mut HashMap<NodeId, usize>, peer: &NodeId) {
    if let Some(n) = counts.get_mut(peer) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(peer);
        }
    }
}

#[cfg(test)]
mod tests;

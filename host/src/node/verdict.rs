//! The node's verdict on what a peer sent: relay it or not, and whether the peer is at fault.
//!
//! Pure functions of the outcome (no sockets, no clock), so the policy is tested on its own:
//! only a peer's proven fault penalises it. Our own failures (a store error, a stopped
//! worker, a poisoned lock) and transient ones (a timeout, a busy worker) drop what was sent
//! without touching the sender. A block whose slot starts more than
//! [`FAR_FUTURE_MS`](crate::clock::FAR_FUTURE_MS) beyond our clock is the sender's
//! fault: an honest node only sends blocks whose slot has started on its own clock, and no
//! honest clock is that far off, so such a block was made up in advance. One merely early
//! (beyond [`CLOCK_SKEW_MS`](crate::clock::CLOCK_SKEW_MS), within the far-future
//! margin) is dropped without a penalty: our own clock may be the one behind. The same rule on
//! every path: gossip, range answers, branch fetches.

use std::time::Duration;

use modnode_gossip::policy::MessageKind;

use super::chain_worker::WorkerError;
use crate::chain::{Added, FailureClass, ForkChoiceError, ImportError};

/// Who is at fault when something a peer sent is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Provably invalid: the peer sent (or relayed without checking) something no honest
    /// node sends. Penalised.
    Peer,
    /// Our own failure: storage, a stopped worker, a poisoned lock, the host. Not penalised.
    Ours,
    /// Nobody's fault for now: a timeout, a busy worker, a block only early by our clock, a
    /// branch we cannot follow. Dropped, not penalised.
    Transient,
}

impl ImportError {
    /// Whose fault the failed import is: the sender's when the block caused it
    /// ([`FailureClass::Block`]), ours otherwise — a host failure, a store error, a poisoned
    /// lock or a scheduled module not ready here never counts against a peer.
    pub fn fault(&self) -> Fault {
        match self.class() {
            FailureClass::Block => Fault::Peer,
            FailureClass::Ours => Fault::Ours,
        }
    }
}

impl ForkChoiceError {
    /// Whose fault the refusal is.
    pub fn fault(&self) -> Fault {
        match self {
            // Not a fault: the parent must be synced first.
            Self::UnknownParent { .. } => Fault::Transient,
            Self::BadHeight { .. } => Fault::Peer,
            // A sealed branch beyond our finality: we cannot follow it, but the sender may be
            // an honest node that was partitioned from us.
            Self::BeyondFinality { .. } => Fault::Transient,
            Self::Invalid(e) => e.fault(),
            // Our failure (the module not ready here, the host, a lock, the store): the block
            // is not judged, the sender not blamed.
            Self::NotChecked(e) => e.fault(),
            // Relaying a descendant of an invalid block is relaying an invalid branch.
            Self::InvalidAncestor { .. } => Fault::Peer,
            // The authority signed two blocks; the relayer may have seen this one first, so
            // it is not blamed (see `equivocation_penalty` for the authority itself).
            Self::Equivocation { .. } => Fault::Transient,
            // Its proposer may have built on the void block before the evidence reached it.
            Self::VoidAncestor { .. } => Fault::Transient,
            // We could not execute it (state too old, budget full, storage): nobody's proven
            // fault; the block is dropped unrelayed.
            Self::ParentState { .. } => Fault::Transient,
            Self::Revert(_) | Self::Store(_) => Fault::Ours,
        }
    }
}

impl WorkerError {
    /// Whose fault the refusal is.
    pub fn fault(&self) -> Fault {
        match self {
            Self::Block(e) => e.fault(),
            Self::FutureSlot { ahead_ms, .. } if crate::clock::is_far_future(*ahead_ms) => {
                Fault::Peer
            }
            Self::FutureSlot { .. } => Fault::Transient,
            Self::Busy => Fault::Transient,
            Self::Stopped | Self::Produce { .. } | Self::Store(_) => Fault::Ours,
            Self::Pruned { .. } => Fault::Transient,
            Self::Proposal(_) => Fault::Transient,
        }
    }
}

/// Why a request to a peer got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No answer in time (transient: the peer may be busy or the path slow).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The stream or connection failed (transient).
    #[error("stream failed: {0}")]
    Transport(String),
    /// The answer is malformed: wrong kind, undecodable, or undecodable blocks (the peer's
    /// fault).
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// The peer pruned the blocks asked for: not available there, ask someone else (not a
    /// fault).
    #[error("the peer pruned these blocks; it keeps heights {below} and up")]
    Pruned {
        /// The lowest height above genesis the peer serves.
        below: u64,
    },
}

impl RequestError {
    /// Whose fault the failed request is.
    pub fn fault(&self) -> Fault {
        match self {
            Self::Timeout(_) | Self::Transport(_) | Self::Pruned { .. } => Fault::Transient,
            Self::Malformed(_) => Fault::Peer,
        }
    }
}

/// What to do with a gossiped block, given the chain worker's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockVerdict {
    /// Forward it to other peers.
    pub relay: bool,
    /// Penalise the sender, saying why.
    pub penalty: Option<String>,
    /// The block's parent is unknown but its seal and body were checked: the sender holds a
    /// real block at that height, so range sync may fetch the gap from it.
    pub behind_sender: bool,
}

impl BlockVerdict {
    fn with_relay(self, relay: bool) -> Self {
        Self { relay, ..self }
    }
}

/// The penalty for the sender of a gossiped block refused as an equivocation: only when the
/// sender is the equivocating authority itself (`authorities` is the genesis authority set),
/// which proved it signed two blocks for one slot and sends them. A relayer is not blamed.
pub fn equivocation_penalty(
    from: &[u8; 32],
    authorities: &[[u8; 32]],
    result: &Result<Added, WorkerError>,
) -> Option<String> {
    let Err(WorkerError::Block(ForkChoiceError::Equivocation { slot, proposer, .. })) = result
    else {
        return None;
    };
    let authority = usize::try_from(*proposer)
        .ok()
        .and_then(|i| authorities.get(i))?;
    (authority == from).then(|| {
        format!("signed two blocks for slot {slot} as authority {proposer} (equivocation)")
    })
}

/// The verdict on a gossiped block at `height` after the chain worker tried to add it.
pub fn gossip_block(height: u64, result: &Result<Added, WorkerError>) -> BlockVerdict {
    let drop = |penalty: Option<String>| BlockVerdict {
        relay: false,
        penalty,
        behind_sender: false,
    };
    match result {
        // Extends or reorganises our chain, or is a valid block we already hold or keep on a
        // side branch: worth forwarding.
        Ok(_) => BlockVerdict {
            relay: true,
            penalty: None,
            behind_sender: false,
        },
        // The block that proves an equivocation is relayed once, so every peer gets both
        // signed headers and voids the slot too; any later block of the slot is not.
        Err(WorkerError::Block(ForkChoiceError::Equivocation { new_evidence, .. })) => {
            drop(None).with_relay(*new_evidence)
        }
        Err(WorkerError::Block(ForkChoiceError::UnknownParent { .. })) => BlockVerdict {
            relay: false,
            penalty: None,
            behind_sender: true,
        },
        Err(e) if e.fault() == Fault::Peer => {
            drop(Some(format!("relayed invalid block {height}: {e}")))
        }
        Err(_) => drop(None),
    }
}

/// Whether a peer may send a gossip message of `kind`: this protocol version gossips blocks
/// only, so any other kind is a violation (and would only fill the seen-cache).
pub fn gossip_kind(kind: MessageKind) -> Result<(), String> {
    match kind {
        MessageKind::Block => Ok(()),
        // Deposits come only from the deposit contract, proven in blocks: never from gossip.
        MessageKind::Deposit | MessageKind::Consensus | MessageKind::PeerExchange => Err(format!(
            "sent a {kind:?} gossip message, a kind this protocol version does not use"
        )),
    }
}

/// Where a known (bootstrap) peer stands, for [`may_produce_after_start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownPeer {
    /// Not tried yet, or the first attempt is under way.
    Untried,
    /// Connected: its head is known to range sync.
    Connected,
    /// At least one attempt failed.
    Unreachable,
}

/// Whether an authority that just started may produce: only once it has tried every known
/// peer and range sync has nothing left to fetch from those that answered — or once the
/// bounded wait is over, so an authority whose peers are all down still produces.
/// `sync_idle` means no request in flight, nothing buffered or importing, and the local head
/// at the best (verified or capped) claim.
pub fn may_produce_after_start(waited_out: bool, known: &[KnownPeer], sync_idle: bool) -> bool {
    waited_out || (!known.contains(&KnownPeer::Untried) && sync_idle)
}

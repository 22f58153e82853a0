//! [`RangeSync`]: catches the local chain up with peers that report higher heads, by
//! requesting missing blocks by height range and handing them to the importer in order.
//!
//! Linear sync only: the target is the head of the best peer (highest head, ties to the lower
//! hash); any peer whose head is at least a range's first height may serve that range. A
//! claimed head is not a fact: claims are capped by
//! [`handle_height_bound`](RangeSync::handle_height_bound) (no chain is longer than its slot
//! count), and a peer that answers a range it claims with nothing is reported as a liar and
//! never asked again until it reconnects. There
//! is no fork handling beyond this: when the importer rejects block `h`, everything from the
//! peer that served it is dropped, the peer is reported through
//! [`poll_violation`](RangeSync::poll_violation), and `h` is requested again from another
//! peer.
//!
//! Driver contract:
//! - Report peer heads from handshakes and status messages with
//!   [`handle_peer_status`](RangeSync::handle_peer_status) and disconnections with
//!   [`handle_peer_disconnected`](RangeSync::handle_peer_disconnected).
//! - Drain [`poll_request`](RangeSync::poll_request) after every input and when
//!   [`poll_timeout`](RangeSync::poll_timeout) passes (calling
//!   [`handle_time`](RangeSync::handle_time) first); answer each [`Request`] with
//!   `handle_blocks` or `handle_request_failed`. A peer whose request failed or timed out, or
//!   whose block the importer aborted, is not asked again before its back-off ends
//!   ([`SyncConfig::retry_backoff`]).
//! - Drain [`poll_ready_block`](RangeSync::poll_ready_block): it hands out one block at a
//!   time, at height head + 1, and the next only after the importer answered with
//!   `handle_imported` or `handle_import_failed`.
//! - Pass [`poll_violation`](RangeSync::poll_violation) results to
//!   [`PeerManager::handle_violation`](crate::PeerManager::handle_violation).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use crate::error::{ConfigError, SyncError};
use crate::violation::Violation;
use crate::{BlockHash, NodeId, SECONDS, Time};

mod config;
mod gaps;
mod responses;

pub use config::SyncConfig;

/// Identifies a block request; unique within one [`RangeSync`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Ask `peer` for the blocks `start_height .. start_height + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Pass it back with the answer.
    pub id: RequestId,
    /// The peer to ask.
    pub peer: NodeId,
    /// First height wanted.
    pub start_height: u64,
    /// Number of consecutive blocks wanted (at least 1).
    pub count: u64,
}

/// Sizes of [`RangeSync`]'s per-peer tables ([`RangeSync::peer_table_sizes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncTableSizes {
    /// Peers whose head is known.
    pub peers: usize,
    /// Peers that served bad data, ignored until they disconnect.
    pub rejected: usize,
    /// Peers with a back-off record.
    pub backoff: usize,
    /// (height, peer) pairs that failed.
    pub failed: usize,
    /// Peers whose last range answer was empty.
    pub unserved: usize,
}

/// A snapshot of sync progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncStatus {
    /// Height of the local head.
    pub head_height: u64,
    /// Hash of the local head.
    pub head_hash: BlockHash,
    /// The best peer's head, if any peer reported one.
    pub target: Option<(u64, BlockHash)>,
    /// Requests in flight.
    pub in_flight: usize,
    /// Blocks received and waiting for their turn at the importer.
    pub buffered: usize,
    /// Peers that reported a head.
    pub peers: usize,
}

#[derive(Debug, Clone, Copy)]
struct PeerHead {
    height: u64,
    hash: BlockHash,
    /// The peer said it pruned the heights below this (0: nothing known pruned).
    pruned_below: u64,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    peer: NodeId,
    start: u64,
    count: u64,
    deadline: Time,
}

impl InFlight {
    fn end(&self) -> u64 {
        self.start.saturating_add(self.count)
    }
}

/// A peer left alone after a failure (see [`SyncConfig::retry_backoff`]).
#[derive(Debug, Clone, Copy)]
struct Retry {
    /// Not asked before this time; `None` once it has passed (the delay is kept for the next
    /// failure).
    until: Option<Time>,
    /// The back-off the next failure imposes.
    next_delay: Time,
}

#[derive(Debug, Clone)]
struct Buffered {
    bytes: Vec<u8>,
    peer: NodeId,
}

/// Linear range sync towards the best peer's head. See the [module docs](self).
#[derive(Debug)]
pub struct RangeSync {
    config: SyncConfig,
    head_height: u64,
    head_hash: BlockHash,
    /// Heads reported by connected peers: bounded by the connected set (the driver reports
    /// every departure with `handle_peer_disconnected`).
    peers: BTreeMap<NodeId, PeerHead>,
    /// Peers that served bad data; ignored until they disconnect (then forgotten), so bounded
    /// by the connected set too.
    rejected: BTreeSet<NodeId>,
    /// Peers whose last range answer was empty: once may be an honest head that went back, a
    /// second time in a row is a lie. Removed when the peer serves blocks or disconnects, so
    /// bounded by the connected set.
    unserved: BTreeSet<NodeId>,
    in_flight: BTreeMap<RequestId, InFlight>,
    buffer: BTreeMap<u64, Buffered>,
    /// (first height of a failed request, peer): try someone else for that height first.
    /// Bounded by the requests in flight and the blocks handed out: each failure adds one.
    failed: BTreeSet<(u64, NodeId)>,
    /// Peers left alone after a failure, and for how long. Only peers in `peers` have an entry
    /// (removed with them), so it is bounded by the peers that reported a head.
    backoff: BTreeMap<NodeId, Retry>,
    /// The block handed to the importer and not yet answered for.
    awaiting_import: Option<(u64, NodeId)>,
    violations: VecDeque<(NodeId, Violation)>,
    next_id: u64,
    /// Highest head that can exist now; claims above it are capped.
    max_height: u64,
}

impl RangeSync {
    /// Sync starting from the local head `(head_height, head_hash)`.
    pub fn new(
        config: SyncConfig,
        head_height: u64,
        head_hash: BlockHash,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            head_height,
            head_hash,
            peers: BTreeMap::new(),
            rejected: BTreeSet::new(),
            unserved: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            buffer: BTreeMap::new(),
            failed: BTreeSet::new(),
            backoff: BTreeMap::new(),
            awaiting_import: None,
            violations: VecDeque::new(),
            next_id: 0,
            max_height: u64::MAX,
        })
    }

    // ----- inputs -------------------------------------------------------------------------

    /// `peer` reports its head (handshake or status message). Ignored for a peer that served
    /// bad data until it disconnects.
    pub fn handle_peer_status(
        &mut self,
        peer: NodeId,
        head_height: u64,
        head_hash: BlockHash,
        now: Time,
    ) {
        self.expire(now);
        if self.rejected.contains(&peer) {
            return;
        }
        // What a peer pruned stays pruned: its floor survives its status reports.
        let pruned_below = self.peers.get(&peer).map_or(0, |p| p.pruned_below);
        self.peers.insert(
            peer,
            PeerHead {
                height: head_height,
                hash: head_hash,
                pruned_below,
            },
        );
    }

    /// The highest head height that can exist now — heights grow by at most one per slot, so
    /// the current slot plus the clock-skew allowance. Claims above it are capped to it, so a
    /// peer's claim of a huge head costs at most one range request (and, unserved, a ban).
    pub fn handle_height_bound(&mut self, max_height: u64) {
        self.max_height = max_height;
    }

    /// `peer` disconnected: its requests are retried elsewhere; blocks it already served stay.
    pub fn handle_peer_disconnected(&mut self, peer: NodeId) {
        self.peers.remove(&peer);
        self.rejected.remove(&peer);
        self.unserved.remove(&peer);
        self.backoff.remove(&peer);
        self.in_flight.retain(|_, r| r.peer != peer);
        self.failed.retain(|(_, p)| *p != peer);
    }

    /// `peer` answered request `id` with `(height, hash, bytes)` triples. The answer must be a
    /// prefix of the requested range in order (the rest is requested again). An empty answer
    /// forgets the peer's claim; a second one in a row is a [`Violation::UnservedClaim`] (the
    /// peer is only asked for heights it claims), any other malformed answer a
    /// [`Violation::InvalidBlocks`].
    ///
    /// Errors only for responses that match no request in flight (late after a timeout, or
    /// from the wrong peer); drop them.
    pub fn handle_blocks(
        &mut self,
        peer: NodeId,
        id: RequestId,
        blocks: Vec<(u64, BlockHash, Vec<u8>)>,
    ) -> Result<(), SyncError> {
        let request = self.take_request(peer, id)?;
        if self.head_moved(&request, &blocks) {
            // An honest head moves to a sibling at the same height when fork choice breaks a
            // tie (to the lower hash) after the status: the claim is stale, not a lie. Forget
            // it until the peer's next status; the range is asked again. A peer that keeps
            // doing this costs one range request per status it sends, and no ban.
            self.peers.remove(&peer);
            return Ok(());
        }
        if let Err(reason) = self.check_response(&request, &blocks) {
            self.reject(
                peer,
                Violation::InvalidBlocks {
                    request: id,
                    reason,
                },
            );
            return Ok(());
        }
        if blocks.is_empty() {
            // The peer was asked only for heights it claims. An honest head goes back only when
            // a slot is found void (its authority equivocated): the first empty answer forgets
            // the claim until the peer's next status, like a head moved to a sibling. A second
            // one in a row, with nothing served between, means the claims are lies: dropped,
            // reported, not asked again. A liar costs two range requests, then a ban.
            if self.unserved.insert(peer) {
                self.peers.remove(&peer);
                return Ok(());
            }
            self.reject(
                peer,
                Violation::UnservedClaim {
                    request: id,
                    start: request.start,
                },
            );
            return Ok(());
        }
        self.unserved.remove(&peer);
        let awaiting = self.awaiting_import.map(|(height, _)| height);
        for (height, _, bytes) in blocks {
            if height > self.head_height && Some(height) != awaiting {
                self.buffer
                    .entry(height)
                    .or_insert(Buffered { bytes, peer });
            }
        }
        Ok(())
    }

    /// `peer` answered request `id` with "pruned": it serves heights `below` and up only. Not a
    /// fault and no back-off: the range is asked of another peer at once, and `peer` is not
    /// asked for heights below `below` again (it still serves those above). An answer that
    /// does not cover the requested start (`below` at or below it) is a
    /// [`Violation::InvalidBlocks`]: the peer claims the start and refuses it.
    ///
    /// Errors only for answers that match no request in flight; drop them.
    pub fn handle_pruned(
        &mut self,
        peer: NodeId,
        id: RequestId,
        below: u64,
    ) -> Result<(), SyncError> {
        let request = self.take_request(peer, id)?;
        if below <= request.start {
            self.reject(
                peer,
                Violation::InvalidBlocks {
                    request: id,
                    reason: "a pruned answer that does not cover the requested start",
                },
            );
            return Ok(());
        }
        if let Some(head) = self.peers.get_mut(&peer) {
            head.pruned_below = head.pruned_below.max(below);
        }
        Ok(())
    }

    /// Request `id` to `peer` failed at `now` (stream reset, peer refused): retry it on another
    /// peer; `peer` is not asked again before its back-off ends.
    pub fn handle_request_failed(
        &mut self,
        peer: NodeId,
        id: RequestId,
        now: Time,
    ) -> Result<(), SyncError> {
        let request = self.take_request(peer, id)?;
        self.failed.insert((request.start, peer));
        self.back_off(peer, now);
        Ok(())
    }

    /// The local head is now `(height, hash)`: the importer accepted the block handed out
    /// last, or a block arrived by other means (gossip). Lower heights are ignored (no
    /// reorgs).
    pub fn handle_imported(&mut self, height: u64, hash: BlockHash) {
        if height <= self.head_height {
            return;
        }
        self.head_height = height;
        self.head_hash = hash;
        if let Some((h, peer)) = self.awaiting_import
            && h <= height
        {
            self.awaiting_import = None;
            // It served a block that imported: whatever failed before is forgiven.
            self.backoff.remove(&peer);
        }
        self.buffer = self.buffer.split_off(&height.saturating_add(1));
        self.failed.retain(|(h, _)| *h > height);
    }

    /// The importer rejected block `height` served by `peer`: drop everything from `peer`,
    /// report it, and request `height` again from someone else.
    pub fn handle_import_failed(&mut self, height: u64, peer: NodeId) {
        if self.awaiting_import.is_some_and(|(h, _)| h == height) {
            self.awaiting_import = None;
        }
        self.reject(peer, Violation::BadBlock { height });
    }

    /// The importer could not take block `height` from `peer` at `now` for a reason that is
    /// not proven the peer's fault (our store failed, the worker stopped, a branch we cannot
    /// follow): the block is dropped and `height` is requested again, from another peer first;
    /// `peer` is not asked again before its back-off ends, so a block that keeps failing costs
    /// one import per back-off, not a loop. Nothing is reported.
    pub fn handle_import_aborted(&mut self, height: u64, peer: NodeId, now: Time) {
        if self.awaiting_import.is_some_and(|(h, _)| h == height) {
            self.awaiting_import = None;
        }
        self.failed.insert((height, peer));
        self.back_off(peer, now);
    }

    /// Time has reached `now`: requests past their deadline are retried elsewhere (their peer
    /// backed off from) and back-offs that are over end. Call it before
    /// [`poll_timeout`](Self::poll_timeout) so that it never names a time already past.
    pub fn handle_time(&mut self, now: Time) {
        self.expire(now);
    }

    // ----- outputs ------------------------------------------------------------------------

    /// The next block request to send, if a range below the lookahead is missing, fewer
    /// than [`SyncConfig::max_in_flight`] requests are in flight and some peer claims that
    /// range. Requests that passed their deadline are retried on another peer first.
    pub fn poll_request(&mut self, now: Time) -> Option<Request> {
        self.expire(now);
        if self.in_flight.len() >= self.config.max_in_flight {
            return None;
        }
        let (target, _) = self.target()?;
        let limit = target.min(self.head_height.saturating_add(self.config.lookahead));
        let start = self.first_gap(limit)?;
        let peer = self.choose_peer(start, now)?;
        let peer_head = self.claimed(self.peers.get(&peer)?);
        let end = self.gap_end(start, limit).min(peer_head.saturating_add(1));
        let count = end.checked_sub(start).filter(|c| *c > 0)?;
        let id = RequestId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        self.in_flight.insert(
            id,
            InFlight {
                peer,
                start,
                count,
                deadline: now.saturating_add(self.config.request_timeout),
            },
        );
        Some(Request {
            id,
            peer,
            start_height: start,
            count,
        })
    }

    /// The next block for the importer: always at height head + 1, one at a time (the next
    /// comes after `handle_imported` or `handle_import_failed`). Returns
    /// `(height, bytes, peer that served it)`.
    pub fn poll_ready_block(&mut self) -> Option<(u64, Vec<u8>, NodeId)> {
        if self.awaiting_import.is_some() {
            return None;
        }
        let next = self.head_height.checked_add(1)?;
        let block = self.buffer.remove(&next)?;
        self.awaiting_import = Some((next, block.peer));
        Some((next, block.bytes, block.peer))
    }

    /// A peer that served bad data, and what it did; pass to the peer manager.
    pub fn poll_violation(&mut self) -> Option<(NodeId, Violation)> {
        self.violations.pop_front()
    }

    /// The earliest request deadline or back-off end; call `poll_request` then.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.in_flight
            .values()
            .map(|r| r.deadline)
            .chain(self.backoff.values().filter_map(|r| r.until))
            .min()
    }

    // ----- queries ------------------------------------------------------------------------

    /// The best peer's head: highest height, ties to the lower hash.
    pub fn target(&self) -> Option<(u64, BlockHash)> {
        self.peers
            .values()
            .map(|p| (self.claimed(p), p.hash))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)))
    }

    /// The next height needed when every peer that claims it has pruned it (this node cannot
    /// sync from the peers it has: restore a checkpoint, or connect a peer keeping more
    /// history); `None` when some peer may serve it or nothing is needed.
    pub fn pruned_everywhere(&self) -> Option<u64> {
        let next = self.head_height.checked_add(1)?;
        let mut claiming = self
            .peers
            .values()
            .filter(|p| self.claimed(p) >= next)
            .peekable();
        claiming.peek()?;
        claiming.all(|p| p.pruned_below > next).then_some(next)
    }

    /// Whether the local head has reached the best known peer head (or no peer is known).
    pub fn is_synced(&self) -> bool {
        self.target()
            .is_none_or(|(height, _)| height <= self.head_height)
    }

    /// A snapshot of progress.
    pub fn status(&self) -> SyncStatus {
        SyncStatus {
            head_height: self.head_height,
            head_hash: self.head_hash,
            target: self.target(),
            in_flight: self.in_flight.len(),
            buffered: self.buffer.len(),
            peers: self.peers.len(),
        }
    }

    /// Whether `peer` is left alone at `now` after a failure.
    pub fn is_backed_off(&self, peer: &NodeId, now: Time) -> bool {
        self.backoff
            .get(peer)
            .and_then(|r| r.until)
            .is_some_and(|until| until > now)
    }

    /// How many entries the per-peer tables hold (peers with a head, peers rejected until they
    /// disconnect, peers backed off, failed (height, peer) pairs): each is bounded by the
    /// connected peers (the first three) or the requests in flight (the last).
    pub fn peer_table_sizes(&self) -> SyncTableSizes {
        SyncTableSizes {
            peers: self.peers.len(),
            rejected: self.rejected.len(),
            backoff: self.backoff.len(),
            failed: self.failed.len(),
            unserved: self.unserved.len(),
        }
    }

    /// Requests in flight to `peer`.
    pub fn in_flight_to(&self, peer: &NodeId) -> usize {
        self.in_flight.values().filter(|r| r.peer == *peer).count()
    }

    // ----- internals ----------------------------------------------------------------------

    /// A peer's claimed head height, capped by the height bound.
    fn claimed(&self, head: &PeerHead) -> u64 {
        head.height.min(self.max_height)
    }

    fn reject(&mut self, peer: NodeId, violation: Violation) {
        self.violations.push_back((peer, violation));
        self.rejected.insert(peer);
        self.unserved.remove(&peer);
        self.peers.remove(&peer);
        self.backoff.remove(&peer);
        self.in_flight.retain(|_, r| r.peer != peer);
        self.buffer.retain(|_, b| b.peer != peer);
        self.failed.retain(|(_, p)| *p != peer);
    }

    fn expire(&mut self, now: Time) {
        let expired: Vec<RequestId> = self
            .in_flight
            .iter()
            .filter(|(_, r)| r.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some(request) = self.in_flight.remove(&id) {
                self.failed.insert((request.start, request.peer));
                self.back_off(request.peer, now);
            }
        }
        for retry in self.backoff.values_mut() {
            if retry.until.is_some_and(|until| until <= now) {
                retry.until = None;
            }
        }
    }

    /// `peer` failed at `now`: left alone for its next back-off, which then doubles.
    fn back_off(&mut self, peer: NodeId, now: Time) {
        if !self.peers.contains_key(&peer) {
            return;
        }
        let first = self.config.retry_backoff;
        let max = self.config.retry_backoff_max;
        let retry = self.backoff.entry(peer).or_insert(Retry {
            until: None,
            next_delay: first,
        });
        retry.until = Some(now.saturating_add(retry.next_delay));
        retry.next_delay = retry.next_delay.saturating_mul(2).min(max);
    }
}

//! Choosing a checkpoint and scheduling its chunk fetches across peers, sans-IO: the driver
//! asks [`Fetcher::poll_request`] what to request from whom, reports each answer (verified, or
//! refused with its [`Fault`]) and each tick's time, and gets back which peers to penalise.
//!
//! - Chunks go to the peer expected to answer soonest (its latency estimate times its queue), so
//!   a slow peer keeps a small share and fast peers take the rest.
//! - Each peer's timeout adapts: four times its smoothed latency, within bounds; a timeout
//!   doubles it and puts the chunk back for another peer.
//! - A chunk whose bytes are not the listed ones is the serving peer's fault: the peer is
//!   dropped and reported, the chunk fetched elsewhere. Verified chunks are never requested again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::manifest::Manifest;
use super::restore::Fault;
use crate::state::merkle::Hash32;

/// The offers a restorer may take: those whose block is final on the peer offering it, i.e.
/// at or below that peer's head height (`head_of`; a peer without one offers nothing) minus
/// `finality_depth`. A restored node holds no undo record for its base block, so it must never
/// start from a block a reorganisation could still revert; an honest peer offers only
/// finalized checkpoints, and this keeps a restorer from taking one from a peer that does not
/// (an older version made them at its head). The head is the peer's claim: restoring still
/// needs the agreement of several peers ([`choose`]) and block `H` sealed by its authority.
pub fn final_offers<P>(
    offers: Vec<(P, Manifest)>,
    head_of: impl Fn(&P) -> Option<u64>,
    finality_depth: u64,
) -> Vec<(P, Manifest)> {
    offers
        .into_iter()
        .filter(|(peer, manifest)| {
            head_of(peer)
                .and_then(|head| head.checked_sub(finality_depth))
                .is_some_and(|finalized| manifest.height <= finalized)
        })
        .collect()
}

/// The checkpoint to restore: the newest offered by at least `min_peers` peers (ties: more
/// peers, then the lower id). Offers are grouped by manifest id, so peers serving another
/// version or parameters of the same height count separately.
pub fn choose<P: Ord + Clone>(
    offers: &[(P, Manifest)],
    min_peers: usize,
) -> Option<(Manifest, Vec<P>)> {
    let mut by_id: BTreeMap<Hash32, (Manifest, BTreeSet<P>)> = BTreeMap::new();
    for (peer, manifest) in offers {
        by_id
            .entry(manifest.id())
            .or_insert_with(|| (manifest.clone(), BTreeSet::new()))
            .1
            .insert(peer.clone());
    }
    by_id
        .into_iter()
        .filter(|(_, (_, peers))| peers.len() >= min_peers.max(1))
        .max_by(|(a_id, (a, a_peers)), (b_id, (b, b_peers))| {
            a.height
                .cmp(&b.height)
                .then(a_peers.len().cmp(&b_peers.len()))
                .then(b_id.cmp(a_id))
        })
        .map(|(_, (manifest, peers))| (manifest, peers.into_iter().collect()))
}

/// Tunables of a [`Fetcher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchConfig {
    /// Requests in flight to one peer at most.
    pub max_in_flight_per_peer: usize,
    /// Timeout of a peer without a latency sample yet.
    pub initial_timeout: Duration,
    /// Lower bound of an adapted timeout.
    pub min_timeout: Duration,
    /// Upper bound of an adapted timeout.
    pub max_timeout: Duration,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            max_in_flight_per_peer: 4,
            initial_timeout: Duration::from_secs(10),
            min_timeout: Duration::from_millis(500),
            max_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone)]
struct PeerState {
    /// Smoothed answer latency; `None` before the first answer.
    latency: Option<Duration>,
    timeout: Duration,
    in_flight: usize,
    timeouts: u32,
}

/// What the driver should do about a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Penalty<P> {
    /// The peer.
    pub peer: P,
    /// Why (for logs and the peer manager).
    pub reason: String,
}

/// Why the fetch cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Every peer offering the checkpoint was dropped.
    #[error("no peer left to fetch {missing} chunks from")]
    NoPeers {
        /// Chunks not yet verified.
        missing: usize,
    },
    /// The checkpoint itself is bad (a listed chunk does not verify): choose another.
    #[error("the checkpoint is bad: chunk {index} as listed does not verify")]
    BadCheckpoint {
        /// The chunk.
        index: usize,
    },
}

/// Schedules the fetches of one checkpoint's missing chunks.
#[derive(Debug, Clone)]
pub struct Fetcher<P: Ord + Clone> {
    config: FetchConfig,
    peers: BTreeMap<P, PeerState>,
    /// Chunks neither verified nor in flight.
    pending: BTreeSet<usize>,
    /// Chunk → (peer, deadline, sent at).
    in_flight: BTreeMap<usize, (P, Instant, Instant)>,
    penalised: Vec<Penalty<P>>,
}

impl<P: Ord + Clone> Fetcher<P> {
    /// Fetches `missing` (the chunks a resumed [`Restorer`](super::Restorer) still lacks) from
    /// `peers`.
    pub fn new(
        missing: impl IntoIterator<Item = usize>,
        peers: impl IntoIterator<Item = P>,
        config: FetchConfig,
    ) -> Self {
        let peers = peers
            .into_iter()
            .map(|p| {
                (
                    p,
                    PeerState {
                        latency: None,
                        timeout: config.initial_timeout,
                        in_flight: 0,
                        timeouts: 0,
                    },
                )
            })
            .collect();
        Self {
            config,
            peers,
            pending: missing.into_iter().collect(),
            in_flight: BTreeMap::new(),
            penalised: Vec::new(),
        }
    }

    /// Whether every chunk is verified.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty() && self.in_flight.is_empty()
    }

    /// The peers still in use.
    pub fn peers(&self) -> impl Iterator<Item = &P> {
        self.peers.keys()
    }

    /// The next request to send, if a peer has room and a chunk is waiting.
    pub fn poll_request(&mut self, now: Instant) -> Result<Option<(P, usize)>, FetchError> {
        if self.peers.is_empty() && !self.is_done() {
            return Err(FetchError::NoPeers {
                missing: self.pending.len().saturating_add(self.in_flight.len()),
            });
        }
        let Some(&index) = self.pending.first() else {
            return Ok(None);
        };
        let max = self.config.max_in_flight_per_peer.max(1);
        // Expected time to answer one more request: latency × (queue + 1); unknown latency
        // counts as the initial timeout's tenth, so new peers are tried early.
        // (`checked_div` only fails for a zero divisor.)
        let guess = self
            .config
            .initial_timeout
            .checked_div(10)
            .unwrap_or_default();
        let best = self
            .peers
            .iter_mut()
            .filter(|(_, s)| s.in_flight < max.checked_shr(s.timeouts).unwrap_or(0).max(1))
            .min_by_key(|(_, s)| {
                s.latency.unwrap_or(guess).saturating_mul(
                    u32::try_from(s.in_flight)
                        .unwrap_or(u32::MAX)
                        .saturating_add(1),
                )
            });
        let Some((peer, state)) = best else {
            return Ok(None);
        };
        state.in_flight = state.in_flight.saturating_add(1);
        let deadline = now.checked_add(state.timeout).unwrap_or(now);
        let peer = peer.clone();
        self.pending.remove(&index);
        self.in_flight.insert(index, (peer.clone(), deadline, now));
        Ok(Some((peer, index)))
    }

    /// Takes chunk `index` out of flight; returns who held it and when it was sent.
    fn take_in_flight(&mut self, index: usize) -> Option<(P, Instant)> {
        let (holder, _, sent) = self.in_flight.remove(&index)?;
        if let Some(state) = self.peers.get_mut(&holder) {
            state.in_flight = state.in_flight.saturating_sub(1);
        }
        Some((holder, sent))
    }

    /// `peer` delivered chunk `index` and it verified (possibly after the request timed out
    /// and went to another peer: that request is no longer needed).
    pub fn handle_verified(&mut self, peer: &P, index: usize, now: Instant) {
        self.pending.remove(&index);
        let Some((holder, sent)) = self.take_in_flight(index) else {
            return;
        };
        if &holder != peer {
            return;
        }
        if let Some(state) = self.peers.get_mut(peer) {
            let sample = now.saturating_duration_since(sent);
            let latency = match state.latency {
                None => sample,
                // A moving average: 3/4 old, 1/4 new (`checked_div` only fails for zero).
                Some(old) => old
                    .saturating_mul(3)
                    .saturating_add(sample)
                    .checked_div(4)
                    .unwrap_or_default(),
            };
            state.latency = Some(latency);
            state.timeouts = 0;
            state.timeout = latency
                .saturating_mul(4)
                .clamp(self.config.min_timeout, self.config.max_timeout);
        }
    }

    /// `peer`'s answer for chunk `index` was refused with `fault`.
    pub fn handle_refused(
        &mut self,
        peer: &P,
        index: usize,
        fault: Fault,
        reason: String,
    ) -> Result<(), FetchError> {
        if self
            .in_flight
            .get(&index)
            .is_some_and(|(holder, _, _)| holder == peer)
        {
            self.take_in_flight(index);
            self.pending.insert(index);
        }
        match fault {
            Fault::ChunkPeer => {
                self.drop_peer(peer, reason);
                Ok(())
            }
            Fault::Manifest => Err(FetchError::BadCheckpoint { index }),
            Fault::Ours => Ok(()),
        }
    }

    /// `peer` could not answer (connection lost, not serving the checkpoint any more).
    pub fn handle_unavailable(&mut self, peer: &P) {
        let lost: Vec<usize> = self
            .in_flight
            .iter()
            .filter(|(_, (p, _, _))| p == peer)
            .map(|(i, _)| *i)
            .collect();
        for index in lost {
            self.in_flight.remove(&index);
            self.pending.insert(index);
        }
        self.peers.remove(peer);
    }

    fn drop_peer(&mut self, peer: &P, reason: String) {
        self.handle_unavailable(peer);
        self.penalised.push(Penalty {
            peer: peer.clone(),
            reason,
        });
    }

    /// Requests past their deadline go back to the queue; their peers' timeouts double and
    /// their share shrinks. Returns the expired `(peer, chunk)` pairs.
    pub fn handle_timeouts(&mut self, now: Instant) -> Vec<(P, usize)> {
        let expired: Vec<(usize, P)> = self
            .in_flight
            .iter()
            .filter(|(_, (_, deadline, _))| *deadline <= now)
            .map(|(i, (p, _, _))| (*i, p.clone()))
            .collect();
        for (index, peer) in &expired {
            self.in_flight.remove(index);
            self.pending.insert(*index);
            if let Some(state) = self.peers.get_mut(peer) {
                state.in_flight = state.in_flight.saturating_sub(1);
                state.timeouts = state.timeouts.saturating_add(1);
                state.timeout = state.timeout.saturating_mul(2).min(self.config.max_timeout);
            }
        }
        expired.into_iter().map(|(i, p)| (p, i)).collect()
    }

    /// The earliest deadline in flight (when to call [`handle_timeouts`](Self::handle_timeouts)).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.in_flight.values().map(|(_, d, _)| *d).min()
    }

    /// Peers dropped for serving bad chunks, in order, each once.
    pub fn penalised(&self) -> &[Penalty<P>] {
        &self.penalised
    }
}

//! Choosing a checkpoint and scheduling its chunk fetches across peers, sans-IO: the driver
//! asks [`Fetcher::poll_request`] what to request from whom, reports each answer (verified, or
//! refused with its [`Fault`]) and each tick's time, and gets back which peers to penalise.
//!
//! - Chunks go to the peer expected to answer soonest (its latency estimate times its queue), so
//!   a slow peer keeps a small share and fast peers take the rest.
//! - Each peer's timeout adapts: four times its smoothed latency, within bounds; a timeout
//!   doubles it and puts the chunk back for another peer.
//! - The fetcher owns the one deadline of every request: [`ChunkRequest::deadline`] is when the
//!   driver must give up waiting for the answer (and report it with
//!   [`Fetcher::handle_expired`]); the driver sets no timeout of its own, so the fetcher's view
//!   of what is in flight is always the driver's.
//! - Once no chunk is waiting, a peer with room takes over a chunk another peer has held for
//!   longer than this peer's own timeout (its expected answer time, with margin): a slow peer
//!   loses its share to idle fast ones instead of holding the end of the restore up until its
//!   deadline. The late answer of the slow peer is still taken if it comes first.
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
    /// Chunks requested or received but not yet verified and stored, at most: while the
    /// restore's verification or writing lags, no further request is made, so a slow disk
    /// backs up the fetching instead of chunks piling up in memory. [`FetchConfig::for_manifest`]
    /// sizes it from a byte budget.
    pub max_unverified: usize,
}

/// Bytes of chunks a restore holds unverified or unwritten at most, counting every chunk at
/// the size of the manifest's largest: what [`FetchConfig::for_manifest`] sizes
/// `max_unverified` from.
pub const UNVERIFIED_BYTES: u64 = 64 << 20;
/// Fewest chunks a restore keeps in flight, however large they are (enough to keep every
/// verifier busy and a request per peer going).
pub const MIN_UNVERIFIED: usize = 4;
/// Most chunks a restore keeps in flight, however small they are (bounds the per-chunk
/// bookkeeping and the verified chunks waiting for the disk).
pub const MAX_UNVERIFIED: usize = 2048;

impl FetchConfig {
    /// The defaults, with `max_unverified` sized for `manifest`: as many chunks as
    /// [`UNVERIFIED_BYTES`] holds of its largest one, within [`MIN_UNVERIFIED`] and
    /// [`MAX_UNVERIFIED`]. A count fixed in chunks was either a memory hazard (64 chunks of a
    /// hostile manifest's 64 MiB each) or a throttle: 64 of checkpoint-v3's ~18 KB chunks kept
    /// ~1 MB in flight, so the disk's flushes and every hand-over between stages were paid
    /// per handful of chunks.
    pub fn for_manifest(manifest: &Manifest) -> Self {
        let largest = manifest
            .chunks
            .iter()
            .map(|c| u64::from(c.size))
            .max()
            .unwrap_or(0);
        let fits = UNVERIFIED_BYTES
            .checked_div(largest)
            .map_or(MAX_UNVERIFIED, |n| {
                usize::try_from(n).unwrap_or(MAX_UNVERIFIED)
            });
        Self {
            max_unverified: fits.clamp(MIN_UNVERIFIED, MAX_UNVERIFIED),
            ..Self::default()
        }
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            max_in_flight_per_peer: 4,
            initial_timeout: Duration::from_secs(10),
            min_timeout: Duration::from_millis(500),
            max_timeout: Duration::from_secs(60),
            max_unverified: 64,
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

/// A chunk request to send, with the deadline the fetcher gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRequest<P> {
    /// Whom to ask.
    pub peer: P,
    /// The chunk.
    pub index: usize,
    /// When to stop waiting for the answer: the driver bounds the request by this instant and
    /// no other, and reports an answer not received by then with
    /// [`Fetcher::handle_expired`].
    pub deadline: Instant,
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
    /// Chunks received and being verified and stored → the peer that delivered them.
    verifying: BTreeMap<usize, P>,
    penalised: Vec<Penalty<P>>,
    /// What happened to requests so far: [`Fetcher::stats`].
    stats: FetchStats,
}

/// How the fetcher's requests ended other than by an answer: what an operator (or a test)
/// reads to tell a restore that waited out a slow peer from one that took its chunks over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Requests that reached their deadline unanswered; each chunk went back to the queue.
    pub timed_out: u64,
    /// Chunks an idle faster peer took over from a slower one before the slower one's
    /// deadline.
    pub taken_over: u64,
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
            verifying: BTreeMap::new(),
            penalised: Vec::new(),
            stats: FetchStats::default(),
        }
    }

    /// Whether every chunk is verified.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty() && self.in_flight.is_empty() && self.verifying.is_empty()
    }

    /// The peers still in use.
    pub fn peers(&self) -> impl Iterator<Item = &P> {
        self.peers.keys()
    }

    /// The next request to send, if a peer has room and a chunk is waiting (or, with none
    /// waiting, a chunk a slower peer has held past this peer's timeout: see the module docs).
    pub fn poll_request(&mut self, now: Instant) -> Result<Option<ChunkRequest<P>>, FetchError> {
        if self.peers.is_empty() && !self.is_done() {
            return Err(FetchError::NoPeers {
                missing: self.pending.len().saturating_add(self.in_flight.len()),
            });
        }
        if self.in_flight.len().saturating_add(self.verifying.len()) >= self.config.max_unverified {
            return Ok(None);
        }
        let (index, peer) = match self.pending.first() {
            Some(&index) => {
                let Some((peer, _)) = self.best_peer() else {
                    return Ok(None);
                };
                (index, peer.clone())
            }
            None => match self.stealable() {
                Some((index, thief, at)) if at <= now => {
                    self.steal(index);
                    (index, thief)
                }
                _ => return Ok(None),
            },
        };
        let Some(state) = self.peers.get_mut(&peer) else {
            return Ok(None);
        };
        state.in_flight = state.in_flight.saturating_add(1);
        let deadline = now.checked_add(state.timeout).unwrap_or(now);
        self.pending.remove(&index);
        self.in_flight.insert(index, (peer.clone(), deadline, now));
        Ok(Some(ChunkRequest {
            peer,
            index,
            deadline,
        }))
    }

    /// The peer with room expected to answer one more request soonest: latency × (queue + 1),
    /// doubled for each timeout since its last answer (so a chunk that timed out goes to
    /// another peer when one is as good); unknown latency counts as the initial timeout's
    /// tenth, so new peers are tried early.
    fn best_peer(&self) -> Option<(&P, &PeerState)> {
        let max = self.config.max_in_flight_per_peer.max(1);
        // (`checked_div` only fails for a zero divisor.)
        let guess = self
            .config
            .initial_timeout
            .checked_div(10)
            .unwrap_or_default();
        self.peers
            .iter()
            .filter(|(_, s)| s.in_flight < max.checked_shr(s.timeouts).unwrap_or(0).max(1))
            .min_by_key(|(_, s)| {
                let penalty = 1u32.checked_shl(s.timeouts.min(31)).unwrap_or(u32::MAX);
                s.latency
                    .unwrap_or(guess)
                    .saturating_mul(
                        u32::try_from(s.in_flight)
                            .unwrap_or(u32::MAX)
                            .saturating_add(1),
                    )
                    .saturating_mul(penalty)
            })
    }

    /// With no chunk waiting: the chunk in flight the best peer with room should take over,
    /// that peer, and from when. Only a measured peer takes over (its timeout is then its
    /// expected answer time with margin), only from a peer not known to be faster, and only a
    /// chunk held longer than that timeout; the oldest such chunk first.
    fn stealable(&self) -> Option<(usize, P, Instant)> {
        if !self.pending.is_empty() {
            return None;
        }
        let (thief, thief_state) = self.best_peer()?;
        let thief_latency = thief_state.latency?;
        let (index, (_, _, sent)) = self
            .in_flight
            .iter()
            .filter(|(_, (holder, _, _))| holder != thief)
            .filter(|(_, (holder, _, _))| {
                self.peers
                    .get(holder)
                    .and_then(|h| h.latency)
                    .is_none_or(|l| l > thief_latency)
            })
            .min_by_key(|(_, (_, _, sent))| *sent)?;
        let at = sent.checked_add(thief_state.timeout).unwrap_or(*sent);
        Some((*index, thief.clone(), at))
    }

    /// Takes chunk `index` from its holder to give it to another peer: the holder's share
    /// shrinks as on a timeout, its request's answer is still taken if it comes first.
    fn steal(&mut self, index: usize) {
        self.stats.taken_over = self.stats.taken_over.saturating_add(1);
        if let Some((holder, _)) = self.take_in_flight(index)
            && let Some(state) = self.peers.get_mut(&holder)
        {
            state.timeouts = state.timeouts.saturating_add(1);
        }
        self.pending.insert(index);
    }

    /// Takes chunk `index` out of flight; returns who held it and when it was sent.
    fn take_in_flight(&mut self, index: usize) -> Option<(P, Instant)> {
        let (holder, _, sent) = self.in_flight.remove(&index)?;
        if let Some(state) = self.peers.get_mut(&holder) {
            state.in_flight = state.in_flight.saturating_sub(1);
        }
        Some((holder, sent))
    }

    /// The tunables it runs with.
    pub fn config(&self) -> FetchConfig {
        self.config
    }

    /// How requests ended so far other than by an answer.
    pub fn stats(&self) -> FetchStats {
        self.stats
    }

    /// `peer`'s answer for chunk `index` arrived and goes to verification (a pipeline whose
    /// result comes later through [`handle_verified`](Self::handle_verified) or
    /// [`handle_refused`](Self::handle_refused)): the request is over — its latency sampled,
    /// its peer's slot free — and the chunk is neither asked again nor timed out meanwhile.
    /// It still counts against [`FetchConfig::max_unverified`] until its result comes.
    pub fn handle_received(&mut self, peer: &P, index: usize, now: Instant) {
        if !self.pending.remove(&index) && !self.in_flight.contains_key(&index) {
            // Verified already, or another answer of it is being verified.
            return;
        }
        if let Some((holder, sent)) = self.take_in_flight(index)
            && &holder == peer
        {
            self.sample_latency(peer, sent, now);
        }
        self.verifying.insert(index, peer.clone());
    }

    /// Chunks received and not yet verified and stored (see
    /// [`handle_received`](Self::handle_received)).
    pub fn verifying(&self) -> usize {
        self.verifying.len()
    }

    /// Whether chunk `index` was received and is being verified.
    pub fn is_verifying(&self, index: usize) -> bool {
        self.verifying.contains_key(&index)
    }

    /// `peer` delivered chunk `index` and it verified (possibly after the request timed out
    /// and went to another peer: that request is no longer needed).
    pub fn handle_verified(&mut self, peer: &P, index: usize, now: Instant) {
        self.pending.remove(&index);
        self.verifying.remove(&index);
        let Some((holder, sent)) = self.take_in_flight(index) else {
            return;
        };
        if &holder != peer {
            return;
        }
        self.sample_latency(peer, sent, now);
    }

    /// Folds the answer time of a request to `peer` sent at `sent` into its latency.
    fn sample_latency(&mut self, peer: &P, sent: Instant, now: Instant) {
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
            .verifying
            .get(&index)
            .is_some_and(|holder| holder == peer)
        {
            self.verifying.remove(&index);
            self.pending.insert(index);
        }
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

    /// The request of chunk `index` to `peer` reached its [`ChunkRequest::deadline`] without an
    /// answer: as [`handle_timeouts`](Self::handle_timeouts) for that one request (nothing
    /// when the chunk went to another peer meanwhile or is verified).
    pub fn handle_expired(&mut self, peer: &P, index: usize) {
        if self
            .in_flight
            .get(&index)
            .is_some_and(|(holder, _, _)| holder == peer)
        {
            self.take_in_flight(index);
            self.pending.insert(index);
            self.timed_out(peer);
        }
    }

    fn timed_out(&mut self, peer: &P) {
        self.stats.timed_out = self.stats.timed_out.saturating_add(1);
        if let Some(state) = self.peers.get_mut(peer) {
            state.timeouts = state.timeouts.saturating_add(1);
            state.timeout = state.timeout.saturating_mul(2).min(self.config.max_timeout);
        }
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
            self.take_in_flight(*index);
            self.pending.insert(*index);
            self.timed_out(peer);
        }
        expired.into_iter().map(|(i, p)| (p, i)).collect()
    }

    /// When to call [`handle_timeouts`](Self::handle_timeouts) and
    /// [`poll_request`](Self::poll_request) again: the earliest deadline in flight, or earlier
    /// the moment an idle peer may take over a slow peer's chunk.
    pub fn next_deadline(&self) -> Option<Instant> {
        let steal = self.stealable().map(|(_, _, at)| at);
        self.in_flight
            .values()
            .map(|(_, d, _)| *d)
            .chain(steal)
            .min()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Peers dropped for serving bad chunks, in order, each once.
    pub fn penalised(&self) -> &[Penalty<P>] {
        &self.penalised
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest listing chunks of `sizes` bytes (nothing else in it matters here).
    fn manifest_of(sizes: &[u32]) -> Manifest {
        let chunks = (0u64..)
            .zip(sizes)
            .map(|(i, &size)| super::super::manifest::ChunkEntry {
                hash: [0; 32],
                start: i,
                end: i + 1,
                size,
            })
            .collect();
        Manifest {
            module_hash: crate::hashes::ModuleHash([0; 32]),
            module_version: 3,
            params: Vec::new(),
            height: 1,
            block_hash: crate::hashes::BlockHash([0; 32]),
            state_root: crate::hashes::StateRoot([0; 32]),
            registry_root: [0; 32],
            leaf_count: sizes.len() as u64,
            leaf_size: 129,
            extras: Vec::new(),
            chunks,
            chunk_roots: Vec::new(),
            queue: None,
        }
    }

    #[test]
    fn chunks_in_flight_are_bounded_by_bytes_not_by_count() {
        // checkpoint-v3-sized chunks: far more than 64 in flight, within the byte budget.
        let small = FetchConfig::for_manifest(&manifest_of(&[30_000, 40_000, 35_000]));
        assert_eq!(
            small.max_unverified,
            usize::try_from(UNVERIFIED_BYTES / 40_000).unwrap()
        );
        assert!(small.max_unverified > FetchConfig::default().max_unverified);
        // checkpoint-v1's ~1 MB chunks: as many as before.
        let v1 = FetchConfig::for_manifest(&manifest_of(&[1 << 20, 1 << 20]));
        assert_eq!(v1.max_unverified, 64);
        // One huge chunk in a hostile manifest: few in flight, never 64 of them.
        let huge = FetchConfig::for_manifest(&manifest_of(&[100, 64 << 20]));
        assert_eq!(huge.max_unverified, MIN_UNVERIFIED);
        // Tiny chunks: the count bound holds, and the bytes stay within the budget.
        let tiny = FetchConfig::for_manifest(&manifest_of(&[10; 4]));
        assert_eq!(tiny.max_unverified, MAX_UNVERIFIED);
        let empty = FetchConfig::for_manifest(&manifest_of(&[]));
        assert_eq!(empty.max_unverified, MAX_UNVERIFIED);
        for config in [small, v1, tiny] {
            assert_eq!(
                config.max_in_flight_per_peer,
                FetchConfig::default().max_in_flight_per_peer
            );
        }
    }

    /// What a simulated restore did.
    struct Run {
        /// Virtual time from the first request to the last chunk verified.
        took: Duration,
        /// Chunks each peer delivered first (the ones that counted).
        delivered: Vec<usize>,
        /// Chunks each peer was asked for.
        asked: Vec<usize>,
    }

    /// Drives a fetcher of `chunks` chunks over peers answering after `latencies`, with
    /// virtual time, the way the restore driver does: a request is cut at the deadline the
    /// fetcher gave it (and reported expired), every answer before it is reported.
    fn simulate(chunks: usize, latencies: &[Duration]) -> (Fetcher<usize>, Run) {
        let mut fetcher = Fetcher::new(0..chunks, 0..latencies.len(), FetchConfig::default());
        let start = Instant::now();
        let mut now = start;
        let mut verified = BTreeSet::new();
        let mut delivered = vec![0; latencies.len()];
        let mut asked = vec![0; latencies.len()];
        // (arrival, peer, chunk)
        let mut inbox: Vec<(Instant, usize, usize)> = Vec::new();
        // Requests the driver gives up on at their deadline: (deadline, peer, chunk).
        let mut cut: Vec<(Instant, usize, usize)> = Vec::new();
        for _ in 0..100_000 {
            while let Some(ChunkRequest {
                peer,
                index,
                deadline,
            }) = fetcher.poll_request(now).unwrap()
            {
                asked[peer] += 1;
                let arrival = now + latencies[peer];
                if arrival <= deadline {
                    inbox.push((arrival, peer, index));
                } else {
                    // Cut at the fetcher's deadline, as the driver does.
                    cut.push((deadline, peer, index));
                }
            }
            if fetcher.is_done() {
                break;
            }
            inbox.sort();
            cut.sort();
            let next = [
                inbox.first().map(|a| a.0),
                cut.first().map(|c| c.0),
                fetcher.next_deadline(),
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("a request in flight or a deadline to wait for");
            now = now.max(next);
            while cut.first().is_some_and(|c| c.0 <= now) {
                let (_, peer, index) = cut.remove(0);
                fetcher.handle_expired(&peer, index);
            }
            fetcher.handle_timeouts(now);
            while inbox.first().is_some_and(|a| a.0 <= now) {
                let (_, peer, index) = inbox.remove(0);
                if verified.insert(index) {
                    delivered[peer] += 1;
                }
                fetcher.handle_verified(&peer, index, now);
            }
        }
        assert!(fetcher.is_done(), "the simulation did not finish");
        let took = now.duration_since(start);
        (
            fetcher,
            Run {
                took,
                delivered,
                asked,
            },
        )
    }

    #[test]
    fn a_slow_peer_loses_its_chunks_to_fast_peers_without_waiting_out_its_deadline() {
        let fast = Duration::from_millis(50);
        // Slower than any deadline the fetcher gives a request (10 s, doubled, up to 60 s).
        let slow = Duration::from_secs(100);
        let (fetcher, run) = simulate(40, &[slow, fast, fast, fast]);
        assert!(
            run.asked[0] > 0,
            "the slow peer was never tried: {:?}",
            run.asked
        );
        assert_eq!(run.delivered[0], 0, "{:?}", run.delivered);
        assert_eq!(run.delivered.iter().sum::<usize>(), 40);
        // The fast peers take the slow peer's chunks once they sit idle, long before the
        // 10 s first deadline: the restore takes about what the fast peers need.
        assert!(
            run.took < Duration::from_secs(2),
            "the restore took {:?} with one slow peer",
            run.took
        );
        // Slow is not malicious: the peer stays, unpenalised, with a smaller share.
        assert!(fetcher.penalised().is_empty());
        assert!(fetcher.peers().any(|p| *p == 0));
        // What an operator reads: chunks taken over, no request waited out to its deadline.
        let stats = fetcher.stats();
        assert!(stats.taken_over >= 1, "{stats:?}");
        assert_eq!(stats.timed_out, 0, "{stats:?}");
    }

    #[test]
    fn an_expired_request_is_reassigned_and_its_peer_gets_the_next_deadline_doubled() {
        let config = FetchConfig::default();
        let mut fetcher = Fetcher::new([7], ["silent", "other"], config);
        // (Both unmeasured: the first request goes to either.)
        let t0 = Instant::now();
        let first = fetcher.poll_request(t0).unwrap().unwrap();
        assert_eq!(first.deadline, t0 + config.initial_timeout);
        assert_eq!(fetcher.next_deadline(), Some(first.deadline));
        let not_holder = if first.peer == "silent" {
            "other"
        } else {
            "silent"
        };
        // An expiry for a peer not holding the chunk, or for another chunk, changes nothing.
        fetcher.handle_expired(&not_holder, 7);
        fetcher.handle_expired(&first.peer, 8);
        assert_eq!(fetcher.in_flight(), 1);
        // The driver gave up at the fetcher's deadline: the chunk goes to the other peer.
        fetcher.handle_expired(&first.peer, 7);
        assert_eq!(fetcher.in_flight(), 0);
        assert_eq!(
            fetcher.stats(),
            FetchStats {
                timed_out: 1,
                taken_over: 0
            }
        );
        let t1 = first.deadline;
        let second = fetcher.poll_request(t1).unwrap().unwrap();
        assert_ne!(second.peer, first.peer);
        assert_eq!(second.index, 7);
        assert_eq!(second.deadline, t1 + config.initial_timeout);
        fetcher.handle_expired(&second.peer, 7);
        let third = fetcher.poll_request(t1).unwrap().unwrap();
        assert_eq!(third.deadline, t1 + config.initial_timeout * 2);
        assert!(fetcher.penalised().is_empty());
    }
}

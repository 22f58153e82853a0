//! What one peer may take of this node's module serving: a module answer is up to a whole
//! frame of bytes read from the store, so a peer asking for modules in a loop could make the
//! node read and send megabytes per request. Sans-IO (time is passed in), per peer:
//! - one module request in flight at a time;
//! - a request rate: a burst of [`ServeLimits::request_burst`], then one request per
//!   [`ServeLimits::request_interval`];
//! - a byte budget: [`ServeLimits::bytes_per_window`] module bytes served per
//!   [`ServeLimits::window`];
//! - a penalty: each request over the first two (in flight, rate) is a strike; more than
//!   [`ServeLimits::max_strikes`] strikes within one window is abuse, and the caller bans the
//!   peer. A request over the byte budget is only answered "not here": at the request rate it
//!   costs a lookup.
//!
//! The fetching side paces itself to match ([`FetchPacing`]): it asks one peer at most every
//! [`FETCH_RETRY`], backing off up to [`FETCH_RETRY_MAX`] from a peer that does not report the
//! module ready and answers without it.
//!
//! Rates are kept as theoretical arrival times (GCRA): a request is allowed while the time its
//! credit runs out lies at most the burst ahead of now, so the state per peer is a few
//! instants. An honest node asks one peer for one module at a time and paces its retries, so
//! it never meets the request limits.

use std::collections::HashMap;
use std::num::{NonZeroU64, NonZeroU128};
use std::time::{Duration, Instant};

use modnode_peers::NodeId;

/// The limits; see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Requests a peer may make back to back.
    pub request_burst: u32,
    /// After the burst, one request per this interval.
    pub request_interval: Duration,
    /// Module bytes served to one peer per [`window`](Self::window).
    pub bytes_per_window: u64,
    /// The window of the byte budget and of the strike count.
    pub window: Duration,
    /// Refused requests a peer may make per window before it counts as abuse.
    pub max_strikes: u32,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            request_burst: 4,
            request_interval: Duration::from_secs(1),
            // Four modules of the default 8 MiB upload cap per minute.
            bytes_per_window: 32 << 20,
            window: Duration::from_secs(60),
            max_strikes: 8,
        }
    }
}

/// Why a module request is not answered with bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Over a limit: answered "not here" this time; the peer may ask again later.
    #[error("module request refused: {0}")]
    Limited(&'static str),
    /// The peer went on asking after too many refusals: a protocol violation by the peer.
    #[error("module requests in a loop: {strikes} refused within {window:?} ({last})")]
    Abuse {
        /// Refusals counted within the window.
        strikes: u32,
        /// The window.
        window: Duration,
        /// The last limit it ran into.
        last: &'static str,
    },
}

#[derive(Debug)]
struct PeerUse {
    in_flight: bool,
    /// When the request credit runs out (GCRA theoretical arrival time).
    requests_tat: Instant,
    /// When the byte credit runs out.
    bytes_tat: Instant,
    strikes: u32,
    strikes_since: Instant,
}

impl PeerUse {
    fn new(now: Instant) -> Self {
        Self {
            in_flight: false,
            requests_tat: now,
            bytes_tat: now,
            strikes: 0,
            strikes_since: now,
        }
    }

    fn idle(&self, now: Instant) -> bool {
        !self.in_flight && self.requests_tat <= now && self.bytes_tat <= now && self.strikes == 0
    }
}

/// Peers tracked before idle ones are forgotten (only connected peers can ask, and the
/// connection count is bounded, so this is head-room).
const TRACKED: usize = 256;

/// The per-peer accounting; see the module docs.
#[derive(Debug)]
pub struct ServeLimiter {
    limits: ServeLimits,
    /// At most [`TRACKED`] (idle entries are dropped past it), and no more than the connected
    /// peers when the owner forgets each peer that leaves.
    peers: HashMap<NodeId, PeerUse>,
}

impl ServeLimiter {
    /// A limiter with `limits`.
    pub fn new(limits: ServeLimits) -> Self {
        Self {
            limits,
            peers: HashMap::new(),
        }
    }

    /// A module request from `peer` at `now`: `Ok` takes its one in-flight place, to be given
    /// back with [`ServeLimiter::finish`] whatever happens next.
    pub fn admit(&mut self, peer: NodeId, now: Instant) -> Result<(), Refusal> {
        if self.peers.len() >= TRACKED {
            self.peers.retain(|_, p| !p.idle(now));
        }
        let limits = self.limits;
        let state = self.peers.entry(peer).or_insert_with(|| PeerUse::new(now));
        if state.in_flight {
            return Err(strike(
                state,
                &limits,
                now,
                "another module request in flight",
            ));
        }
        let burst = limits
            .request_interval
            .saturating_mul(limits.request_burst.saturating_sub(1));
        let tat = state.requests_tat.max(now);
        if tat.saturating_duration_since(now) > burst {
            return Err(strike(state, &limits, now, "too many module requests"));
        }
        let Some(next_tat) = tat.checked_add(limits.request_interval) else {
            return Err(strike(state, &limits, now, "too many module requests"));
        };
        state.requests_tat = next_tat;
        state.in_flight = true;
        Ok(())
    }

    /// `peer`'s admitted request is about to get `bytes` module bytes: charged to its byte
    /// budget, or refused (answered "not here") when over it.
    pub fn charge(&mut self, peer: NodeId, bytes: usize, now: Instant) -> Result<(), Refusal> {
        let limits = self.limits;
        let state = self.peers.entry(peer).or_insert_with(|| PeerUse::new(now));
        let budget =
            NonZeroU128::from(NonZeroU64::new(limits.bytes_per_window).unwrap_or(NonZeroU64::MIN));
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        // The share of the window these bytes use up, in nanoseconds.
        let window_ns = limits.window.as_nanos();
        let cost_ns = u128::from(bytes).saturating_mul(window_ns) / budget;
        let cost = Duration::from_nanos(u64::try_from(cost_ns).unwrap_or(u64::MAX));
        let tat = state.bytes_tat.max(now);
        let after = tat.checked_add(cost);
        match after {
            Some(after) if after.saturating_duration_since(now) <= limits.window => {
                state.bytes_tat = after;
                Ok(())
            }
            _ => Err(Refusal::Limited("module bytes over the per-peer budget")),
        }
    }

    /// `peer`'s admitted request ended (answered, refused or broken).
    pub fn finish(&mut self, peer: &NodeId) {
        if let Some(state) = self.peers.get_mut(peer) {
            state.in_flight = false;
        }
    }

    /// `peer` left (closed, banned, superseded): its accounting is dropped, even with a request
    /// in flight (that request's connection is gone; its [`finish`](Self::finish) then finds
    /// nothing), so the table never holds more than the connected peers.
    pub fn forget(&mut self, peer: &NodeId) {
        self.peers.remove(peer);
    }

    /// Peers with an account.
    pub fn tracked(&self) -> usize {
        self.peers.len()
    }
}

/// Counts a refusal; past the limit within one window it is abuse.
fn strike(state: &mut PeerUse, limits: &ServeLimits, now: Instant, last: &'static str) -> Refusal {
    if now.saturating_duration_since(state.strikes_since) > limits.window {
        state.strikes = 0;
        state.strikes_since = now;
    }
    state.strikes = state.strikes.saturating_add(1);
    if state.strikes > limits.max_strikes {
        Refusal::Abuse {
            strikes: state.strikes,
            window: limits.window,
            last,
        }
    } else {
        Refusal::Limited(last)
    }
}

/// Shortest time between two module requests this node sends one peer (well inside what
/// [`ServeLimits::default`] allows).
pub const FETCH_RETRY: Duration = Duration::from_secs(2);
/// Longest back-off from a peer that keeps answering without the module.
pub const FETCH_RETRY_MAX: Duration = Duration::from_secs(32);

#[derive(Debug, Clone, Copy)]
struct Pace {
    next: Instant,
    backoff: Duration,
}

/// When this node may ask each peer for a module again (see the module docs).
#[derive(Debug, Default)]
pub struct FetchPacing {
    /// Bounded by the connected peers: only they are asked, and the owner forgets a peer
    /// when it leaves.
    peers: HashMap<NodeId, Pace>,
}

impl FetchPacing {
    /// Whether `peer` may be asked at `now`.
    pub fn may_ask(&self, peer: &NodeId, now: Instant) -> bool {
        self.peers.get(peer).is_none_or(|p| p.next <= now)
    }

    /// `peer` was asked at `now` and answered without the module (or failed); `ready` is
    /// whether it reports the module ready (then it is asked again soon, else it is backed off
    /// from).
    pub fn answered_without(&mut self, peer: NodeId, ready: bool, now: Instant) {
        let pace = self.peers.entry(peer).or_insert(Pace {
            next: now,
            backoff: FETCH_RETRY,
        });
        let wait = if ready { FETCH_RETRY } else { pace.backoff };
        // Seconds cannot overflow `Instant`; if they did, the peer could be asked at once.
        pace.next = now.checked_add(wait).unwrap_or(now);
        pace.backoff = if ready {
            FETCH_RETRY
        } else {
            pace.backoff.saturating_mul(2).min(FETCH_RETRY_MAX)
        };
    }

    /// `peer` was asked at `now` and served the module.
    pub fn served(&mut self, peer: NodeId, now: Instant) {
        self.peers.insert(
            peer,
            Pace {
                next: now.checked_add(FETCH_RETRY).unwrap_or(now),
                backoff: FETCH_RETRY,
            },
        );
    }

    /// `peer` left.
    pub fn forget(&mut self, peer: &NodeId) {
        self.peers.remove(peer);
    }

    /// Peers with a pace.
    pub fn tracked(&self) -> usize {
        self.peers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = [1; 32];
    const B: NodeId = [2; 32];

    fn limiter() -> ServeLimiter {
        ServeLimiter::new(ServeLimits {
            request_burst: 3,
            request_interval: Duration::from_secs(1),
            bytes_per_window: 1000,
            window: Duration::from_secs(10),
            max_strikes: 4,
        })
    }

    /// One request: admitted, charged `bytes`, finished. `Ok(true)` when served.
    fn ask(
        l: &mut ServeLimiter,
        peer: NodeId,
        bytes: usize,
        now: Instant,
    ) -> Result<bool, Refusal> {
        l.admit(peer, now)?;
        let served = l.charge(peer, bytes, now);
        l.finish(&peer);
        match served {
            Ok(()) => Ok(true),
            Err(Refusal::Limited(_)) => Ok(false),
            Err(abuse) => Err(abuse),
        }
    }

    #[test]
    fn a_peer_asking_in_a_loop_is_served_its_burst_then_refused_then_penalised() {
        let mut l = limiter();
        let now = Instant::now();
        let mut served = 0;
        let mut outcome = Ok(true);
        for _ in 0..100 {
            outcome = ask(&mut l, A, 10, now);
            match outcome {
                Ok(true) => served += 1,
                Ok(false) | Err(Refusal::Limited(_)) => {}
                Err(Refusal::Abuse { .. }) => break,
            }
        }
        assert_eq!(served, 3, "only the burst is served");
        assert!(
            matches!(outcome, Err(Refusal::Abuse { strikes: 5, .. })),
            "{outcome:?}"
        );
        // Another peer is not affected.
        assert_eq!(ask(&mut l, B, 10, now), Ok(true));
    }

    #[test]
    fn requests_paced_at_the_interval_are_always_served() {
        let mut l = limiter();
        let start = Instant::now();
        for i in 0..50u32 {
            let now = start + Duration::from_secs(u64::from(i));
            assert_eq!(ask(&mut l, A, 100, now), Ok(true), "request {i}");
        }
    }

    #[test]
    fn the_request_rate_refills_over_time() {
        let mut l = limiter();
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(ask(&mut l, A, 0, now), Ok(true));
        }
        assert!(matches!(l.admit(A, now), Err(Refusal::Limited(_))));
        let later = now + Duration::from_secs(1);
        assert_eq!(ask(&mut l, A, 0, later), Ok(true));
        assert!(matches!(l.admit(A, later), Err(Refusal::Limited(_))));
    }

    #[test]
    fn one_request_in_flight_per_peer() {
        let mut l = limiter();
        let now = Instant::now();
        l.admit(A, now).unwrap();
        assert_eq!(
            l.admit(A, now),
            Err(Refusal::Limited("another module request in flight"))
        );
        l.admit(B, now).unwrap();
        l.finish(&A);
        l.admit(A, now).unwrap();
    }

    #[test]
    fn bytes_served_per_window_are_bounded() {
        let mut l = limiter();
        let start = Instant::now();
        let mut bytes = 0u64;
        // One request per second (always within the rate) for 10 windows, 400 bytes each.
        for i in 0..100u64 {
            let now = start + Duration::from_secs(i);
            match ask(&mut l, A, 400, now) {
                Ok(true) => bytes += 400,
                Ok(false) => {}
                Err(e) => panic!("paced requests penalised: {e}"),
            }
        }
        // The budget of 1000 bytes per 10 s, plus the first window's credit.
        assert!(bytes <= 1000 * 10 + 1000, "{bytes}");
        assert!(bytes >= 1000 * 9, "{bytes}");
        // A module bigger than the whole budget is never served.
        let now = start + Duration::from_secs(1000);
        assert_eq!(ask(&mut l, A, 1001, now), Ok(false));
    }

    #[test]
    fn strikes_expire_with_the_window() {
        let mut l = limiter();
        let start = Instant::now();
        // One in-flight refusal per request, three requests per window: 30 refusals in all,
        // never more than the 4 tolerated within one window.
        for i in 0..30u64 {
            let now = start + Duration::from_secs(11 * (i / 3)) + Duration::from_millis(i % 3);
            let _ = l.admit(A, now);
            let r = l.admit(A, now);
            l.finish(&A);
            assert!(!matches!(r, Err(Refusal::Abuse { .. })), "{i}: {r:?}");
        }
    }

    #[test]
    fn the_fetching_side_never_runs_into_the_serving_limits() {
        let mut pacing = FetchPacing::default();
        let mut l = ServeLimiter::new(ServeLimits::default());
        let start = Instant::now();
        let mut asked = 0;
        // A node polling every 100 ms for an hour, for a module peer A never has (answered
        // "not here"), then for a module it does have (served each time).
        for tick in 0..36_000u64 {
            let now = start + Duration::from_millis(100 * tick);
            if !pacing.may_ask(&A, now) {
                continue;
            }
            asked += 1;
            let has = tick >= 18_000;
            match ask(&mut l, A, if has { 1 << 20 } else { 0 }, now) {
                Ok(true) if has => pacing.served(A, now),
                Ok(_) if !has => pacing.answered_without(A, false, now),
                other => panic!("tick {tick}: {other:?}"),
            }
        }
        // Backed off while A had nothing, then asked every FETCH_RETRY.
        assert!(asked > 900 && asked < 1000, "{asked}");
    }

    #[test]
    fn a_peer_reporting_the_module_ready_is_asked_again_soon() {
        let mut pacing = FetchPacing::default();
        let now = Instant::now();
        for _ in 0..10 {
            pacing.answered_without(A, false, now);
            pacing.answered_without(B, true, now);
        }
        assert!(pacing.may_ask(&B, now + FETCH_RETRY));
        assert!(!pacing.may_ask(&A, now + FETCH_RETRY));
        assert!(pacing.may_ask(&A, now + FETCH_RETRY_MAX));
    }

    #[test]
    fn tracked_peers_stay_bounded() {
        let mut l = limiter();
        let start = Instant::now();
        for i in 0..10_000u32 {
            let mut peer = [0; 32];
            peer[..4].copy_from_slice(&i.to_le_bytes());
            let now = start + Duration::from_secs(u64::from(i));
            ask(&mut l, peer, 0, now).unwrap();
        }
        assert!(l.peers.len() <= TRACKED, "{}", l.peers.len());
    }
}

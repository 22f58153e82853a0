//! Which connections are held, and which one is evicted to make room for a new one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use super::ConnectionLimits;

/// How far a connection got with its request; decides whether and in which order it may be
/// evicted (lower first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Accepted; its request head has not arrived yet.
    Head = 0,
    /// Its request was refused (no or wrong credentials): answered, closing.
    Refused = 1,
    /// A request not (yet) marked authenticated — one that needs no credentials (health,
    /// metrics, an unknown path) — being answered.
    Public = 2,
    /// A request with the right credentials: never evicted.
    Authenticated = 3,
}

/// The [`Phase`] of one connection, shared by the accept loop and the request's handlers
/// (put on every request as an extension).
#[derive(Debug, Clone)]
pub(crate) struct ConnPhase(Arc<AtomicU8>);

impl ConnPhase {
    pub(super) fn new() -> Self {
        Self(Arc::new(AtomicU8::new(Phase::Head as u8)))
    }

    /// The connection's phase now.
    pub(crate) fn get(&self) -> Phase {
        match self.0.load(Ordering::Acquire) {
            0 => Phase::Head,
            1 => Phase::Refused,
            2 => Phase::Public,
            _ => Phase::Authenticated,
        }
    }

    /// Moves the connection to `phase`.
    pub(crate) fn set(&self, phase: Phase) {
        self.0.store(phase as u8, Ordering::Release);
    }
}

/// A connection being served, as the accept loop sees it.
pub(super) struct Tracked {
    pub(super) accepted: Instant,
    pub(super) phase: ConnPhase,
    pub(super) handle: AbortHandle,
}

impl Tracked {
    /// Whether it may be evicted at `now`, and if so its rank (evicted lowest first): the
    /// phase, then the oldest first. A connection still waiting for its head, or whose
    /// unauthenticated request is being answered, has [`ConnectionLimits::head_grace`] first.
    fn eviction_rank(&self, now: Instant, grace: Duration) -> Option<(Phase, Instant)> {
        match self.phase.get() {
            Phase::Authenticated => None,
            Phase::Head | Phase::Public if now.saturating_duration_since(self.accepted) < grace => {
                None
            }
            phase => Some((phase, self.accepted)),
        }
    }
}

/// The connections being served and the rule that makes room for a new one.
pub(super) struct Connections {
    pub(super) tasks: JoinSet<()>,
    pub(super) live: HashMap<tokio::task::Id, Tracked>,
    pub(super) config: ConnectionLimits,
    pub(super) evicted: Arc<AtomicU64>,
}

impl Connections {
    /// All connections at once: the unauthenticated cap plus the reserved lane.
    fn hard_cap(&self) -> usize {
        self.config
            .max_connections
            .max(1)
            .saturating_add(self.config.max_authenticated)
    }

    fn unauthenticated(&self) -> usize {
        self.live
            .values()
            .filter(|t| t.phase.get() != Phase::Authenticated)
            .count()
    }

    /// Whether a new connection is to evict one first.
    fn full(&self) -> bool {
        self.live.len() >= self.hard_cap()
            || self.unauthenticated() >= self.config.max_connections.max(1)
    }

    /// The connection to evict at `now`, if any may be.
    fn slowest(&self, now: Instant) -> Option<tokio::task::Id> {
        self.live
            .iter()
            .filter_map(|(id, t)| Some((t.eviction_rank(now, self.config.head_grace)?, *id)))
            .min()
            .map(|(_, id)| id)
    }

    /// Whether a new connection can be taken now (there is room, or one to evict).
    pub(super) fn can_take(&self, now: Instant) -> bool {
        !self.full() || self.slowest(now).is_some()
    }

    /// When the oldest connection in its grace (see [`Tracked::eviction_rank`]) passes it.
    pub(super) fn next_evictable(&self) -> Option<Instant> {
        self.live
            .values()
            .filter(|t| matches!(t.phase.get(), Phase::Head | Phase::Public))
            .map(|t| t.accepted)
            .min()
            .and_then(|accepted| accepted.checked_add(self.config.head_grace))
    }

    /// Forgets a finished connection.
    pub(super) fn finished(&mut self, id: tokio::task::Id) {
        self.live.remove(&id);
    }

    /// Makes room for one more connection; false if none may be evicted.
    pub(super) fn make_room(&mut self, now: Instant) -> bool {
        while self.full() {
            let Some(id) = self.slowest(now) else {
                return false;
            };
            if let Some(t) = self.live.remove(&id) {
                tracing::debug!(phase = ?t.phase.get(), "evicting the slowest unauthenticated connection");
                t.handle.abort();
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }
}

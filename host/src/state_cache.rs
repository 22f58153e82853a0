//! The state cache: immutable states of recent blocks by block hash, within a byte budget.
//!
//! States are [`State`]s, which share unchanged chunks with their neighbours; the
//! [`ledger`] counts each shared chunk once and keeps every state's exclusive bytes current.
//! The budget (`state_cache.max_bytes`) covers what the cache holds *beyond the head state*
//! (the head is the node's working set, reported separately as `head_bytes`) plus the bytes
//! reserved for regenerations in flight, so a load counts before it starts.
//!
//! - **Never evicted:** the head, a state someone holds a clone of (in use: import, a query, a
//!   checkpoint), and anchors (every `anchor_every`-th height within the window), which bound
//!   any replay to `anchor_every` blocks.
//! - **Evicted first:** the lowest regeneration cost per exclusive byte (cost = blocks to replay
//!   from the anchor below).
//! - **Dropped:** states more than `final_window` blocks below finality.
//!
//! The head is also published in an [`ArcSwap`] beside the lock, so reading it
//! ([`StateCache::head`]: the chain's own state reads, every query of the head) takes no lock.
//!
//! [`regen`] regenerates an uncached state by replaying stored blocks on the nearest cached
//! ancestor or anchor, coalescing concurrent requests. [`anchors`] persists the anchors in
//! the node's store, so replays stay bounded by `anchor_every` blocks after a restart too. [`CacheMetrics`] puts accounted bytes next to the
//! allocator's live bytes and RSS ([`crate::alloc_stats`]).

pub mod anchors;
mod ledger;
pub(crate) mod pending_store;
pub mod records;
pub mod regen;

use std::collections::HashMap;
use std::num::NonZeroU128;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;

use ledger::Ledger;
pub use regen::{StateCacheError, StateSource};

use crate::consensus::block::{Block, BlockHash};
use crate::state::State;

/// How the cache is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateCacheConfig {
    /// Bytes the cache may hold beyond the head state, reservations included.
    pub max_bytes: u64,
    /// Every this many heights a state is an anchor: kept while in the window, so no replay is
    /// longer than this.
    pub anchor_every: u64,
    /// States this many blocks below the finalized height are still kept.
    pub final_window: u64,
    /// Persisted anchors kept below the finalized height: states older than
    /// `anchors_kept × anchor_every` blocks below finality are refused as too old.
    pub anchors_kept: u64,
}

impl Default for StateCacheConfig {
    fn default() -> Self {
        Self {
            max_bytes: 512 << 20,
            anchor_every: 32,
            final_window: 64,
            anchors_kept: 64,
        }
    }
}

/// A cached state.
#[derive(Debug)]
struct Entry {
    snapshot: State,
    id: u64,
    own: usize,
}

/// Everything behind the cache's lock.
#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<BlockHash, Entry>,
    ledger: Ledger,
    head: Option<BlockHash>,
    /// Bytes of every chunk the head holds (shared or not): excluded from the budget.
    head_chunk_bytes: usize,
    /// Sum of `own` over entries other than the head.
    own_bytes: usize,
    reserved: usize,
    next_id: u64,
    /// Running estimate of the exclusive bytes one more state costs, for reservations.
    per_state_estimate: usize,
    evictions: u64,
}

impl Inner {
    fn accounted(&self) -> usize {
        self.ledger
            .total()
            .saturating_sub(self.head_chunk_bytes)
            .saturating_add(self.own_bytes)
            .saturating_add(self.reserved)
    }

    fn remove(&mut self, hash: &BlockHash) -> Option<State> {
        let entry = self.entries.remove(hash)?;
        self.ledger.remove(entry.id, entry.snapshot.chunk_ptrs());
        if self.head != Some(*hash) {
            self.own_bytes = self.own_bytes.saturating_sub(entry.own);
        }
        Some(entry.snapshot)
    }
}

/// Counters and byte figures of the cache (see the module docs for what each byte figure
/// covers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheMetrics {
    /// States cached.
    pub states: usize,
    /// Bytes the budget counts: states beyond the head, plus reservations.
    pub accounted_bytes: u64,
    /// Of which reserved for regenerations in flight.
    pub reserved_bytes: u64,
    /// Bytes of the head state's chunks (outside the budget).
    pub head_bytes: u64,
    /// The budget.
    pub max_bytes: u64,
    /// Live bytes the process's allocator reports (0 without the counting allocator).
    pub allocator_bytes: u64,
    /// Resident set size of the process.
    pub rss_bytes: u64,
    /// Allocator bytes not explained by the cache and the head: `allocator - accounted - head`
    /// (negative means the cache overcounts).
    pub unexplained_bytes: i64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that missed.
    pub misses: u64,
    /// Replays run (each may regenerate several states).
    pub regenerations: u64,
    /// Blocks replayed.
    pub replayed_blocks: u64,
    /// Requests answered by a replay another request started.
    pub coalesced: u64,
    /// States evicted for the budget.
    pub evictions: u64,
    /// Queries refused because import was behind.
    pub shed: u64,
    /// Anchors rebuilt from the store's persisted anchor records.
    pub anchors_loaded: u64,
}

/// The state cache (see the module docs). Shared as `Arc<StateCache>`; every method takes
/// `&self`.
pub struct StateCache {
    config: StateCacheConfig,
    inner: Mutex<Inner>,
    /// The head state, stored under the lock together with `Inner::head`, read without it.
    head: ArcSwap<State>,
    hits: AtomicU64,
    misses: AtomicU64,
    shed: AtomicU64,
    behind: AtomicBool,
    regen: regen::Regenerator,
    /// `None` if the store could not open the anchors' keyspace (logged).
    anchors: Option<anchors::Anchors>,
}

impl std::fmt::Debug for StateCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCache")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl StateCache {
    /// A cache regenerating from `source`, holding `head` (the chain's head state) as its
    /// head and nothing else.
    pub fn new(config: StateCacheConfig, source: StateSource, head: State) -> Self {
        let anchors = match source.store.tree(anchors::TREE) {
            Ok(tree) => Some(anchors::Anchors::new(tree)),
            Err(e) => {
                tracing::error!(error = %e, "cannot open the state anchors; replays after a restart are unbounded");
                None
            }
        };
        let cache = Self {
            anchors,
            config,
            inner: Mutex::new(Inner::default()),
            head: ArcSwap::from_pointee(head.clone()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            behind: AtomicBool::new(false),
            regen: regen::Regenerator::new(source),
        };
        cache.place_head(head, 0);
        cache
    }

    /// The configuration.
    pub fn config(&self) -> StateCacheConfig {
        self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves `Inner` consistent before anything can panic, so a
        // poisoned lock still holds a usable cache.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached state after block `hash`, counting a hit or a miss.
    pub fn get(&self, hash: &BlockHash) -> Option<State> {
        let found = self.peek(hash);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// The cached state after block `hash`, without counting.
    pub fn peek(&self, hash: &BlockHash) -> Option<State> {
        self.lock()
            .entries
            .get(hash)
            .map(|entry| entry.snapshot.clone())
    }

    /// The head state: the newest canonical state, read without the cache's lock (one
    /// reference count).
    pub fn head(&self) -> State {
        State::clone(&self.head.load())
    }

    /// Adds a state (no-op if its block is cached), then evicts down to the budget.
    pub fn insert(&self, snapshot: State) {
        let mut inner = self.lock();
        Self::insert_locked(&mut inner, snapshot);
        self.evict(&mut inner);
    }

    fn insert_locked(inner: &mut Inner, snapshot: State) {
        let hash = snapshot.block_hash();
        if inner.entries.contains_key(&hash) {
            return;
        }
        let id = inner.next_id;
        inner.next_id = id.wrapping_add(1);
        let added = inner.ledger.add(id, snapshot.chunk_ptrs());
        let own = snapshot.own_bytes();
        inner.own_bytes = inner.own_bytes.saturating_add(own);
        // Exponential average of what a new state adds, for reservations. The first state
        // brings every chunk (the whole state), not what one more state costs: not counted.
        let cost = added.saturating_add(own);
        inner.per_state_estimate = if inner.entries.is_empty() {
            inner.per_state_estimate
        } else if inner.per_state_estimate == 0 {
            cost
        } else {
            (inner.per_state_estimate.saturating_mul(7) / 8).saturating_add(cost / 8)
        };
        inner
            .entries
            .insert(snapshot.block_hash(), Entry { snapshot, id, own });
    }

    /// Makes `snapshot` the head (inserting it), drops states too far below finality
    /// (`finalized` height) and evicts down to the budget.
    pub fn set_head(&self, snapshot: State, finalized: u64) {
        self.place_head(snapshot, finalized);
        if let Some(anchors) = &self.anchors
            && let Err(e) = anchors.persist(self, finalized)
        {
            tracing::warn!(error = %e, "could not persist state anchors; retried at the next head");
        }
    }

    /// [`set_head`](Self::set_head) but for the anchors.
    fn place_head(&self, snapshot: State, finalized: u64) {
        let mut inner = self.lock();
        self.head.store(Arc::new(snapshot.clone()));
        let hash = snapshot.block_hash();
        Self::insert_locked(&mut inner, snapshot);
        if let Some(old) = inner.head.replace(hash)
            && let Some(entry) = inner.entries.get(&old)
        {
            let own = entry.own;
            inner.own_bytes = inner.own_bytes.saturating_add(own);
        }
        if let Some(entry) = inner.entries.get(&hash) {
            let own = entry.own;
            let head_chunk_bytes = entry
                .snapshot
                .chunk_ptrs()
                .fold(0usize, |sum, (_, bytes)| sum.saturating_add(bytes));
            inner.own_bytes = inner.own_bytes.saturating_sub(own);
            inner.head_chunk_bytes = head_chunk_bytes;
        }
        let floor = finalized.saturating_sub(self.config.final_window);
        let old: Vec<BlockHash> = inner
            .entries
            .iter()
            .filter(|(h, e)| e.snapshot.height() < floor && !e.snapshot.is_shared() && **h != hash)
            .map(|(h, _)| *h)
            .collect();
        for old in old {
            inner.remove(&old);
        }
        self.evict(&mut inner);
    }

    /// The lowest cached state at `height` or above whose block is canonical (the head at
    /// worst), to rebuild a persisted anchor from.
    fn canonical_above(&self, height: u64) -> Result<Option<State>, StateCacheError> {
        let mut candidates: Vec<(u64, BlockHash)> = self
            .lock()
            .entries
            .values()
            .filter(|e| e.snapshot.height() >= height)
            .map(|e| (e.snapshot.height(), e.snapshot.block_hash()))
            .collect();
        candidates.sort_unstable();
        for (at, hash) in candidates {
            if self.source().canonical_hash(at).ok() == Some(hash)
                && let Some(state) = self.peek(&hash)
            {
                return Ok(Some(state));
            }
        }
        Ok(None)
    }

    /// Whether the state at `height` is an anchor (kept while in the window).
    fn is_anchor(&self, height: u64) -> bool {
        height.checked_rem(self.config.anchor_every.max(1)) == Some(0)
    }

    /// Evicts the evictable state with the lowest regeneration cost per exclusive byte until
    /// the accounted bytes fit the budget or nothing more may go.
    fn evict(&self, inner: &mut Inner) {
        let max = usize::try_from(self.config.max_bytes).unwrap_or(usize::MAX);
        while inner.accounted() > max {
            let victim = inner
                .entries
                .iter()
                .filter(|(hash, entry)| {
                    inner.head != Some(**hash)
                        && !entry.snapshot.is_shared()
                        && !self.is_anchor(entry.snapshot.height())
                })
                .map(|(hash, entry)| {
                    let bytes = inner.ledger.exclusive(entry.id).saturating_add(entry.own);
                    let cost = entry
                        .snapshot
                        .height()
                        .checked_rem(self.config.anchor_every.max(1))
                        .unwrap_or(0);
                    // cost / bytes, compared as cost * 2^20 / bytes.
                    let bytes = u128::try_from(bytes).unwrap_or(u128::MAX);
                    let score = u128::from(cost).saturating_mul(1 << 20)
                        / NonZeroU128::new(bytes).unwrap_or(NonZeroU128::MIN);
                    (score, *hash)
                })
                .min();
            let Some((_, hash)) = victim else {
                break;
            };
            inner.remove(&hash);
            inner.evictions = inner.evictions.saturating_add(1);
        }
    }

    /// Reserves room for `states` more states before a regeneration starts, evicting others
    /// if needed. Fails, reserving nothing, if even then they would not fit.
    fn reserve(&self, states: u64) -> Result<usize, StateCacheError> {
        let mut inner = self.lock();
        let estimate = inner.per_state_estimate.max(4096);
        let bytes = usize::try_from(states)
            .unwrap_or(usize::MAX)
            .saturating_mul(estimate);
        inner.reserved = inner.reserved.saturating_add(bytes);
        self.evict(&mut inner);
        let max = usize::try_from(self.config.max_bytes).unwrap_or(usize::MAX);
        if inner.accounted() > max {
            inner.reserved = inner.reserved.saturating_sub(bytes);
            return Err(StateCacheError::OverBudget {
                needed: bytes as u64,
                max_bytes: self.config.max_bytes,
            });
        }
        Ok(bytes)
    }

    /// Releases a reservation (the states it was for are inserted by now, or failed).
    fn release(&self, bytes: usize) {
        let mut inner = self.lock();
        inner.reserved = inner.reserved.saturating_sub(bytes);
    }

    /// Tells the cache whether import is behind: while it is, [`StateCache::query`] sheds.
    pub fn set_behind(&self, behind: bool) {
        self.behind.store(behind, Ordering::Relaxed);
    }

    /// Whether import is behind (set by the chain worker): background work such as pruning
    /// waits while it is.
    pub fn is_behind(&self) -> bool {
        self.behind.load(Ordering::Relaxed)
    }

    /// The state after block `hash`, from the cache or regenerated (see [`regen`]).
    pub fn state(&self, hash: &BlockHash) -> Result<State, StateCacheError> {
        regen::state(self, hash)
    }

    /// Executes `block` on its parent's state (from the cache or regenerated) and caches the
    /// state after it: how a block off the head is validated before it is stored, relayed or
    /// counted for fork choice. [`StateCacheError::InvalidBlock`] means the block is invalid;
    /// [`StateCacheError::NotExecuted`] that it could not be checked for a reason of ours.
    pub fn execute(&self, block: &Block) -> Result<State, StateCacheError> {
        regen::execute(self, block)
    }

    /// A low-priority state lookup (queries): refused while import is behind, otherwise
    /// [`StateCache::state`] — answered on the calling thread from the cache, or regenerated
    /// on a dedicated thread at the lowest scheduling priority (Linux `SCHED_IDLE`), so a
    /// query's replay only uses CPU time that import and side-branch validation leave over.
    /// (A side branch whose parent is being regenerated for a query waits for that replay;
    /// it is rare, and the replay still runs whenever a core is free.)
    pub fn query(&self, hash: &BlockHash) -> Result<State, StateCacheError> {
        if self.behind.load(Ordering::Relaxed) {
            self.shed.fetch_add(1, Ordering::Relaxed);
            return Err(StateCacheError::Shed);
        }
        if let Some(state) = self.get(hash) {
            return Ok(state);
        }
        let answer = std::sync::Mutex::new(None);
        let work = |_: usize| {
            let result = regen::state(self, hash);
            if let Ok(mut slot) = answer.lock() {
                *slot = Some(result);
            }
        };
        crate::runtime::threads::scoped_guest_workers(1, true, &work)
            .map_err(|e| StateCacheError::QueryThread(format!("cannot start it: {e}")))?;
        answer
            .into_inner()
            .ok()
            .flatten()
            .unwrap_or_else(|| Err(StateCacheError::QueryThread("it gave no answer".into())))
    }

    /// The state after the canonical block at `height`.
    pub fn query_height(&self, height: u64) -> Result<State, StateCacheError> {
        let hash = self.regen.source().canonical_hash(height)?;
        self.query(&hash)
    }

    /// Where regeneration reads blocks and finds deposits engines.
    pub fn source(&self) -> &StateSource {
        self.regen.source()
    }

    /// Sets the deposits engine regeneration replays with (module upgrades).
    pub fn set_deposit_engine(&self, engine: crate::consensus::DepositEngine) {
        self.regen.source().set_engine(engine);
    }

    /// Counters and byte figures.
    pub fn metrics(&self) -> CacheMetrics {
        let inner = self.lock();
        let allocator = crate::alloc_stats::allocated_bytes().unwrap_or(0) as u64;
        let accounted = inner.accounted() as u64;
        let head = inner.head_chunk_bytes as u64;
        let explained = accounted.saturating_add(head);
        // A metric: clamped to what an i64 can say.
        let gap = allocator.abs_diff(explained);
        let unexplained = if allocator >= explained {
            0i64.saturating_add_unsigned(gap)
        } else {
            0i64.saturating_sub_unsigned(gap)
        };
        let regen = self.regen.counters();
        CacheMetrics {
            states: inner.entries.len(),
            accounted_bytes: accounted,
            reserved_bytes: inner.reserved as u64,
            head_bytes: head,
            max_bytes: self.config.max_bytes,
            allocator_bytes: allocator,
            rss_bytes: crate::alloc_stats::rss_bytes().unwrap_or(0),
            unexplained_bytes: unexplained,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            regenerations: regen.0,
            replayed_blocks: regen.1,
            coalesced: regen.2,
            evictions: inner.evictions,
            shed: self.shed.load(Ordering::Relaxed),
            anchors_loaded: self.anchors.as_ref().map_or(0, anchors::Anchors::loaded),
        }
    }
}

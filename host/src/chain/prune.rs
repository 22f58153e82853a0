//! Pruning below finality: what the node keeps is O(state + history window), not O(blocks).
//!
//! What each kind of per-height record is needed for, and so until when it is kept:
//!
//! - **Blocks** (block, height index, side-branch blocks): serving range sync to peers and
//!   replaying states. Kept for the history window ([`History`]: by default a day of slots,
//!   43,200 blocks at 2 s) below the head, never above the finalized height; `--history full`
//!   keeps every block. Genesis is always kept.
//! - **Undo records**: reverting a block (only ever above the finalized height) and loading a
//!   state anchor from the head (per-block undo records only above the last persisted anchor
//!   record; `state_cache::anchors`). Kept above the lower of the two.
//! - **eth1 state and module schedule per block**: the head's is what a revert goes back to (above
//!   finality), and a state anchor's is what its state is rebuilt with; a replay recomputes the
//!   rest. Folded at finality: kept above the finalized height and at the anchor heights the
//!   state cache still keeps (`anchors_kept × anchor_every` below finality).
//! - **First signed headers**: evidence of equivocation is only looked for above the finalized
//!   slot; older records go.
//!
//! "Finalized" here is one `finality_depth` lower than the chain's finalized height
//! ([`Inputs::margin`]): a margin kept from when that height was the head's minus the depth and
//! fell when evidence of equivocation reverted the head (it never goes down now: `finality`).
//!
//! **Crash-safe, bounded batches.** Each step deletes at most [`Pruner::step`]'s `max_heights`
//! heights of each kind and writes how far it got ([`Cursors`], `keys::PRUNED`) in the same
//! atomic batch: a crash between or inside batches leaves every record below each cursor gone
//! and every record above it intact, and the next run goes on from the cursors. The batch is
//! not flushed on its own ([`KvStore::commit_unflushed`]): a crash may lose the newest batches
//! whole, which the next run simply does again.
//!
//! **Below import.** [`Pruner::spawn`] runs the steps on their own thread at Linux's
//! `SCHED_IDLE` priority, pauses while import is behind, and sleeps between batches. Readers of
//! old heights see the serving floor ([`Chain::served_from`](super::Chain::served_from)) rise
//! before the deletion is committed, so a block missing below it is "pruned", never corrupt.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::block::{Block, BlockHash};
use crate::state_cache::{StateCache, StateCacheConfig};
use crate::store::{KvStore, StoreError, WriteBatch, keys};

/// How many blocks below the head a node keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// Every block (no block is pruned; undo, eth1 and schedule records are still folded).
    Full,
    /// The newest this many blocks (never fewer than the non-final ones).
    Blocks(u64),
}

/// Milliseconds in a day.
const DAY_MS: u64 = 86_400_000;

impl History {
    /// A day of slots at `slot_ms` (43,200 blocks at 2 s): enough to serve range sync to a
    /// peer a day behind. The default.
    pub fn day_of_slots(slot_ms: u64) -> Self {
        Self::Blocks(DAY_MS.div_ceil(slot_ms.max(1)))
    }

    /// Parses `full` or a number of blocks.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "full" => Ok(Self::Full),
            n => n
                .parse::<u64>()
                .map(Self::Blocks)
                .map_err(|_| format!("history {text:?}: expected a number of blocks or \"full\"")),
        }
    }
}

impl std::fmt::Display for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Full => f.write_str("full"),
            Self::Blocks(n) => write!(f, "{n}"),
        }
    }
}

/// How far pruning has gone: every record of a kind below its cursor is gone (genesis kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursors {
    /// Heights below this hold nothing but genesis (blocks, height index, side blocks and
    /// every per-height record).
    pub blocks: u64,
    /// Undo records of heights below this are gone.
    pub undo: u64,
    /// eth1 and schedule records of heights below this are gone, but at anchor heights.
    pub state: u64,
    /// eth1 and schedule records of anchor heights below this are gone.
    pub anchor_state: u64,
    /// First-signed-header records of slots below this are gone.
    pub header_slot: u64,
}

/// Version byte of the [`Cursors`] record.
const CURSORS_VERSION: u8 = 1;

impl Cursors {
    fn encode(&self) -> Vec<u8> {
        let mut out = vec![CURSORS_VERSION];
        for v in [
            self.blocks,
            self.undo,
            self.state,
            self.anchor_state,
            self.header_slot,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let (version, rest) = bytes.split_first()?;
        if *version != CURSORS_VERSION {
            return None;
        }
        let (blocks, rest) = rest.split_first_chunk::<8>()?;
        let (undo, rest) = rest.split_first_chunk::<8>()?;
        let (state, rest) = rest.split_first_chunk::<8>()?;
        let (anchor_state, rest) = rest.split_first_chunk::<8>()?;
        let header_slot: &[u8; 8] = rest.try_into().ok()?;
        Some(Self {
            blocks: u64::from_be_bytes(*blocks),
            undo: u64::from_be_bytes(*undo),
            state: u64::from_be_bytes(*state),
            anchor_state: u64::from_be_bytes(*anchor_state),
            header_slot: u64::from_be_bytes(*header_slot),
        })
    }

    /// The cursors stored in `store` (all zero before the first batch).
    pub fn load(store: &dyn KvStore) -> Result<Self, StoreError> {
        match store.get(keys::PRUNED)? {
            None => Ok(Self::default()),
            Some(bytes) => Self::decode(&bytes).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "the pruning record ({} bytes) does not decode",
                    bytes.len()
                ))
            }),
        }
    }
}

/// What the chain looks like to the planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    /// The head's height.
    pub head: u64,
    /// The finalized height.
    pub finalized: u64,
    /// Heights kept below the finalized height besides (the genesis `finality_depth`): a margin
    /// from when the finalized height was the head's minus the depth and fell with a reverted
    /// head; it never goes down now (`finality`), so the margin only keeps more than needed.
    pub margin: u64,
    /// The slot of the block at `finalized − margin`: first headers below it go.
    pub finalized_slot: u64,
    /// Upper height of the newest persisted state-anchor record (per-block undo records at or
    /// below it are covered by records); `None` if none is persisted.
    pub anchored: Option<u64>,
    /// The state cache's anchor spacing and how many anchors it keeps below finality.
    pub anchor_every: u64,
    /// See `StateCacheConfig::anchors_kept`.
    pub anchors_kept: u64,
    /// The history window.
    pub history: History,
}

/// Where each cursor may go now ([`Cursors`] with the same meaning). Pure.
pub fn targets(inputs: &Inputs) -> Cursors {
    let finalized = inputs.finalized.saturating_sub(inputs.margin);
    let blocks = match inputs.history {
        History::Full => 0,
        History::Blocks(window) => inputs.head.saturating_sub(window).min(finalized),
    };
    let undo = match inputs.anchored {
        Some(upper) => upper.min(finalized).saturating_add(1),
        None => 0,
    };
    let every = inputs.anchor_every.max(1);
    let low = finalized.saturating_sub(inputs.anchors_kept.saturating_mul(every));
    let anchor_floor = low.saturating_sub(low.checked_rem(every).unwrap_or(0));
    Cursors {
        blocks,
        undo,
        state: finalized,
        anchor_state: anchor_floor,
        header_slot: inputs.finalized_slot,
    }
}

/// What one step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Step {
    /// Records deleted.
    pub deleted: u64,
    /// Whether every cursor has reached its target (nothing left to do now).
    pub done: bool,
}

/// The serving floor and the chain's heights, shared between the chain and its pruner.
#[derive(Debug, Default)]
pub struct Shared {
    /// Heights below this (but genesis) may be pruned: not served.
    floor: AtomicU64,
    head: AtomicU64,
    finalized: AtomicU64,
    /// The background pruner's Linux thread id (0 when none runs).
    pruner_tid: AtomicI32,
}

impl Drop for Shared {
    /// The chain is gone: a background pruner at `SCHED_IDLE` goes back to normal priority, so
    /// that on a busy machine the step it may be in (holding the store, and with it sled's lock
    /// on the directory) ends at once instead of when idle CPU time comes, and a restart
    /// reopens the store without waiting for it.
    fn drop(&mut self) {
        let tid = *self.pruner_tid.get_mut();
        if tid != 0 {
            crate::thread_priority::raise_to_normal(tid);
        }
    }
}

impl Shared {
    pub(super) fn new(floor: u64) -> Arc<Self> {
        Arc::new(Self {
            floor: AtomicU64::new(floor),
            head: AtomicU64::new(0),
            finalized: AtomicU64::new(0),
            pruner_tid: AtomicI32::new(0),
        })
    }

    /// The serving floor.
    pub(super) fn floor(&self) -> u64 {
        self.floor.load(Ordering::SeqCst)
    }

    pub(super) fn set_heights(&self, head: u64, finalized: u64) {
        self.head.store(head, Ordering::Relaxed);
        self.finalized.store(finalized, Ordering::Relaxed);
    }
}

/// Prunes one chain's store; see the module docs.
///
/// It holds the chain's store and state cache only while a step runs, so a stopped node's
/// database closes at once, not when the pruner next wakes.
pub struct Pruner {
    store: Weak<dyn KvStore>,
    shared: Weak<Shared>,
    states: Weak<StateCache>,
    config: StateCacheConfig,
    history: History,
    max_deposits: u16,
    /// See [`Inputs::margin`].
    margin: u64,
    /// The checkpoint height the chain started from (nothing lies between genesis and it).
    base: u64,
}

/// Heights of each kind one background step deletes at most. Small because sled applies a
/// batch under its one process-wide write lock, which stalls import's reads and writes for as
/// long as the batch takes: 16 heights are ~100–200 deletions, well under a millisecond, where
/// 256 held import up for several (`modnode bench prune`).
pub const BATCH_HEIGHTS: u64 = 16;

/// Pause between background steps, so import and serving get the store in between (at 16
/// heights a step, up to ~1,600 heights a second: far more than blocks arrive).
const BETWEEN_BATCHES: Duration = Duration::from_millis(10);

/// How often an idle background pruner looks for new work.
const IDLE_POLL: Duration = Duration::from_millis(500);

impl Pruner {
    pub(super) fn new(
        store: Arc<dyn KvStore>,
        shared: &Arc<Shared>,
        states: Arc<StateCache>,
        history: History,
        max_deposits: u16,
        margin: u64,
        base: u64,
    ) -> Self {
        let config = states.config();
        Self {
            store: Arc::downgrade(&store),
            shared: Arc::downgrade(shared),
            states: Arc::downgrade(&states),
            config,
            history,
            max_deposits,
            margin,
            base,
        }
    }

    /// The planner's view of the chain now; `None` once the chain is gone.
    fn inputs(&self, store: &dyn KvStore) -> Result<Option<Inputs>, StoreError> {
        let Some(shared) = self.shared.upgrade() else {
            return Ok(None);
        };
        let head = shared.head.load(Ordering::Relaxed);
        let finalized = shared.finalized.load(Ordering::Relaxed);
        let finalized_slot = match canonical(store, finalized.saturating_sub(self.margin))? {
            Some(hash) => self.block(store, &hash)?.map_or(0, |b| b.header.slot),
            None => 0,
        };
        let every = self.config.anchor_every.max(1);
        let mut last = None;
        store
            .tree(crate::state_cache::anchors::TREE)?
            .scan_prefix(&[], &mut |key, _| {
                last = <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes);
                Ok(())
            })?;
        Ok(Some(Inputs {
            head,
            finalized,
            margin: self.margin,
            finalized_slot,
            anchored: last.and_then(|low| low.checked_add(every)),
            anchor_every: every,
            anchors_kept: self.config.anchors_kept,
            history: self.history,
        }))
    }

    fn block(&self, store: &dyn KvStore, hash: &BlockHash) -> Result<Option<Block>, StoreError> {
        store
            .get(&keys::block(hash))?
            .map(|bytes| {
                Block::decode(&bytes, self.max_deposits)
                    .map_err(|e| StoreError::Corrupt(format!("block {}: {e}", hash)))
            })
            .transpose()
    }

    /// One bounded, atomic batch: at most `max_heights` heights (slots, side blocks) of each
    /// kind, and the cursors it reached.
    pub fn step(&self, max_heights: u64) -> Result<Step, StoreError> {
        let gone = Step {
            deleted: 0,
            done: true,
        };
        let Some(store) = self.store.upgrade() else {
            return Ok(gone);
        };
        let store = store.as_ref();
        let Some(inputs) = self.inputs(store)? else {
            return Ok(gone);
        };
        let target = targets(&inputs);
        let from = Cursors::load(store)?;
        let mut to = from;
        let mut batch = WriteBatch::new();
        let first = self.base.max(1);
        let span = |cursor: u64, target: u64| {
            let start = cursor.max(first);
            start..target.min(start.saturating_add(max_heights)).max(start)
        };

        // Blocks and everything at their heights.
        let blocks = span(from.blocks, target.blocks);
        for height in blocks.clone() {
            if let Some(hash) = canonical(store, height)? {
                batch.delete(keys::block(&hash));
                batch.delete(keys::undo(&hash));
                batch.delete(keys::eth1(&hash));
                batch.delete(keys::schedule(&hash));
                batch.delete(keys::pending(&hash));
                batch.delete(keys::height(height));
            }
        }
        to.blocks = to.blocks.max(blocks.end);
        let limit = usize::try_from(max_heights).unwrap_or(usize::MAX);
        let mut side_left = false;
        if to.blocks > 0 {
            let mut seen = 0usize;
            store.scan_range(
                &keys::side_block(0, &BlockHash::default()),
                &keys::side_block(to.blocks, &BlockHash::default()),
                limit,
                &mut |key, _| {
                    seen = seen.saturating_add(1);
                    if let Some(hash) = key
                        .get(9..)
                        .and_then(|h| <[u8; 32]>::try_from(h).ok())
                        .map(BlockHash::new)
                    {
                        batch.delete(keys::block(&hash));
                    }
                    batch.delete(key.to_vec());
                    Ok(())
                },
            )?;
            side_left = seen >= limit;
        }

        let undo = span(from.undo.max(to.blocks), target.undo);
        for height in undo.clone() {
            if let Some(hash) = canonical(store, height)? {
                batch.delete(keys::undo(&hash));
            }
        }
        to.undo = to.undo.max(undo.end);

        let every = inputs.anchor_every;
        let state = span(from.state.max(to.blocks), target.state);
        for height in state.clone() {
            if height.checked_rem(every) != Some(0)
                && let Some(hash) = canonical(store, height)?
            {
                batch.delete(keys::eth1(&hash));
                batch.delete(keys::schedule(&hash));
                batch.delete(keys::pending(&hash));
            }
        }
        to.state = to.state.max(state.end);

        let anchors = span(from.anchor_state.max(to.blocks), target.anchor_state);
        let mut height = anchors.start.div_ceil(every).saturating_mul(every);
        while height < anchors.end {
            if let Some(hash) = canonical(store, height)? {
                batch.delete(keys::eth1(&hash));
                batch.delete(keys::schedule(&hash));
                batch.delete(keys::pending(&hash));
            }
            height = height.saturating_add(every);
        }
        to.anchor_state = to.anchor_state.max(anchors.end);

        let mut headers_left = false;
        if from.header_slot < target.header_slot {
            let start = [keys::FIRST_HEADER_PREFIX, &from.header_slot.to_be_bytes()].concat();
            let end = [keys::FIRST_HEADER_PREFIX, &target.header_slot.to_be_bytes()].concat();
            let mut last = None;
            let mut seen = 0usize;
            store.scan_range(&start, &end, limit, &mut |key, _| {
                seen = seen.saturating_add(1);
                last = key
                    .get(1..9)
                    .and_then(|s| <[u8; 8]>::try_from(s).ok())
                    .map(u64::from_be_bytes);
                batch.delete(key.to_vec());
                Ok(())
            })?;
            headers_left = seen >= limit;
            // A full batch may stop inside a slot (several authorities' records): resume at
            // that slot; otherwise everything below the target is gone.
            to.header_slot = match (headers_left, last) {
                (true, Some(slot)) => slot.max(from.header_slot),
                _ => target.header_slot,
            };
        }

        let deleted = u64::try_from(batch.len()).unwrap_or(u64::MAX);
        let done = !side_left
            && !headers_left
            && to.blocks >= target.blocks
            && to.undo >= target.undo
            && to.state >= target.state
            && to.anchor_state >= target.anchor_state;
        if to == from && batch.is_empty() {
            return Ok(Step { deleted, done });
        }
        batch.put(keys::PRUNED, to.encode());
        // Readers treat heights below the new floor as pruned before they are gone.
        if let Some(shared) = self.shared.upgrade() {
            shared
                .floor
                .fetch_max(to.blocks.max(self.base), Ordering::SeqCst);
        }
        // Unflushed: a crash loses the batch whole (its cursors with it) and the next run
        // deletes the same records again; a flush here would only add a disk wait beside
        // import's own, which writes this batch out with its next block.
        store.commit_unflushed(&batch)?;
        Ok(Step { deleted, done })
    }

    /// Runs steps of `max_heights` until nothing is left to prune now (or the chain is gone).
    pub fn run_until_done(&self, max_heights: u64) -> Result<u64, StoreError> {
        let mut deleted = 0u64;
        loop {
            let step = self.step(max_heights)?;
            deleted = deleted.saturating_add(step.deleted);
            if step.done {
                return Ok(deleted);
            }
        }
    }

    /// Runs the pruner on its own `SCHED_IDLE` thread until the chain is dropped: a batch of
    /// [`BATCH_HEIGHTS`] at a time, a pause between batches, none while import is behind.
    pub fn spawn(self) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("pruner".into())
            .spawn(crate::log_span::in_current_span(move || {
                if let Some(shared) = self.shared.upgrade() {
                    shared
                        .pruner_tid
                        .store(crate::thread_priority::this_threads_id(), Ordering::Release);
                }
                crate::runtime::threads::lower_this_threads_priority();
                tracing::info!(history = %self.history, "pruning below finality in the background");
                while self.shared.strong_count() > 0 {
                    if self.states.upgrade().is_some_and(|s| s.is_behind()) {
                        std::thread::sleep(IDLE_POLL);
                        continue;
                    }
                    match self.step(BATCH_HEIGHTS) {
                        Ok(step) if step.done => std::thread::sleep(IDLE_POLL),
                        Ok(_) => std::thread::sleep(BETWEEN_BATCHES),
                        Err(e) => {
                            tracing::warn!(error = %e, "pruning failed; retrying later");
                            std::thread::sleep(IDLE_POLL);
                        }
                    }
                }
                tracing::debug!("pruner stopped");
            }))
    }
}

/// The canonical block hash at `height` in `store`.
fn canonical(store: &dyn KvStore, height: u64) -> Result<Option<BlockHash>, StoreError> {
    store
        .get(&keys::height(height))?
        .map(|bytes| {
            <[u8; 32]>::try_from(bytes.as_slice())
                .map(BlockHash::new)
                .map_err(|_| StoreError::Corrupt(format!("height index {height} is not a hash")))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_the_chains_shared_heights_raises_its_pruner_from_idle_priority() {
        // SAFETY: only reads the scheduling class of a thread of this process.
        let class = |tid: i32| unsafe { libc::sched_getscheduler(tid) };
        let shared = Shared::new(0);
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let pruner = std::thread::spawn(move || {
            crate::runtime::threads::lower_this_threads_priority();
            tid_tx
                .send(crate::thread_priority::this_threads_id())
                .unwrap();
            // Still alive (and inspectable) until the test has looked.
            let _ = done_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        assert_eq!(class(tid), libc::SCHED_IDLE);
        shared.pruner_tid.store(tid, Ordering::Release);
        drop(shared);
        // Root (as on CI) may leave SCHED_IDLE; others only with a nice limit allowing it.
        // SAFETY: geteuid only reads the process's effective user id.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(class(tid), libc::SCHED_OTHER);
        }
        done_tx.send(()).unwrap();
        pruner.join().unwrap();
    }

    fn inputs(head: u64, history: History) -> Inputs {
        Inputs {
            head,
            finalized: head.saturating_sub(32),
            margin: 0,
            finalized_slot: head.saturating_sub(32) * 2,
            anchored: Some(head.saturating_sub(32) / 32 * 32),
            anchor_every: 32,
            anchors_kept: 4,
            history,
        }
    }

    #[test]
    fn blocks_keep_the_window_and_never_reach_above_finality() {
        let t = targets(&inputs(10_000, History::Blocks(1_000)));
        assert_eq!(t.blocks, 9_000);
        // A window shorter than finality still keeps every non-final block.
        let t = targets(&inputs(10_000, History::Blocks(5)));
        assert_eq!(t.blocks, 9_968);
        assert_eq!(targets(&inputs(10_000, History::Full)).blocks, 0);
        assert_eq!(targets(&inputs(10, History::Blocks(1_000))).blocks, 0);
    }

    #[test]
    fn undo_and_state_records_fold_at_finality_but_what_anchors_need() {
        let t = targets(&inputs(10_000, History::Full));
        // Finalized 9,968; the last anchor record spans 9,920..9,952: undo records above it stay.
        assert_eq!(t.undo, 9_953);
        assert_eq!(t.state, 9_968);
        // Four anchors of 32 kept below finality: 9,968 − 128 = 9,840, down to anchor 9,824.
        assert_eq!(t.anchor_state, 9_824);
        assert_eq!(t.header_slot, 9_968 * 2);
        let none = Inputs {
            anchored: None,
            ..inputs(10_000, History::Full)
        };
        assert_eq!(targets(&none).undo, 0);
        // With a margin everything folds that much lower.
        let margin = Inputs {
            margin: 32,
            ..inputs(10_000, History::Blocks(5))
        };
        let t = targets(&margin);
        assert_eq!((t.blocks, t.state, t.undo), (9_936, 9_936, 9_937));
    }

    #[test]
    fn history_parses_full_or_a_count_and_defaults_to_a_day() {
        assert_eq!(History::parse("full"), Ok(History::Full));
        assert_eq!(History::parse("64"), Ok(History::Blocks(64)));
        assert!(History::parse("a day").unwrap_err().contains("\"full\""));
        assert_eq!(History::day_of_slots(2_000), History::Blocks(43_200));
        assert_eq!(History::day_of_slots(12_000), History::Blocks(7_200));
    }

    #[test]
    fn cursors_round_trip_and_refuse_truncation() {
        let c = Cursors {
            blocks: 1,
            undo: 2,
            state: 3,
            anchor_state: 4,
            header_slot: 5,
        };
        let bytes = c.encode();
        assert_eq!(Cursors::decode(&bytes), Some(c));
        for cut in 0..bytes.len() {
            assert_eq!(Cursors::decode(&bytes[..cut]), None);
        }
    }
}

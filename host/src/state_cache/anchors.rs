//! Persisted state anchors: what bounds a replay after a restart.
//!
//! In memory the cache keeps a state every `anchor_every` (K) heights. Those are lost on a
//! restart, so every finalized anchor height B also gets a record in its own keyspace of the
//! node's store (the `state_anchors` sled tree): the registry at B written as what undoes the
//! K canonical blocks above it — the validator count at B and the balance at B of every
//! validator whose balance those blocks changed. At 16 deposits a block that is a few hundred
//! entries whatever the registry's size; the eth1 state and module schedule at B are already
//! stored per block.
//!
//! **Loading** the anchor at B starts from the lowest cached canonical state above it (the
//! head after a restart) and rolls a clone of its registry back by the composed anchor
//! records above B — and by the per-block undo records for heights no record covers yet (the
//! last K blocks below finality and the non-final ones). A rollback copies only the chunks it
//! touches, so the loaded state shares everything else with the state it came from; no block
//! is executed. The result is checked against the stored block's state root. A record that is
//! missing, does not decode or does not name the canonical blocks is skipped for the per-block
//! undo records of its span, and a root that does not match with records is rebuilt from the
//! per-block undo records alone: a bad record costs time, never a wrong state.
//!
//! **Written** off the block's own batch, after the head moves: each height B whose K blocks
//! above are all final gets its record (K small reads and one write per K blocks). Records
//! below the last `anchors_kept` anchors under finality are pruned; states older than that are
//! refused as too old.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{StateCache, StateCacheError};
use crate::consensus::block::{Block, BlockHash};
use crate::state::{RegistryUndo, State};
use crate::store::{KvStore, StoreError, WriteBatch, keys};

/// Name of the anchors' keyspace (sled tree) in the node's store.
pub const TREE: &str = "state_anchors";

/// Version byte of a record's encoding.
const VERSION: u8 = 1;

/// The registry at an anchor height, as what undoes the `anchor_every` blocks above it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    /// The canonical block at the anchor height.
    anchor: BlockHash,
    /// The canonical block `anchor_every` heights above, whose registry `undo` rolls back.
    upper: BlockHash,
    undo: RegistryUndo,
}

impl Record {
    /// `VERSION | anchor | upper | RegistryUndo::encode`.
    fn encode(&self) -> Vec<u8> {
        [
            &[VERSION][..],
            self.anchor.as_bytes(),
            self.upper.as_bytes(),
            &self.undo.encode(),
        ]
        .concat()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let (version, rest) = bytes.split_first()?;
        if *version != VERSION {
            return None;
        }
        let (anchor, rest) = rest.split_first_chunk::<32>()?;
        let (upper, rest) = rest.split_first_chunk::<32>()?;
        Some(Self {
            anchor: BlockHash::new(*anchor),
            upper: BlockHash::new(*upper),
            undo: RegistryUndo::decode(rest)?,
        })
    }
}

/// Undo records composed from the top down: the registry at the lowest height reached.
#[derive(Debug, Default)]
struct Composed {
    validators_before: Option<u32>,
    balances: BTreeMap<u32, u64>,
}

impl Composed {
    /// Adds `undo`, the undo record of the blocks just below those composed so far.
    fn below(&mut self, undo: &RegistryUndo) {
        self.validators_before = Some(undo.validators_before);
        for &(index, balance) in &undo.balances {
            self.balances.insert(index, balance);
        }
    }

    /// The one undo record doing all of it (`None` if nothing was composed).
    fn into_undo(self) -> Option<RegistryUndo> {
        let keep = self.validators_before?;
        Some(RegistryUndo {
            validators_before: keep,
            balances: self
                .balances
                .into_iter()
                .filter(|&(index, _)| index < keep)
                .collect(),
        })
    }
}

/// The anchors' keyspace and what has been written to it.
pub(super) struct Anchors {
    tree: Arc<dyn KvStore>,
    progress: Mutex<Progress>,
    /// The finalized height the head last reported.
    finalized: AtomicU64,
    loaded: AtomicU64,
}

/// What [`Anchors::persist`] has done so far.
#[derive(Debug, Default)]
struct Progress {
    /// Highest anchor height recorded (`None` until read from the tree).
    last: Option<u64>,
    /// The window's floor when records below it were last pruned.
    floor: Option<u64>,
}

fn key(height: u64) -> [u8; 8] {
    height.to_be_bytes()
}

impl Anchors {
    /// The anchors kept in `tree`.
    pub(super) fn new(tree: Arc<dyn KvStore>) -> Self {
        Self {
            tree,
            progress: Mutex::new(Progress::default()),
            finalized: AtomicU64::new(0),
            loaded: AtomicU64::new(0),
        }
    }

    /// Anchors loaded from the store so far.
    pub(super) fn loaded(&self) -> u64 {
        self.loaded.load(Ordering::Relaxed)
    }

    /// The lowest anchor height still kept with the head at `finalized`.
    fn floor(cache: &StateCache, finalized: u64) -> u64 {
        let every = cache.config.anchor_every.max(1);
        let span = cache.config.anchors_kept.saturating_mul(every);
        let low = finalized.saturating_sub(span);
        low.saturating_sub(low.checked_rem(every).unwrap_or(0))
    }

    /// The undo record of canonical block at `height`.
    fn block_undo(cache: &StateCache, height: u64) -> Result<RegistryUndo, StateCacheError> {
        let source = cache.source();
        let hash = source.canonical_hash(height)?;
        let bytes = source.store.get(&keys::undo(&hash))?.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "undo record of block {} at height {height} missing",
                hash
            ))
        })?;
        RegistryUndo::decode(&bytes).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "undo record of block {} at height {height} malformed",
                hash
            ))
            .into()
        })
    }

    /// Records every anchor whose blocks above are final at `finalized` and prunes those below
    /// the kept window. Called after the head moves.
    pub(super) fn persist(
        &self,
        cache: &StateCache,
        finalized: u64,
    ) -> Result<(), StateCacheError> {
        self.finalized.store(finalized, Ordering::Relaxed);
        let every = cache.config.anchor_every.max(1);
        let floor = Self::floor(cache, finalized);
        let mut progress = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = WriteBatch::new();
        // The tree holds at most `anchors_kept` and a few records: scanned when the window
        // moves (every `anchor_every` blocks) or on the first call.
        if progress.floor != Some(floor) {
            let mut stored = Vec::new();
            self.tree.scan_prefix(&[], &mut |key, _| {
                stored.push(key.to_vec());
                Ok(())
            })?;
            let below = key(floor);
            for old in stored.iter().filter(|k| k.as_slice() < below.as_slice()) {
                batch.delete(old.clone());
            }
            if progress.last.is_none() {
                progress.last = stored
                    .last()
                    .and_then(|k| <[u8; 8]>::try_from(k.as_slice()).ok())
                    .map(u64::from_be_bytes);
            }
            progress.floor = Some(floor);
        }
        // A chain started from a checkpoint has no blocks (nor undo records) between genesis
        // and its base: its first anchor is the first anchor height at or above the base.
        let base = super::records::base_height(cache.source().store.as_ref())?;
        // Saturates only for a base within `every` of u64::MAX: no anchor, as intended.
        let first = base.div_ceil(every).saturating_mul(every);
        let mut next = match progress.last {
            Some(last) => last.saturating_add(every).max(floor),
            None => floor,
        }
        .max(first);
        let mut last = progress.last;
        while let Some(top) = next.checked_add(every)
            && top <= finalized
        {
            let mut composed = Composed::default();
            for height in (next.saturating_add(1)..=top).rev() {
                composed.below(&Self::block_undo(cache, height)?);
            }
            let Some(undo) = composed.into_undo() else {
                break;
            };
            let record = Record {
                anchor: cache.source().canonical_hash(next)?,
                upper: cache.source().canonical_hash(top)?,
                undo,
            };
            batch.put(key(next), record.encode());
            last = Some(next);
            next = top;
        }
        if !batch.is_empty() {
            self.tree.commit(&batch)?;
        }
        progress.last = last;
        Ok(())
    }

    /// The state after `block`, the canonical block at anchor height `height`, rebuilt from the
    /// persisted anchors (see the module docs).
    pub(super) fn load(&self, cache: &StateCache, block: &Block) -> Result<State, StateCacheError> {
        let height = block.header.height;
        let hash = block.hash();
        let finalized = self.finalized.load(Ordering::Relaxed);
        if height < Self::floor(cache, finalized) {
            return Err(StateCacheError::TooOld {
                hash,
                limit: cache
                    .config
                    .anchors_kept
                    .saturating_mul(cache.config.anchor_every),
            });
        }
        let Some(base) = cache.canonical_above(height)? else {
            return Err(self.error(height, "no cached canonical state above it".into()));
        };
        let with_records = self.rebuild(cache, &base, block, true);
        let state = match with_records {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(height, error = %e, "state anchor unusable; rebuilding it from per-block undo records");
                self.rebuild(cache, &base, block, false)?
            }
        };
        self.loaded.fetch_add(1, Ordering::Relaxed);
        Ok(state)
    }

    fn error(&self, height: u64, reason: String) -> StateCacheError {
        StateCacheError::Anchor {
            height,
            location: self.tree.location(),
            reason,
        }
    }

    /// Rolls `base` back to `block` by the anchor records (if `records`) and per-block undo
    /// records between them, and checks the root.
    fn rebuild(
        &self,
        cache: &StateCache,
        base: &State,
        block: &Block,
        records: bool,
    ) -> Result<State, StateCacheError> {
        let height = block.header.height;
        let every = cache.config.anchor_every.max(1);
        let mut composed = Composed::default();
        let mut cursor = base.height();
        while cursor > height {
            let low = cursor.checked_sub(every).filter(|low| *low >= height);
            if records
                && cursor.checked_rem(every) == Some(0)
                && let Some(low) = low
                && let Some(record) = self.record(cache, low, cursor)
            {
                composed.below(&record.undo);
                cursor = low;
                continue;
            }
            composed.below(&Self::block_undo(cache, cursor)?);
            cursor = cursor.saturating_sub(1);
        }
        let mut registry = base.registry().clone();
        if let Some(undo) = composed.into_undo() {
            registry
                .rollback(&undo)
                .map_err(|e| self.error(height, format!("rolling back: {e}")))?;
        }
        let source = cache.source();
        let hash = block.hash();
        let eth1 = super::records::load_eth1(source.store.as_ref(), &hash)?;
        let schedule = super::records::load_schedule(source.store.as_ref(), &hash)?;
        // deposits@3's queue there: the base's rolled back to the extent stored for the block.
        let extent = super::records::load_pending_extent(source.store.as_ref(), &hash)?;
        let pending = super::records::pending_rolled_back(base.pending(), extent.as_ref())
            .map_err(|e| self.error(height, format!("rolling the queue back: {e}")))?;
        let state = State::with_pending(hash, height, registry, eth1, schedule, pending);
        if state.root() != block.header.state_root {
            return Err(self.error(
                height,
                format!(
                    "rebuilt state root {} but block {} commits to {} (records used: {records})",
                    state.root(),
                    hash,
                    block.header.state_root
                ),
            ));
        }
        Ok(state)
    }

    /// The record at `low` if it is present, decodes and spans the canonical blocks at `low`
    /// and `upper`; a bad one is reported and skipped.
    fn record(&self, cache: &StateCache, low: u64, upper: u64) -> Option<Record> {
        let bytes = match self.tree.get(&key(low)) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(height = low, error = %e, "state anchor unreadable");
                return None;
            }
        };
        let source = cache.source();
        let canonical = (
            source.canonical_hash(low).ok(),
            source.canonical_hash(upper).ok(),
        );
        match Record::decode(&bytes) {
            Some(record) if (Some(record.anchor), Some(record.upper)) == canonical => Some(record),
            found => {
                let e = self.error(
                    low,
                    if found.is_some() {
                        "names blocks that are not canonical".into()
                    } else {
                        "does not decode".into()
                    },
                );
                tracing::warn!(error = %e, "skipping a state anchor");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_every_truncation() {
        let record = Record {
            anchor: BlockHash::new([1; 32]),
            upper: BlockHash::new([2; 32]),
            undo: RegistryUndo {
                validators_before: 9,
                balances: vec![(3, 4)],
            },
        };
        let bytes = record.encode();
        assert_eq!(Record::decode(&bytes), Some(record));
        for cut in 0..bytes.len() {
            assert_eq!(Record::decode(&bytes[..cut]), None, "decoded at {cut}");
        }
        let mut other = bytes;
        other[0] = VERSION + 1;
        assert_eq!(Record::decode(&other), None);
    }

    #[test]
    fn composing_keeps_the_lowest_blocks_balances_and_count() {
        let mut composed = Composed::default();
        // Block 3 changed validator 1 (was 30) and added 10..12; block 2 changed 1 (was 20)
        // and 5 (was 50) and added 8..10.
        composed.below(&RegistryUndo {
            validators_before: 10,
            balances: vec![(1, 30), (9, 90)],
        });
        composed.below(&RegistryUndo {
            validators_before: 8,
            balances: vec![(1, 20), (5, 50)],
        });
        let undo = composed.into_undo().unwrap();
        assert_eq!(undo.validators_before, 8);
        assert_eq!(undo.balances, vec![(1, 20), (5, 50)]);
        assert_eq!(Composed::default().into_undo(), None);
    }
}

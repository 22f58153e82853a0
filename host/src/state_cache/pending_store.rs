//! deposits@3's pending-deposit queue in the store, written with each block's atomic batch.
//!
//! Two kinds of records:
//! - one entry record per deposit ever queued on the canonical chain, by its absolute position
//!   (`keys::pending_entry`): a block writes only the entries it pushed, so a block costs
//!   O(its deposits), never O(the queue). Entries are append-only: draining moves the front
//!   offset and rewrites nothing. Revert deletes the entries the reverted block pushed.
//! - one extent record per block after which the chain has a queue (`keys::pending`): entries
//!   ever pushed, the front offset and `deposit_balance_to_consume` (24 bytes). It is also the
//!   undo record: the queue after a block rolls back to any ancestor's queue on the same chain
//!   by that ancestor's extent ([`PendingQueue::rollback`]). No record: no queue (a state
//!   before the chain ran deposits@3).
//!
//! Opening reads the head's extent and its entries (every entry ever pushed: drained entries
//! keep their leaves in the queue's tree, see `state/pending.rs`).

use crate::consensus::block::BlockHash;
use crate::state::{PendingDelta, PendingDeposit, PendingQueue, PendingUndo};
use crate::store::{KvStore, StoreError, WriteBatch, keys};

/// Bytes of an extent record.
const EXTENT_BYTES: usize = 24;

/// The extent record of `queue`: entries ever pushed, front offset, balance to consume (LE).
pub(crate) fn encode_extent(extent: &PendingUndo) -> Vec<u8> {
    [
        extent.total.to_le_bytes(),
        extent.start.to_le_bytes(),
        extent.balance_to_consume.to_le_bytes(),
    ]
    .concat()
}

/// Decodes [`encode_extent`]'s bytes.
pub(crate) fn decode_extent(bytes: &[u8]) -> Option<PendingUndo> {
    if bytes.len() != EXTENT_BYTES {
        return None;
    }
    let (total, rest) = bytes.split_first_chunk::<8>()?;
    let (start, rest) = rest.split_first_chunk::<8>()?;
    let (balance, _) = rest.split_first_chunk::<8>()?;
    Some(PendingUndo {
        total: u64::from_le_bytes(*total),
        start: u64::from_le_bytes(*start),
        balance_to_consume: u64::from_le_bytes(*balance),
    })
}

/// Puts the queue after block `hash` into `batch`: its extent, and the entries it holds
/// beyond `before` (the parent's queue; `None`: none), O(pushed). `after` of `None` writes
/// nothing (the state has no queue).
pub(crate) fn put_block(
    batch: &mut WriteBatch,
    hash: &BlockHash,
    before: Option<&PendingQueue>,
    after: Option<&PendingQueue>,
) {
    let Some(after) = after else {
        return;
    };
    let from = before.map_or(0, PendingQueue::total);
    for index in from..after.total() {
        if let Some(entry) = after.entry(index) {
            batch.put(keys::pending_entry(index), entry.encode().to_vec());
        }
    }
    batch.put(keys::pending(hash), encode_extent(&after.undo_for()));
}

/// Puts into `batch` the deletion of the queue records block `hash` wrote on top of its
/// parent's queue `parent` (`None`: the parent had none).
pub(crate) fn put_revert(
    batch: &mut WriteBatch,
    hash: &BlockHash,
    current: Option<&PendingQueue>,
    parent: Option<&PendingUndo>,
) {
    let from = parent.map_or(0, |p| p.total);
    let to = current.map_or(0, PendingQueue::total);
    for index in from..to {
        batch.delete(keys::pending_entry(index));
    }
    batch.delete(keys::pending(hash));
}

/// The extent stored after block `hash`, if the state after it has a queue.
pub(crate) fn load_extent(
    store: &dyn KvStore,
    hash: &BlockHash,
) -> Result<Option<PendingUndo>, StoreError> {
    let Some(bytes) = store.get(&keys::pending(hash))? else {
        return Ok(None);
    };
    decode_extent(&bytes).map(Some).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "pending-deposit extent of block {} malformed",
            hash
        ))
    })
}

/// The queue after canonical block `hash` (`None`: it has none), read from the store.
pub(crate) fn load(
    store: &dyn KvStore,
    hash: &BlockHash,
) -> Result<Option<PendingQueue>, StoreError> {
    let Some(extent) = load_extent(store, hash)? else {
        return Ok(None);
    };
    let corrupt = |reason: String| StoreError::Corrupt(format!("pending-deposit queue: {reason}"));
    let mut pushed = Vec::new();
    for index in 0..extent.total {
        let bytes = store
            .get(&keys::pending_entry(index))?
            .ok_or_else(|| corrupt(format!("entry {index} missing")))?;
        pushed.push(
            PendingDeposit::decode(&bytes)
                .ok_or_else(|| corrupt(format!("entry {index} malformed")))?,
        );
    }
    let mut queue = PendingQueue::new();
    queue
        .apply(&PendingDelta {
            pushed,
            dropped: extent.start,
            balance_to_consume: Some(extent.balance_to_consume),
        })
        .map_err(|e| corrupt(e.to_string()))?;
    Ok(Some(queue))
}

/// The queue after the ancestor whose extent is `extent` (`None`: the ancestor had none),
/// rolled back from `later` (a later queue of the same chain): O(1) chunk-table work.
pub(crate) fn rolled_back(
    later: Option<&PendingQueue>,
    extent: Option<&PendingUndo>,
) -> Result<Option<PendingQueue>, crate::state::PendingError> {
    let Some(extent) = extent else {
        return Ok(None);
    };
    let mut queue = later.cloned().unwrap_or_default();
    queue.rollback(extent)?;
    Ok(Some(queue))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_round_trip_and_refuse_other_lengths() {
        let extent = PendingUndo {
            total: 7,
            start: 3,
            balance_to_consume: 9,
        };
        let bytes = encode_extent(&extent);
        assert_eq!(decode_extent(&bytes), Some(extent));
        assert_eq!(decode_extent(&bytes[..23]), None);
        assert_eq!(decode_extent(&[bytes.clone(), vec![0]].concat()), None);
    }
}

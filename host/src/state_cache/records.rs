//! The per-block state records the chain writes beside each block and the cache reads back
//! to rebuild a state: the eth1 state, the module schedule, deposits@3's queue
//! ([`pending_store`](super::pending_store)) and the height the chain started from.

use crate::consensus::block::BlockHash;
use crate::consensus::eth1::Eth1State;
use crate::state::{PendingError, PendingQueue, PendingUndo, Schedule};
use crate::store::{KvStore, StoreError, keys};

use super::pending_store;

/// The eth1 state stored after block `hash`.
pub fn load_eth1(store: &dyn KvStore, hash: &BlockHash) -> Result<Eth1State, StoreError> {
    let bytes = store
        .get(&keys::eth1(hash))?
        .ok_or_else(|| StoreError::Corrupt(format!("eth1 state of block {} missing", hash)))?;
    Eth1State::decode(&bytes)
        .ok_or_else(|| StoreError::Corrupt(format!("eth1 state of block {} malformed", hash)))
}

/// deposits@3's queue extent stored after block `hash` (`None`: that state has no queue).
pub fn load_pending_extent(
    store: &dyn KvStore,
    hash: &BlockHash,
) -> Result<Option<PendingUndo>, StoreError> {
    pending_store::load_extent(store, hash)
}

/// The queue of an ancestor with extent `extent`, rolled back from a later queue of its chain.
pub fn pending_rolled_back(
    later: Option<&PendingQueue>,
    extent: Option<&PendingUndo>,
) -> Result<Option<PendingQueue>, PendingError> {
    pending_store::rolled_back(later, extent)
}

/// The module schedule stored after block `hash`.
pub fn load_schedule(store: &dyn KvStore, hash: &BlockHash) -> Result<Schedule, StoreError> {
    let bytes = store
        .get(&keys::schedule(hash))?
        .ok_or_else(|| StoreError::Corrupt(format!("module schedule of block {} missing", hash)))?;
    Schedule::decode(&bytes)
        .ok_or_else(|| StoreError::Corrupt(format!("module schedule of block {} malformed", hash)))
}

/// The height a chain in `store` was started from: the checkpoint's, or 0 for a chain that
/// started at genesis.
pub fn base_height(store: &dyn KvStore) -> Result<u64, StoreError> {
    match store.get(keys::BASE)? {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_be_bytes)
            .map_err(|_| {
                StoreError::Corrupt(format!(
                    "the chain's base height is {} bytes, expected 8",
                    bytes.len()
                ))
            }),
    }
}

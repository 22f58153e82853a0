//! Starting a chain from a restored checkpoint instead of genesis: the store is initialised
//! with the state after block `H` (registry, eth1 state, module schedule and, once the chain
//! has run deposits@3, the pending-deposit queue), block `H` itself as the head, and the
//! genesis block, so [`Chain::open`](super::Chain::open) opens it like any
//! other store and range sync continues from `H + 1`. Every later block is imported exactly like
//! any import, against the restored state root. Heights between genesis and `H` are not
//! stored: this node cannot serve them. There is no undo record for block `H` either, so `H`
//! must never be reverted: checkpoints are made, offered and accepted only at finalized heights
//! (`checkpoint::checkpoint_height`, `CheckpointServer::list`, `checkpoint::final_offers`), and
//! every reorganisation the restored node follows starts above `H`.

use super::block::{Block, BlockHash, StateRoot};
use super::errors::OpenError;
use super::genesis::Genesis;
use super::{Head, STORE_FORMAT};
use crate::consensus::shell::check_seal;
use crate::state::{Eth1State, PendingQueue, Registry, Schedule, state_root_with};
use crate::store::{KvStore, StoreError, WriteBatch, keys};

/// What a chain starts from: block `H` and the state after it, as a restore proved it.
#[derive(Debug)]
pub struct CheckpointStart<'a> {
    /// Block `H`.
    pub block: &'a Block,
    /// The registry after it.
    pub registry: &'a Registry,
    /// The eth1 state after it.
    pub eth1: &'a Eth1State,
    /// The module schedule after it.
    pub schedule: &'a Schedule,
    /// deposits@3's pending-deposit queue after it (`None`: the state has none).
    pub pending: Option<&'a PendingQueue>,
}

/// Queue entries written per batch before the final one.
const PENDING_ENTRIES_PER_BATCH: u64 = 16 * 1024;

/// Initialises an empty `store` from `start`: the registry's records and the queue's entries
/// (every entry ever pushed, as `pending_store` keeps them) in bounded batches, then the
/// blocks, the queue's extent, head and FORMAT in one final batch (see `registry_store`). Refuses a store that
/// already holds a chain, a block whose header does not commit to the state's root, and (on a
/// chain with authorities) a block its slot's authority did not seal — so the restored state is
/// anchored to a header an authority signed, not only to the peers that offered the checkpoint.
pub fn init_from_checkpoint(
    store: &dyn KvStore,
    genesis: &Genesis,
    start: &CheckpointStart<'_>,
) -> Result<Head, OpenError> {
    if store.get(keys::FORMAT)?.is_some() {
        return Err(OpenError::Corrupt(
            "the store already holds a chain; a checkpoint can only start an empty one".into(),
        ));
    }
    let block = start.block;
    let hash = block.hash();
    let pending_root = start.pending.map(PendingQueue::root);
    let root = StateRoot::new(state_root_with(
        &start.registry.root(),
        start.eth1,
        start.schedule,
        pending_root.as_ref(),
    ));
    if root != block.header.state_root {
        return Err(OpenError::Corrupt(format!(
            "the restored state root {} is not the one block {hash} commits to ({})",
            root, block.header.state_root
        )));
    }
    if block.body.root() != block.header.body_root {
        return Err(OpenError::Corrupt(format!(
            "block {hash}'s body does not match its header"
        )));
    }
    let genesis_registry = genesis.registry()?;
    let genesis_block = genesis.block(&genesis_registry);
    let genesis_hash = genesis_block.hash();
    if block.header.height == 0 {
        return Err(OpenError::Corrupt(
            "a checkpoint at height 0 is the genesis; start from it instead".into(),
        ));
    }
    check_seal(genesis, &genesis_hash, block, hash)
        .map_err(|e| OpenError::Corrupt(format!("checkpoint block: {e}")))?;
    drop(genesis_registry);
    super::registry_store::write_registry(
        store,
        start.registry,
        super::registry_store::VALIDATORS_PER_BATCH,
    )?;
    if let Some(queue) = start.pending {
        write_pending_entries(store, queue)?;
    }
    let mut batch = WriteBatch::new();
    if let Some(queue) = start.pending {
        batch.put(
            keys::pending(&hash),
            crate::state_cache::pending_store::encode_extent(&queue.undo_for()),
        );
    }
    let head = Head {
        hash,
        height: block.header.height,
        slot: block.header.slot,
        state_root: root,
    };
    put_block(&mut batch, &genesis_block, &genesis_hash);
    put_block(&mut batch, block, &hash);
    batch.put(keys::eth1(&hash), start.eth1.encode());
    batch.put(keys::schedule(&hash), start.schedule.encode());
    batch.put(keys::HEAD, head.encode());
    batch.put(keys::GENESIS, genesis_hash.as_bytes().to_vec());
    batch.put(keys::BASE, block.header.height.to_be_bytes().to_vec());
    batch.put(keys::FORMAT, STORE_FORMAT.to_le_bytes().to_vec());
    store.commit(&batch)?;
    Ok(head)
}

/// Writes every entry `queue` ever pushed under its index, in bounded batches (before the final
/// batch: an interrupted start leaves them to be overwritten by the next attempt).
fn write_pending_entries(store: &dyn KvStore, queue: &PendingQueue) -> Result<(), StoreError> {
    let mut batch = WriteBatch::new();
    let mut in_batch = 0u64;
    for index in 0..queue.total() {
        let entry = queue.entry(index).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "the restored pending-deposit queue lacks entry {index} of {}",
                queue.total()
            ))
        })?;
        batch.put(keys::pending_entry(index), entry.encode().to_vec());
        in_batch = in_batch.saturating_add(1);
        if in_batch >= PENDING_ENTRIES_PER_BATCH {
            store.commit(&batch)?;
            batch = WriteBatch::new();
            in_batch = 0;
        }
    }
    if in_batch > 0 {
        store.commit(&batch)?;
    }
    Ok(())
}

fn put_block(batch: &mut WriteBatch, block: &Block, hash: &BlockHash) {
    batch.put(keys::block(hash), block.encode());
    batch.put(keys::height(block.header.height), hash.as_bytes().to_vec());
}

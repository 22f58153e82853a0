//! Opening the chain: an empty store initialised from genesis (the registry's records in
//! bounded batches first, `FORMAT` with the head in the final batch), an older store format
//! migrated, and a stored head checked against its block and state root.

use super::*;

/// The slot and proposer of the canonical block at `height`; `None` where none is stored
/// (below a checkpoint's base or the pruned floor).
fn slot_and_proposer_at(
    store: &dyn KvStore,
    genesis: &Genesis,
    height: u64,
) -> Result<Option<(u64, u32)>, OpenError> {
    let Some(hash) = store.get(&keys::height(height))? else {
        return Ok(None);
    };
    let hash = <[u8; 32]>::try_from(hash.as_slice())
        .map(BlockHash::new)
        .map_err(|_| {
            OpenError::Corrupt(format!(
                "canonical hash record at height {height} is not 32 bytes"
            ))
        })?;
    let Some(block) = store.get(&keys::block(&hash))? else {
        return Ok(None);
    };
    let block = Block::decode(&block, genesis.max_deposits_per_block)
        .map_err(|e| OpenError::Corrupt(format!("block {} at height {height}: {e}", hash)))?;
    Ok(Some((block.header.slot, block.header.proposer)))
}

impl Chain {
    /// Opens the chain in `store`, initialising it from `genesis` if the store is empty, and
    /// checking head, head block and state root otherwise.
    pub fn open(
        store: Arc<dyn KvStore>,
        genesis: Genesis,
        deposits: DepositEngine,
    ) -> Result<Self, OpenError> {
        Self::open_batched(
            store,
            genesis,
            deposits,
            registry_store::VALIDATORS_PER_BATCH,
        )
    }

    /// [`Chain::open`], showing a long registry format migration as `display` says (a bar
    /// on a terminal, log lines otherwise).
    pub fn open_showing_progress(
        store: Arc<dyn KvStore>,
        genesis: Genesis,
        deposits: DepositEngine,
        display: ProgressDisplay,
    ) -> Result<Self, OpenError> {
        Self::open_configured(
            store,
            genesis,
            deposits,
            registry_store::VALIDATORS_PER_BATCH,
            display,
        )
    }

    /// [`Chain::open`], writing a genesis registry `per_batch` validators per batch.
    pub(super) fn open_batched(
        store: Arc<dyn KvStore>,
        genesis: Genesis,
        deposits: DepositEngine,
        per_batch: usize,
    ) -> Result<Self, OpenError> {
        Self::open_configured(store, genesis, deposits, per_batch, ProgressDisplay::Log)
    }

    /// [`Chain::open_batched`], a migration shown as `display` says.
    fn open_configured(
        store: Arc<dyn KvStore>,
        genesis: Genesis,
        deposits: DepositEngine,
        per_batch: usize,
        display: ProgressDisplay,
    ) -> Result<Self, OpenError> {
        let registry_genesis = genesis.registry()?;
        let eth1_genesis = genesis.eth1_state();
        let schedule_genesis = genesis.schedule();
        let genesis_block = genesis.block(&registry_genesis);
        let genesis_hash = genesis_block.hash();
        match store.get(keys::FORMAT)? {
            None => {
                registry_store::write_registry(store.as_ref(), &registry_genesis, per_batch)?;
                let mut batch = WriteBatch::new();
                let head = Head {
                    hash: genesis_hash,
                    height: 0,
                    slot: 0,
                    state_root: genesis_block.header.state_root,
                };
                batch.put(keys::block(&genesis_hash), genesis_block.encode());
                batch.put(keys::eth1(&genesis_hash), eth1_genesis.encode());
                batch.put(keys::schedule(&genesis_hash), schedule_genesis.encode());
                batch.put(keys::height(0), genesis_hash.as_bytes().to_vec());
                batch.put(keys::HEAD, head.encode());
                batch.put(keys::GENESIS, genesis_hash.as_bytes().to_vec());
                batch.put(keys::FORMAT, STORE_FORMAT.to_le_bytes().to_vec());
                store.commit(&batch)?;
                let state = State::new(
                    genesis_hash,
                    0,
                    registry_genesis,
                    eth1_genesis,
                    schedule_genesis,
                );
                let states = new_state_cache(&store, &genesis, &deposits, state);
                let finality =
                    finality::Finality::fresh(genesis.authorities.len(), genesis.finality_depth);
                let chain = Self {
                    store,
                    genesis,
                    genesis_hash,
                    head,
                    deposits,
                    modules: None,
                    proposals: Vec::new(),
                    states,
                    invalid: Default::default(),
                    equivocations: Default::default(),
                    executed: 0,
                    finality,
                    pruning: prune::Shared::new(0),
                    base: 0,
                    preverifier: None,
                };
                chain.publish_head(chain.head_state());
                Ok(chain)
            }
            Some(format) => {
                let format = <[u8; 4]>::try_from(format.as_slice())
                    .map(u32::from_le_bytes)
                    .map_err(|_| {
                        OpenError::Corrupt(format!(
                            "the store format record {format:02x?} is not 4 bytes"
                        ))
                    })?;
                let legacy = registry_store::legacy::PER_VALIDATOR_FORMAT;
                if format != STORE_FORMAT && format != legacy && format != BEFORE_VALUE_LOG {
                    return Err(OpenError::Corrupt(format!(
                        "store format {format}: this node reads format {STORE_FORMAT} and migrates \
                         format {legacy} and format {BEFORE_VALUE_LOG}"
                    )));
                }
                let stored_genesis = store
                    .get(keys::GENESIS)?
                    .ok_or_else(|| OpenError::Corrupt("genesis hash missing".into()))?;
                if stored_genesis.as_slice() != genesis_hash.as_bytes() {
                    return Err(OpenError::GenesisMismatch {
                        stored: hex::encode(&stored_genesis),
                        configured: genesis_hash,
                    });
                }
                drop(registry_genesis);
                drop(eth1_genesis);
                drop(schedule_genesis);
                if format == legacy {
                    registry_store::legacy::migrate(
                        store.as_ref(),
                        STORE_FORMAT,
                        per_batch,
                        display,
                    )?;
                } else {
                    // Per-validator records a migration was interrupted before deleting.
                    registry_store::legacy::delete_records(store.as_ref(), per_batch)?;
                    if format == BEFORE_VALUE_LOG {
                        let mut batch = WriteBatch::new();
                        batch.put(keys::FORMAT, STORE_FORMAT.to_le_bytes().to_vec());
                        store.commit(&batch)?;
                    }
                }
                let head_bytes = store
                    .get(keys::HEAD)?
                    .ok_or_else(|| OpenError::Corrupt("head record missing".into()))?;
                let head = Head::decode(&head_bytes)
                    .ok_or_else(|| OpenError::Corrupt("head record malformed".into()))?;
                let head_block = store.get(&keys::block(&head.hash))?.ok_or_else(|| {
                    OpenError::Corrupt(format!("head block {} missing", head.hash))
                })?;
                let head_block = Block::decode(&head_block, genesis.max_deposits_per_block)
                    .map_err(|e| OpenError::Corrupt(format!("head block {}: {e}", head.hash)))?;
                if head_block.hash() != head.hash || head_block.header.state_root != head.state_root
                {
                    return Err(OpenError::Corrupt(format!(
                        "head record and head block {} disagree",
                        head.hash
                    )));
                }
                let registry = registry_store::load_registry(store.as_ref())?;
                let eth1 = load_eth1(store.as_ref(), &head.hash)?;
                let schedule = load_schedule(store.as_ref(), &head.hash)?;
                let pending = pending_store::load(store.as_ref(), &head.hash)?;
                let state =
                    State::with_pending(head.hash, head.height, registry, eth1, schedule, pending);
                let root = state.root();
                if root != head.state_root {
                    return Err(OpenError::Corrupt(format!(
                        "state root {} does not match head block {} (height {}), which commits to {}",
                        root, head.hash, head.height, head.state_root
                    )));
                }
                let states = new_state_cache(&store, &genesis, &deposits, state);
                let proposals = proposals::load(store.as_ref())?;
                let equivocations = equivocation::Equivocations::load(store.as_ref())?;
                let stored_root = store
                    .get(keys::FINALITY_ROOT)?
                    .map(|bytes| {
                        <[u8; finality::ROOT_RECORD_LEN]>::try_from(bytes.as_slice()).map_err(
                            |_| {
                                OpenError::Corrupt(format!(
                                    "the finality root record is {} bytes, not {}",
                                    bytes.len(),
                                    finality::ROOT_RECORD_LEN
                                ))
                            },
                        )
                    })
                    .transpose()?;
                let finality = finality::Finality::open(
                    genesis.authorities.len(),
                    genesis.finality_depth,
                    head.height,
                    stored_root,
                    |height| slot_and_proposer_at(store.as_ref(), &genesis, height),
                )?;
                let base = base_height(store.as_ref())?;
                let pruned = prune::Cursors::load(store.as_ref())?;
                let pruning = prune::Shared::new(pruned.blocks.max(base));
                let chain = Self {
                    store,
                    genesis,
                    genesis_hash,
                    head,
                    deposits,
                    modules: None,
                    proposals,
                    states,
                    invalid: Default::default(),
                    equivocations,
                    executed: 0,
                    finality,
                    pruning,
                    base,
                    preverifier: None,
                };
                chain.publish_head(chain.head_state());
                Ok(chain)
            }
        }
    }
}

/// A state cache with the default budget over `store`, holding `head` (the state after the
/// head).
fn new_state_cache(
    store: &Arc<dyn KvStore>,
    genesis: &Genesis,
    deposits: &DepositEngine,
    head: State,
) -> Arc<StateCache> {
    Arc::new(StateCache::new(
        StateCacheConfig::default(),
        StateSource::new(store.clone(), genesis.clone(), deposits.clone()),
        head,
    ))
}

//! `--from-node`'s starting point: a running node's checkpoint, verified exactly as a restorer
//! verifies one ([`Restorer`]: each chunk against the manifest and its range proofs, the
//! rebuilt state against the manifest's state root), and the block it names checked against
//! the manifest (hash, height, state root) and, when a chain opens on it, against the genesis
//! (its seal) as [`init_from_checkpoint`] checks it. Every byte comes from the node and is
//! refused, naming the node and the chunk or block, unless it verifies. The replay then runs
//! both versions on that real state and only the blocks after it.

use std::sync::Arc;

use super::CheckError;
use super::versions;
use crate::chain::block::Block;
use crate::chain::genesis::Genesis;
use crate::chain::{Chain, CheckpointStart, DepositEngine, init_from_checkpoint};
use crate::checkpoint::restore::{ChunkOpener, RestoredState};
use crate::checkpoint::{Manifest, ManifestLimits, Restorer};
use crate::runtime::LinkedModule;
use crate::store::MemoryStore;

/// The checkpoint module versions this binary embeds, which open their own checkpoints' chunks.
const CHECKPOINT_MODULES: [&str; 3] = ["checkpoint-v1", "checkpoint-v2", "checkpoint-v3"];

/// A node's checkpoint, verified: its block and the state after it.
#[derive(Debug, Clone)]
pub struct LiveCheckpoint {
    /// The checkpoint's id.
    pub id: [u8; 32],
    /// The checkpoint's block (its height is the checkpoint's).
    pub block: Block,
    /// The state after the block, rebuilt from the verified chunks.
    pub state: RestoredState,
}

impl LiveCheckpoint {
    /// The checkpoint's height.
    pub fn height(&self) -> u64 {
        self.block.header.height
    }

    /// An in-memory chain of `genesis` whose head is this checkpoint's block and state, running
    /// `engine`, as a node restored from it would start (`origin` names the node in errors).
    pub(crate) fn chain(
        &self,
        genesis: &Genesis,
        engine: DepositEngine,
        origin: &str,
    ) -> Result<Chain, CheckError> {
        let store = Arc::new(MemoryStore::new());
        let start = CheckpointStart {
            block: &self.block,
            registry: &self.state.registry,
            eth1: &self.state.eth1,
            schedule: &self.state.schedule,
            pending: self.state.pending.as_ref(),
        };
        init_from_checkpoint(store.as_ref(), genesis, &start).map_err(|e| CheckError::Replay {
            path: origin.to_string(),
            reason: format!(
                "checkpoint {} at height {}: {e} (pass the genesis the node was started with)",
                hex::encode(self.id),
                self.height()
            ),
        })?;
        Chain::open(store, genesis.clone(), engine).map_err(|e| CheckError::Host {
            reason: format!("in-memory chain from checkpoint at {}: {e}", self.height()),
        })
    }
}

/// Verifies the checkpoint whose encoded manifest is `manifest` and whose block is `block`
/// (both from `origin`), fetching chunk after chunk with `chunk(index)` (Err: why it could not
/// be fetched) and verifying each on arrival. Err names `origin` and what did not verify: the
/// manifest, the block, or the chunk by index.
pub fn verify_checkpoint(
    origin: &str,
    manifest: &[u8],
    block: Block,
    chunk: &mut dyn FnMut(usize) -> Result<Vec<u8>, String>,
) -> Result<LiveCheckpoint, CheckError> {
    let refused = |reason: String| CheckError::Replay {
        path: origin.to_string(),
        reason,
    };
    let limits = ManifestLimits::default();
    let manifest = Manifest::decode(manifest, &limits)
        .map_err(|e| refused(format!("its checkpoint manifest does not decode: {e}")))?;
    let id = manifest.id();
    let name = format!(
        "checkpoint {} at height {}",
        hex::encode(id),
        manifest.height
    );
    if block.hash() != manifest.block_hash
        || block.header.height != manifest.height
        || block.header.state_root != manifest.state_root
    {
        return Err(refused(format!(
            "{name}: it sent block {} at height {} with state root {}, the manifest names \
             block {} with state root {}",
            hex::encode(block.hash()),
            block.header.height,
            hex::encode(block.header.state_root),
            hex::encode(manifest.block_hash),
            hex::encode(manifest.state_root)
        )));
    }
    let opener = checkpoint_opener(manifest.module_hash.as_bytes()).ok_or_else(|| {
        refused(format!(
            "{name} was made by checkpoint module {} (version {}), which this binary does not \
             embed; run an upgrade-check built with it, or --from-genesis",
            hex::encode(manifest.module_hash),
            manifest.module_version
        ))
    })?;
    let count = manifest.chunks.len();
    let mut restorer =
        Restorer::new(manifest, &limits).map_err(|e| refused(format!("{name}: {e}")))?;
    for index in 0..count {
        let bytes = chunk(index)
            .map_err(|e| refused(format!("{name}: cannot fetch chunk {index}: {e}")))?;
        restorer
            .verify(opener.as_ref(), index, &bytes)
            .and_then(|v| restorer.insert(v))
            .map_err(|e| {
                refused(format!(
                    "{name}: chunk {index} of {count} does not verify ({e}); refusing the \
                     node's checkpoint"
                ))
            })?;
    }
    let state = restorer
        .finish()
        .map_err(|e| refused(format!("{name}: {e}")))?;
    Ok(LiveCheckpoint { id, block, state })
}

/// The embedded checkpoint module whose component hash is `hash`, loaded.
fn checkpoint_opener(hash: &[u8; 32]) -> Option<Box<dyn ChunkOpener>> {
    use sha2::Digest as _;

    let bytes = CHECKPOINT_MODULES.into_iter().find_map(|name| {
        crate::artifacts::embedded(name)
            .filter(|bytes| <[u8; 32]>::from(sha2::Sha256::digest(bytes)) == *hash)
    })?;
    match versions::runtime().ok()?.load(bytes).ok()? {
        LinkedModule::Checkpoint(module) => {
            let opener: Box<dyn ChunkOpener> = Box::new(module);
            Some(opener)
        }
        _ => None,
    }
}

//! Checkpoints to and from files: [`export`] writes a stored checkpoint of a
//! stopped node's data directory to one file (`modnode checkpoint export`), and
//! [`restore_from_file`] starts an empty data directory from such a file (`modnode run
//! --restore-from`) before the node opens its chain.
//!
//! A restore from a file is verified exactly as one from peers: the manifest is decoded and
//! validated, block `H` must be the manifest's (hash and state root), every chunk goes through
//! [`Restorer::verify`](crate::checkpoint::Restorer::verify) (size, hash, opening by the module
//! that made it, leaf range, range proof against the registry root), the rebuilt state must have
//! the manifest's root, and [`init_from_checkpoint`] checks block `H`'s seal against its slot's
//! authority. The node then range-syncs from `H + 1`, so a block `H` that is not on the chain
//! its peers follow never gets a successor. The file is trusted for nothing; a damaged or
//! forged one is refused naming the file and the failing part (the chunk's index).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::chain::block::Block;
use crate::chain::genesis::Genesis;
use crate::chain::{CheckpointStart, init_from_checkpoint};
use crate::checkpoint::file::{CheckpointFileError, CheckpointFileReader, write_file};
use crate::checkpoint::{CheckpointStore, Manifest, ManifestLimits, RestoreError, Restorer};
use crate::node::metrics::RestoreCounters;
use crate::node::network::checkpoint_progress::{ProgressDisplay, Reporter};
use crate::runtime::Modules;
use crate::store::{DataDirLock, DataDirLockError, KvStore, SledStore, keys};

use super::CHECKPOINT_DIR;

/// Bytes of chunks read from the file before they are verified together (on several threads):
/// what a restore from a file holds at once beside the state it rebuilds.
const BATCH_BYTES: u64 = 64 << 20;

/// Why a checkpoint could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A running node holds the data directory (its stores can only be read by one process).
    #[error(
        "{0}; `checkpoint export` reads a stopped node's data directory (`modnode checkpoint \
         create` makes a checkpoint while the node runs; stop it, then export)"
    )]
    Locked(#[from] DataDirLockError),
    /// A store of the data directory could not be read (ours).
    #[error("cannot read {path}: {reason}")]
    Storage {
        /// The store.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// No stored checkpoint matches what was asked for.
    #[error(
        "no checkpoint {which} is stored in {dir}; stored: {stored} (`modnode checkpoint create` \
         on the running node makes one)"
    )]
    NotFound {
        /// What was asked for (`latest` or an id prefix).
        which: String,
        /// The checkpoint database.
        dir: PathBuf,
        /// The stored checkpoints (`height id`), or `none`.
        stored: String,
    },
    /// An id prefix matches several stored checkpoints.
    #[error("checkpoint id prefix {which} matches {count} stored checkpoints; give more of the id")]
    Ambiguous {
        /// The prefix.
        which: String,
        /// How many match.
        count: usize,
    },
    /// The chain store no longer holds block `H` (pruned, or another chain).
    #[error(
        "block {hash} at height {height} of checkpoint {id} is not in {dir}: the checkpoint is \
         older than the blocks this node keeps; export a newer one"
    )]
    BlockMissing {
        /// The checkpoint.
        id: String,
        /// Its height.
        height: u64,
        /// Block `H`'s hash.
        hash: String,
        /// The chain store.
        dir: PathBuf,
    },
    /// A stored chunk is missing or not the bytes its manifest lists (a damaged store: ours).
    #[error("checkpoint {id}: stored chunk {index} {reason}; create a new checkpoint")]
    BadChunk {
        /// The checkpoint.
        id: String,
        /// The chunk.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The file could not be written.
    #[error(transparent)]
    File(#[from] CheckpointFileError),
}

/// What [`export`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    /// The checkpoint's id.
    pub id: [u8; 32],
    /// Its height.
    pub height: u64,
    /// Its chunks.
    pub chunks: usize,
    /// Bytes of the file.
    pub file_bytes: u64,
}

/// The stored checkpoint `which` names: `latest`, or its id in hex (a unique prefix will do).
fn find(store: &CheckpointStore, dir: &Path, which: &str) -> Result<Manifest, ExportError> {
    let storage = |reason: String| ExportError::Storage {
        path: dir.to_path_buf(),
        reason,
    };
    let stored = store.list().map_err(|e| storage(e.to_string()))?;
    let wanted = which.trim().to_ascii_lowercase();
    let wanted = wanted.strip_prefix("0x").unwrap_or(&wanted);
    let mut matching: Vec<Manifest> = if wanted == "latest" {
        stored.iter().take(1).cloned().collect()
    } else if wanted.is_empty() {
        Vec::new()
    } else {
        stored
            .iter()
            .filter(|m| hex::encode(m.id()).starts_with(wanted))
            .cloned()
            .collect()
    };
    match matching.len() {
        1 => Ok(matching.remove(0)),
        0 => Err(ExportError::NotFound {
            which: which.to_string(),
            dir: dir.to_path_buf(),
            stored: if stored.is_empty() {
                "none".into()
            } else {
                stored
                    .iter()
                    .map(|m| format!("{} {}", m.height, hex::encode(m.id())))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        }),
        count => Err(ExportError::Ambiguous {
            which: which.to_string(),
            count,
        }),
    }
}

/// Writes the checkpoint `which` (`latest` or an id prefix) stored in the stopped node's
/// `data_dir` to `out`, with its block `H`; each chunk is checked against its manifest entry on
/// the way (a damaged store is not exported). The file appears under `out` only once complete.
pub fn export(data_dir: &Path, which: &str, out: &Path) -> Result<ExportSummary, ExportError> {
    let _lock = DataDirLock::acquire(data_dir)?;
    let checkpoint_dir = data_dir.join(CHECKPOINT_DIR);
    if !checkpoint_dir.exists() {
        return Err(ExportError::NotFound {
            which: which.to_string(),
            dir: checkpoint_dir,
            stored: "none (no checkpoint database)".into(),
        });
    }
    let store = CheckpointStore::open(&checkpoint_dir).map_err(|e| ExportError::Storage {
        path: checkpoint_dir.clone(),
        reason: e.to_string(),
    })?;
    let manifest = find(&store, &checkpoint_dir, which)?;
    let id = manifest.id();
    let name = hex::encode(id);
    let chain_dir = data_dir.join("chain");
    let chain_storage = |reason: String| ExportError::Storage {
        path: chain_dir.clone(),
        reason,
    };
    let chain = SledStore::open(&chain_dir).map_err(|e| chain_storage(e.to_string()))?;
    let missing = || ExportError::BlockMissing {
        id: name.clone(),
        height: manifest.height,
        hash: hex::encode(manifest.block_hash),
        dir: chain_dir.clone(),
    };
    let canonical = chain
        .get(&keys::height(manifest.height))
        .map_err(|e| chain_storage(e.to_string()))?;
    if canonical.as_deref() != Some(manifest.block_hash.as_bytes().as_slice()) {
        return Err(missing());
    }
    let block = chain
        .get(&keys::block(&manifest.block_hash))
        .map_err(|e| chain_storage(e.to_string()))?
        .ok_or_else(missing)?;
    // The typed reason a chunk stopped the write (the writer only needs to know it stopped).
    let mut bad_chunk: Option<ExportError> = None;
    let written = write_file(out, &manifest, &block, |index| {
        let bad = |reason: String| ExportError::BadChunk {
            id: name.clone(),
            index,
            reason,
        };
        let checked = match (manifest.chunks.get(index), store.chunk(&id, index)) {
            (None, _) => Err(bad("is not in the manifest".into())),
            (_, Err(e)) => Err(bad(format!("cannot be read: {e}"))),
            (_, Ok(None)) => Err(bad("is not stored".into())),
            (Some(entry), Ok(Some(bytes))) => {
                let hash: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
                if hash == entry.hash {
                    Ok(bytes)
                } else {
                    Err(bad("does not hash to its manifest entry".into()))
                }
            }
        };
        checked.map_err(|e| {
            let text = e.to_string();
            bad_chunk = Some(e);
            text
        })
    });
    let file_bytes = match (written, bad_chunk) {
        (Ok(bytes), _) => bytes,
        (Err(_), Some(bad)) => return Err(bad),
        (Err(e), None) => return Err(e.into()),
    };
    Ok(ExportSummary {
        id,
        height: manifest.height,
        chunks: manifest.chunks.len(),
        file_bytes,
    })
}

/// Why a node could not start from a checkpoint file.
#[derive(Debug, thiserror::Error)]
pub enum FileRestoreError {
    /// The file cannot be read, is cut short or is not a checkpoint file of this version.
    #[error(transparent)]
    File(#[from] CheckpointFileError),
    /// The data directory already holds another chain.
    #[error(
        "--restore-from {}: the data directory {} already holds a chain that does not start from \
         this checkpoint; a checkpoint file starts an empty data directory only: give another \
         --data-dir, or drop --restore-from to go on from the local chain",
        file.display(),
        dir.display()
    )]
    NotEmpty {
        /// The checkpoint file.
        file: PathBuf,
        /// The data directory.
        dir: PathBuf,
    },
    /// Block `H` in the file is not the block the manifest names (the file's fault).
    #[error("checkpoint file {}: block H {reason}; the file is damaged or forged", file.display())]
    Block {
        /// The checkpoint file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// This node cannot open the checkpoint's chunks.
    #[error(
        "checkpoint file {} was made by checkpoint module {module} (version {version}), which is \
         not installed in this node; restore with a modnode build that embeds it",
        file.display()
    )]
    ModuleMissing {
        /// The checkpoint file.
        file: PathBuf,
        /// The module's hash (hex).
        module: String,
        /// Its version.
        version: u32,
    },
    /// A chunk or the rebuilt state failed verification (the file's fault unless the error
    /// says it is ours).
    #[error("checkpoint file {} refused: {source}", file.display())]
    Verify {
        /// The checkpoint file.
        file: PathBuf,
        /// The failing check (it names the chunk).
        #[source]
        source: RestoreError,
    },
    /// The chain could not be started from the verified state (its block's seal, or our store).
    #[error("checkpoint file {}: cannot start the chain from it: {reason}", file.display())]
    Init {
        /// The checkpoint file.
        file: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The chain store could not be opened or read (ours).
    #[error("cannot open the chain in {}: {reason}", path.display())]
    Storage {
        /// The store.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// What a restore from a file needs from the node.
pub struct FileRestoreParts<'a> {
    /// The checkpoint file.
    pub file: &'a Path,
    /// The chain.
    pub genesis: &'a Genesis,
    /// Every installed checkpoint module version opens its own checkpoints.
    pub modules: &'a Modules,
    /// The node's data directory.
    pub data_dir: &'a Path,
    /// Where the progress is published (the same counters as a network restore).
    pub counters: &'a RestoreCounters,
    /// Verification threads.
    pub threads: usize,
    /// Log lines or a progress bar.
    pub progress: ProgressDisplay,
}

/// Starts the empty chain in `parts.data_dir` from the checkpoint in `parts.file`, verified as a
/// network restore is; returns the height restored, or `None` when the data directory was
/// already started from this very checkpoint (a restart with the same flag goes on from the
/// local chain). Blocking: call it off the async workers.
pub fn restore_from_file(parts: &FileRestoreParts<'_>) -> Result<Option<u64>, FileRestoreError> {
    let file = parts.file.to_path_buf();
    let mut reader = CheckpointFileReader::open(parts.file, &ManifestLimits::default())?;
    let manifest = reader.manifest().clone();
    let name = hex::encode(manifest.id());
    let chain_dir = parts.data_dir.join("chain");
    let storage = |reason: String| FileRestoreError::Storage {
        path: chain_dir.clone(),
        reason,
    };
    let store = SledStore::open(&chain_dir).map_err(|e| storage(e.to_string()))?;
    if store
        .get(keys::FORMAT)
        .map_err(|e| storage(e.to_string()))?
        .is_some()
    {
        let at_h = store
            .get(&keys::height(manifest.height))
            .map_err(|e| storage(e.to_string()))?;
        if at_h.as_deref() == Some(manifest.block_hash.as_bytes().as_slice()) {
            tracing::info!(
                file = %file.display(),
                checkpoint = %name,
                height = manifest.height,
                "the chain here already holds this checkpoint's block; going on from the local chain"
            );
            return Ok(None);
        }
        return Err(FileRestoreError::NotEmpty {
            file,
            dir: parts.data_dir.to_path_buf(),
        });
    }
    let block =
        Block::decode(reader.block(), parts.genesis.max_deposits_per_block).map_err(|e| {
            FileRestoreError::Block {
                file: file.clone(),
                reason: format!("does not decode: {e}"),
            }
        })?;
    if block.hash() != manifest.block_hash || block.header.height != manifest.height {
        return Err(FileRestoreError::Block {
            file,
            reason: format!(
                "is block {} at height {}, the manifest names block {} at height {}",
                block.hash(),
                block.header.height,
                hex::encode(manifest.block_hash),
                manifest.height
            ),
        });
    }
    if block.header.state_root != manifest.state_root {
        return Err(FileRestoreError::Block {
            file,
            reason: format!(
                "commits to state root {}, the manifest lists {}",
                block.header.state_root,
                hex::encode(manifest.state_root)
            ),
        });
    }
    let Some(opener) = parts.modules.prepared_checkpoint(&manifest.module_hash) else {
        return Err(FileRestoreError::ModuleMissing {
            file,
            module: hex::encode(manifest.module_hash),
            version: manifest.module_version,
        });
    };
    let verify = |source: RestoreError| FileRestoreError::Verify {
        file: file.clone(),
        source,
    };
    let mut restorer =
        Restorer::new(manifest.clone(), &ManifestLimits::default()).map_err(verify)?;
    let counters = parts.counters;
    counters.height.store(manifest.height, Ordering::Relaxed);
    counters
        .chunks_total
        .store(as_u64(manifest.chunks.len()), Ordering::Relaxed);
    tracing::info!(
        file = %file.display(),
        checkpoint = %name,
        height = manifest.height,
        version = manifest.module_version,
        chunks = manifest.chunks.len(),
        bytes = manifest.total_bytes(),
        "restoring checkpoint from file"
    );
    let mut progress = Reporter::new(restorer.progress(), parts.progress);
    loop {
        let mut batch = Vec::new();
        let mut batch_bytes = 0u64;
        while batch_bytes < BATCH_BYTES {
            let Some((index, bytes)) = reader.next_chunk()? else {
                break;
            };
            batch_bytes = batch_bytes.saturating_add(as_u64(bytes.len()));
            batch.push((index, bytes));
        }
        if batch.is_empty() {
            break;
        }
        let verified = crate::checkpoint::verify_all(
            &mut restorer,
            opener.as_ref(),
            &batch,
            parts.threads,
            None,
        )
        .map_err(verify)?;
        counters
            .chunks_verified
            .store(as_u64(verified.chunks), Ordering::Relaxed);
        progress.update(verified, counters);
    }
    progress.finish();
    reader.finish()?;
    let state = restorer.finish().map_err(verify)?;
    let start = CheckpointStart {
        block: &block,
        registry: &state.registry,
        eth1: &state.eth1,
        schedule: &state.schedule,
        pending: state.pending.as_ref(),
    };
    init_from_checkpoint(&store, parts.genesis, &start).map_err(|e| FileRestoreError::Init {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    counters.done.store(true, Ordering::Relaxed);
    tracing::info!(
        file = %file.display(),
        checkpoint = %name,
        height = manifest.height,
        "checkpoint restored from file; syncing the blocks after it"
    );
    Ok(Some(manifest.height))
}

fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

//! The built-in dev deposit contract: an append-only deposit log with "execution blocks",
//! persisted in its own sled database (`<data dir>/deposit-contract`), reached by followers
//! through the JSON-RPC subset in [`server`](super::server).
//!
//! **Blocks are virtual and follow the clock**: block `n` has timestamp
//! `created_ms + n × block_ms`, the head is the last block whose time has come, and only the
//! deposits are stored, each with the block it landed in (the pending block `head + 1` when it
//! was submitted). A block's hash commits to the contract, its number, and the deposit count and
//! root at its end, so a restarted contract serves the same blocks it served before. Empty
//! blocks cost nothing, which keeps a follow distance moving without deposits.
//!
//! **Reorgs on demand**: `DevContract::reorg` replaces the last blocks with different ones
//! (their deposits dropped, others put in their place), like an execution chain reorganising
//! deeper than a follower's follow distance. It is a Rust API for tests only, built with the
//! `test-utils` feature: no JSON-RPC method reaches it, so neither followers nor peers can
//! trigger it. Each reorg is recorded, and every block from its first replaced block on hashes
//! differently from before.
//!
//! Like the real contract it checks deposits minimally — amount at least 1 ETH in Gwei, fixed
//! field lengths (by type) — and never checks signatures: an invalid deposit is logged and the
//! deposits module skips it.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::cache::{CacheError, DepositCache};
use super::tree::{MAX_DEPOSIT_COUNT, Node, TreeError};
use crate::chain::block::{DEPOSIT_BYTES, DepositData};

/// The contract's minimum deposit (`1 ether` in Gwei).
pub const MIN_DEPOSIT_GWEI: u64 = 1_000_000_000;
/// The dev contract's address (the one many Ethereum testnets use for their deposit contract).
pub const DEV_CONTRACT_ADDRESS: [u8; 20] = [0x42; 20];
/// Default time between dev execution blocks.
pub const DEFAULT_BLOCK_MS: u64 = 1_000;
/// Default for the most blocks one `eth_getLogs` may span.
pub const DEFAULT_LOG_BLOCK_RANGE: u64 = 10_000;

const META_CREATED: &[u8] = b"created_ms";
const META_BLOCK_MS: &[u8] = b"block_ms";
const META_REORGS: &[u8] = b"reorgs";
/// The placeholder `eth_getCode` answers at [`DEV_CONTRACT_ADDRESS`]: the dev contract runs no
/// EVM code, but a follower checks that code exists at the address it follows.
pub const DEV_CONTRACT_CODE: &[u8] = b"modnode dev deposit contract (no EVM code)";

/// An execution block as followers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eth1Block {
    /// Block number.
    pub number: u64,
    /// Block hash.
    pub hash: [u8; 32],
    /// Hash of block `number - 1` (zero for block 0).
    pub parent_hash: [u8; 32],
    /// Seconds since the Unix epoch.
    pub timestamp: u64,
}

/// One `DepositEvent` of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedDeposit {
    /// Index in the contract's tree.
    pub index: u64,
    /// The block it landed in.
    pub block: u64,
    /// The deposit.
    pub deposit: DepositData,
}

/// Why the contract refused a deposit or could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum DevContractError {
    /// The amount is below the contract's minimum (the depositor's fault).
    #[error(
        "deposit amount {amount} Gwei is below the contract's minimum of {MIN_DEPOSIT_GWEI} Gwei (1 ETH)"
    )]
    AmountTooLow {
        /// The amount given.
        amount: u64,
    },
    /// The tree is full.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The contract's database failed (ours; the deposit was not logged).
    #[error("dev deposit contract database {path}: {reason}")]
    Storage {
        /// The database directory.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// A reorg asked for blocks the contract does not have (the caller's mistake).
    #[cfg(any(test, feature = "test-utils"))]
    #[error(
        "cannot reorganise the last {depth} blocks: the head is block {head}, and block 0 stays"
    )]
    ReorgDepth {
        /// Blocks asked to replace.
        depth: u64,
        /// The head.
        head: u64,
    },
    /// The stored log is not a contiguous, well-formed log (ours: the database is damaged).
    #[error("dev deposit contract database {path}: corrupt entry {key}: {reason}")]
    Corrupt {
        /// The database directory.
        path: PathBuf,
        /// The key at fault (hex).
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// The dev deposit contract.
pub struct DevContract {
    path: PathBuf,
    db: sled::Db,
    /// Creation time, block time and reorgs; kept open for [`DevContract::reorg`].
    #[cfg(any(test, feature = "test-utils"))]
    meta: sled::Tree,
    log: sled::Tree,
    cache: DepositCache,
    /// The block each deposit landed in, by index (non-decreasing).
    blocks: Vec<u64>,
    created_ms: u64,
    block_ms: u64,
    /// The first replaced block of each reorg, in order.
    reorgs: Vec<u64>,
    /// Most blocks one `eth_getLogs` may span (not persisted).
    log_block_range: u64,
}

/// What [`DevContract::reorg`] did.
#[cfg(any(test, feature = "test-utils"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reorged {
    /// The first block replaced; every block from it on has a new hash.
    pub from_block: u64,
    /// The deposits dropped (in those blocks or pending), from index `first_index`.
    pub dropped: Vec<DepositData>,
    /// Index of the first dropped deposit, and of the first replacement.
    pub first_index: u64,
}

impl std::fmt::Debug for DevContract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevContract")
            .field("path", &self.path)
            .field("deposits", &self.cache.len())
            .field("block_ms", &self.block_ms)
            .finish_non_exhaustive()
    }
}

impl DevContract {
    /// Opens the contract in `dir` (created with `block_ms` and `now_ms` as its start if new; an
    /// existing contract keeps the block time it was created with).
    pub fn open(dir: &Path, block_ms: u64, now_ms: u64) -> Result<Self, DevContractError> {
        let storage = |e: sled::Error| DevContractError::Storage {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        };
        let db = crate::store::open_sled(&sled::Config::new().path(dir).cache_capacity(8 << 20))
            .map_err(storage)?;
        let meta = db.open_tree("meta").map_err(storage)?;
        let log = db.open_tree("log").map_err(storage)?;
        let read_or_init = |key: &[u8], init: u64| -> Result<u64, DevContractError> {
            match meta.get(key).map_err(storage)? {
                Some(bytes) => {
                    let array: [u8; 8] =
                        bytes
                            .as_ref()
                            .try_into()
                            .map_err(|_| DevContractError::Corrupt {
                                path: dir.to_path_buf(),
                                key: String::from_utf8_lossy(key).into_owned(),
                                reason: format!("{} bytes, expected 8", bytes.len()),
                            })?;
                    Ok(u64::from_le_bytes(array))
                }
                None => {
                    meta.insert(key, &init.to_le_bytes()).map_err(storage)?;
                    Ok(init)
                }
            }
        };
        let reorgs = match meta.get(META_REORGS).map_err(storage)? {
            None => Vec::new(),
            Some(bytes) => {
                let (chunks, rest) = bytes.as_chunks::<8>();
                if !rest.is_empty() {
                    return Err(DevContractError::Corrupt {
                        path: dir.to_path_buf(),
                        key: String::from_utf8_lossy(META_REORGS).into_owned(),
                        reason: format!("{} bytes, not a multiple of 8", bytes.len()),
                    });
                }
                chunks.iter().map(|c| u64::from_le_bytes(*c)).collect()
            }
        };
        let created_ms = read_or_init(META_CREATED, now_ms)?;
        let stored_block_ms = read_or_init(META_BLOCK_MS, block_ms.max(1))?;
        if stored_block_ms != block_ms {
            tracing::info!(
                stored = stored_block_ms,
                asked = block_ms,
                "the dev deposit contract keeps the block time it was created with"
            );
        }
        db.flush().map_err(storage)?;

        let mut contract = Self {
            path: dir.to_path_buf(),
            db,
            #[cfg(any(test, feature = "test-utils"))]
            meta,
            log,
            cache: DepositCache::new(),
            blocks: Vec::new(),
            created_ms,
            block_ms: stored_block_ms.max(1),
            reorgs,
            log_block_range: DEFAULT_LOG_BLOCK_RANGE,
        };
        contract.load()?;
        Ok(contract)
    }

    fn load(&mut self) -> Result<(), DevContractError> {
        for entry in self.log.iter() {
            let (key, value) = entry.map_err(|e| DevContractError::Storage {
                path: self.path.clone(),
                reason: e.to_string(),
            })?;
            let corrupt = |reason: String| DevContractError::Corrupt {
                path: self.path.clone(),
                key: hex::encode(&key),
                reason,
            };
            let index = <[u8; 8]>::try_from(key.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| corrupt(format!("key of {} bytes", key.len())))?;
            if index != self.cache.len() {
                return Err(corrupt(format!(
                    "deposit {index} follows deposit {}: the log has a gap",
                    self.cache.len().wrapping_sub(1)
                )));
            }
            let (block, deposit) = value
                .split_at_checked(8)
                .ok_or_else(|| corrupt(format!("value of {} bytes", value.len())))?;
            let block = u64::from_le_bytes(
                block
                    .try_into()
                    .map_err(|_| corrupt("block number".into()))?,
            );
            let deposit = DepositData::decode(deposit).map_err(|e| corrupt(e.to_string()))?;
            if self.blocks.last().is_some_and(|&last| block < last) {
                return Err(corrupt(format!(
                    "block {block} before an earlier deposit's"
                )));
            }
            self.cache.push(deposit)?;
            self.blocks.push(block);
        }
        Ok(())
    }

    /// Deposits logged so far.
    pub fn deposit_count(&self) -> u64 {
        self.cache.len()
    }

    /// Time between blocks.
    pub fn block_ms(&self) -> u64 {
        self.block_ms
    }

    /// Most blocks one `eth_getLogs` may span.
    pub fn log_block_range(&self) -> u64 {
        self.log_block_range
    }

    /// Limits `eth_getLogs` to `blocks` blocks per query (at least 1), as providers do (dev and
    /// test setting, not persisted).
    pub fn set_log_block_range(&mut self, blocks: u64) {
        self.log_block_range = blocks.max(1);
    }

    /// The latest block at `now_ms`.
    pub fn head(&self, now_ms: u64) -> u64 {
        now_ms
            .saturating_sub(self.created_ms)
            .checked_div(self.block_ms)
            .unwrap_or(0)
    }

    /// The contract's `deposit`: checks, logs durably (flushed before it returns), and returns
    /// the deposit's index and the block it lands in.
    pub fn deposit(
        &mut self,
        deposit: DepositData,
        now_ms: u64,
    ) -> Result<LoggedDeposit, DevContractError> {
        if deposit.amount < MIN_DEPOSIT_GWEI {
            return Err(DevContractError::AmountTooLow {
                amount: deposit.amount,
            });
        }
        let index = self.cache.len();
        let pending = self.head(now_ms).saturating_add(1);
        let block = self
            .blocks
            .last()
            .map_or(pending, |&last| last.max(pending));
        let mut value = Vec::with_capacity(8 + DEPOSIT_BYTES);
        value.extend_from_slice(&block.to_le_bytes());
        value.extend_from_slice(&deposit.encode());
        let storage = |e: sled::Error| DevContractError::Storage {
            path: self.path.clone(),
            reason: e.to_string(),
        };
        // Check the tree has room before anything is written.
        if index >= MAX_DEPOSIT_COUNT {
            return Err(CacheError::Tree(TreeError::Full).into());
        }
        self.log
            .insert(index.to_be_bytes(), value)
            .map_err(storage)?;
        self.db.flush().map_err(storage)?;
        self.cache.push(deposit)?;
        self.blocks.push(block);
        Ok(LoggedDeposit {
            index,
            block,
            deposit,
        })
    }

    /// Replaces the last `depth` blocks up to the head at `now_ms` with different ones: the
    /// deposits in them (and pending ones) are dropped, `replacement` lands in the first
    /// replaced block, and every block from it on hashes differently. Durable (flushed) before
    /// it returns. A test hook (the `test-utils` feature): no JSON-RPC method calls it.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn reorg(
        &mut self,
        depth: u64,
        replacement: Vec<DepositData>,
        now_ms: u64,
    ) -> Result<Reorged, DevContractError> {
        let head = self.head(now_ms);
        let from_block = head
            .checked_add(1)
            .and_then(|next| next.checked_sub(depth))
            .filter(|&from| depth > 0 && from > 0)
            .ok_or(DevContractError::ReorgDepth { depth, head })?;
        if let Some(low) = replacement.iter().find(|d| d.amount < MIN_DEPOSIT_GWEI) {
            return Err(DevContractError::AmountTooLow { amount: low.amount });
        }
        let keep = self.blocks.partition_point(|&b| b < from_block);
        let kept = self.blocks.get(..keep).unwrap_or_default();
        // Rebuild in memory first: nothing is written unless the new log is whole.
        let mut cache = DepositCache::new();
        let mut dropped = Vec::new();
        for index in 0..self.cache.len() {
            let deposit = *self.cache.deposit(index).ok_or(CacheError::UnknownCount {
                count: index,
                known: self.cache.len(),
            })?;
            if cache.len() < keep as u64 {
                cache.push(deposit)?;
            } else {
                dropped.push(deposit);
            }
        }
        let first_index = cache.len();
        for deposit in &replacement {
            cache.push(*deposit)?;
        }
        let mut blocks = kept.to_vec();
        blocks.resize(keep.saturating_add(replacement.len()), from_block);
        let mut reorgs = self.reorgs.clone();
        reorgs.push(from_block);
        let encoded_reorgs: Vec<u8> = reorgs.iter().flat_map(|b| b.to_le_bytes()).collect();

        let mut log = sled::Batch::default();
        for index in first_index..self.cache.len() {
            log.remove(&index.to_be_bytes());
        }
        for (index, deposit) in (first_index..).zip(&replacement) {
            let mut value = Vec::with_capacity(8 + DEPOSIT_BYTES);
            value.extend_from_slice(&from_block.to_le_bytes());
            value.extend_from_slice(&deposit.encode());
            log.insert(&index.to_be_bytes(), value);
        }
        use sled::Transactional as _;
        let written: sled::transaction::TransactionResult<(), ()> = (&self.log, &self.meta)
            .transaction(|(log_tx, meta_tx)| {
                log_tx.apply_batch(&log)?;
                meta_tx.insert(META_REORGS, encoded_reorgs.as_slice())?;
                Ok(())
            });
        let storage = |reason: String| DevContractError::Storage {
            path: self.path.clone(),
            reason,
        };
        written.map_err(|e| storage(format!("{e:?}")))?;
        self.db.flush().map_err(|e| storage(e.to_string()))?;
        self.cache = cache;
        self.blocks = blocks;
        self.reorgs = reorgs;
        Ok(Reorged {
            from_block,
            dropped,
            first_index,
        })
    }

    /// Deposits in blocks up to and including `block`.
    fn count_at(&self, block: u64) -> u64 {
        self.blocks.partition_point(|&b| b <= block) as u64
    }

    fn hash(&self, number: u64) -> [u8; 32] {
        let count = self.count_at(number);
        let root: Node = self.cache.root_at(count).unwrap_or_default();
        let mut hasher = Sha256::new();
        hasher.update(b"modnode dev execution block");
        hasher.update(DEV_CONTRACT_ADDRESS);
        hasher.update(self.created_ms.to_le_bytes());
        hasher.update(number.to_le_bytes());
        hasher.update(count.to_le_bytes());
        hasher.update(root);
        // Reorgs replacing this block or an earlier one: none leaves the hash as it always was.
        let reorgs = self.reorgs.iter().filter(|&&from| from <= number).count() as u64;
        if reorgs > 0 {
            hasher.update(b"reorgs");
            hasher.update(reorgs.to_le_bytes());
        }
        hasher.finalize().into()
    }

    /// Block `number`, if it exists at `now_ms`.
    pub fn block(&self, number: u64, now_ms: u64) -> Option<Eth1Block> {
        if number > self.head(now_ms) {
            return None;
        }
        let time_ms = number
            .checked_mul(self.block_ms)?
            .checked_add(self.created_ms)?;
        Some(Eth1Block {
            number,
            hash: self.hash(number),
            parent_hash: number
                .checked_sub(1)
                .map_or([0u8; 32], |parent| self.hash(parent)),
            timestamp: time_ms / 1_000,
        })
    }

    /// The deposits logged in blocks `from..=to` (clamped to the head at `now_ms`), at most
    /// `limit` of them — `None` if there are more (the caller asks for a smaller range).
    pub fn logs(
        &self,
        from: u64,
        to: u64,
        limit: usize,
        now_ms: u64,
    ) -> Option<Vec<LoggedDeposit>> {
        let to = to.min(self.head(now_ms));
        if from > to {
            return Some(Vec::new());
        }
        let start = self.blocks.partition_point(|&b| b < from);
        let end = self.blocks.partition_point(|&b| b <= to);
        if end.saturating_sub(start) > limit {
            return None;
        }
        let mut out = Vec::with_capacity(end.saturating_sub(start));
        for (i, &block) in self.blocks.iter().enumerate().take(end).skip(start) {
            let index = i as u64;
            out.push(LoggedDeposit {
                index,
                block,
                deposit: *self.cache.deposit(index)?,
            });
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deposit_source::tree::{DepositTree, deposit_data_root};

    fn deposit(i: u8, amount: u64) -> DepositData {
        DepositData {
            pubkey: [i; 48],
            withdrawal_credentials: [1; 32],
            amount,
            signature: [0; 96],
        }
    }

    #[test]
    fn logs_deposits_in_pending_blocks_and_refuses_less_than_one_eth() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = DevContract::open(dir.path(), 100, 1_000).unwrap();
        assert_eq!(c.head(1_000), 0);
        assert_eq!(c.head(1_250), 2);
        let first = c.deposit(deposit(1, MIN_DEPOSIT_GWEI), 1_250).unwrap();
        assert_eq!((first.index, first.block), (0, 3));
        assert!(matches!(
            c.deposit(deposit(2, MIN_DEPOSIT_GWEI - 1), 1_250),
            Err(DevContractError::AmountTooLow { .. })
        ));
        // An invalid signature is the module's business, not the contract's.
        let second = c.deposit(deposit(2, 5 * MIN_DEPOSIT_GWEI), 1_310).unwrap();
        assert_eq!((second.index, second.block), (1, 4));
        // Not visible before its block exists.
        assert_eq!(c.logs(0, 10, 100, 1_299).unwrap(), vec![]);
        assert_eq!(c.logs(0, 10, 100, 1_310).unwrap(), vec![first]);
        assert_eq!(c.logs(0, 10, 100, 1_400).unwrap(), vec![first, second]);
        assert_eq!(c.logs(4, 4, 100, 1_400).unwrap(), vec![second]);
        assert_eq!(c.logs(0, 10, 1, 1_400), None);
        assert!(c.block(5, 1_400).is_none());
        let b4 = c.block(4, 1_400).unwrap();
        assert_eq!(b4.parent_hash, c.block(3, 1_400).unwrap().hash);
        assert_ne!(b4.hash, b4.parent_hash);
    }

    #[test]
    fn a_reopened_contract_keeps_every_deposit_and_serves_the_same_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let mut tree = DepositTree::new();
        let (hashes, logs) = {
            let mut c = DevContract::open(dir.path(), 50, 0).unwrap();
            for i in 0..5u8 {
                let d = deposit(i, MIN_DEPOSIT_GWEI * u64::from(i + 1));
                c.deposit(d, u64::from(i) * 60).unwrap();
                tree.push(deposit_data_root(&d)).unwrap();
            }
            let hashes: Vec<_> = (0..8).map(|n| c.block(n, 400).unwrap()).collect();
            (hashes, c.logs(0, 8, 100, 400).unwrap())
        };
        // Reopened with another block time: the stored one wins, nothing is lost.
        let c = DevContract::open(dir.path(), 999, 10_000).unwrap();
        assert_eq!(c.block_ms(), 50);
        assert_eq!(c.deposit_count(), 5);
        assert_eq!(c.cache.root(), tree.root());
        assert_eq!(c.logs(0, 8, 100, 400).unwrap(), logs);
        let again: Vec<_> = (0..8).map(|n| c.block(n, 400).unwrap()).collect();
        assert_eq!(again, hashes);
    }

    #[test]
    fn a_reorg_replaces_the_last_blocks_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (before, after) = {
            let mut c = DevContract::open(dir.path(), 100, 0).unwrap();
            c.deposit(deposit(0, MIN_DEPOSIT_GWEI), 50).unwrap(); // block 1
            c.deposit(deposit(1, MIN_DEPOSIT_GWEI), 250).unwrap(); // block 3
            c.deposit(deposit(2, MIN_DEPOSIT_GWEI), 450).unwrap(); // block 5
            let before: Vec<_> = (0..=6).map(|n| c.block(n, 600).unwrap()).collect();
            assert!(matches!(
                c.reorg(7, vec![], 600),
                Err(DevContractError::ReorgDepth { depth: 7, head: 6 })
            ));
            assert!(matches!(
                c.reorg(0, vec![], 600),
                Err(DevContractError::ReorgDepth { .. })
            ));
            // Blocks 3..=6 replaced: deposits 1 and 2 dropped, another lands in block 3.
            let reorged = c.reorg(4, vec![deposit(9, MIN_DEPOSIT_GWEI)], 600).unwrap();
            assert_eq!(
                reorged,
                Reorged {
                    from_block: 3,
                    dropped: vec![deposit(1, MIN_DEPOSIT_GWEI), deposit(2, MIN_DEPOSIT_GWEI)],
                    first_index: 1,
                }
            );
            assert_eq!(c.deposit_count(), 2);
            let logs = c.logs(0, 10, 100, 600).unwrap();
            assert_eq!(
                logs.iter().map(|l| (l.index, l.block)).collect::<Vec<_>>(),
                vec![(0, 1), (1, 3)]
            );
            assert_eq!(logs[1].deposit, deposit(9, MIN_DEPOSIT_GWEI));
            let after: Vec<_> = (0..=6).map(|n| c.block(n, 600).unwrap()).collect();
            // Blocks before the reorg keep their hashes; every replaced one changes, and the
            // chain of parent hashes holds.
            assert_eq!(after[..3], before[..3]);
            for n in 3..=6 {
                assert_ne!(after[n].hash, before[n].hash, "block {n}");
                assert_eq!(after[n].parent_hash, after[n - 1].hash);
            }
            // A reorg that drops nothing still replaces the blocks.
            let empty = c.reorg(1, vec![], 600).unwrap();
            assert!(empty.dropped.is_empty());
            assert_ne!(c.block(6, 600).unwrap().hash, after[6].hash);
            assert_eq!(c.block(5, 600).unwrap().hash, after[5].hash);
            let after: Vec<_> = (0..=6).map(|n| c.block(n, 600).unwrap()).collect();
            (before, after)
        };
        let c = DevContract::open(dir.path(), 100, 0).unwrap();
        assert_eq!(c.deposit_count(), 2);
        let again: Vec<_> = (0..=6).map(|n| c.block(n, 600).unwrap()).collect();
        assert_eq!(again, after);
        assert_ne!(again, before);
    }
}

//! [`FollowedLog`]: what an authority's follower has read of the deposit contract, persisted in
//! its own sled database (`<data dir>/deposit-log`), so a restarted node resumes following
//! where it stopped instead of reading the contract's log again from its first block (which,
//! against a real execution client, is millions of blocks of `eth_getLogs`).
//!
//! One tree holds every followed deposit (`d` + index, big-endian → `DepositData`) and the
//! followed block with the deposit count at its end (`followed`); each follower step writes
//! both in one atomic, flushed batch, so the stored deposits are always exactly the followed
//! count. The contract address is stored too: a log of another contract is refused at open.

use std::path::{Path, PathBuf};

use super::dev_contract::Eth1Block;
use super::follower::Followed;
use crate::chain::block::DepositData;

const DEPOSIT_PREFIX: u8 = b'd';
const FOLLOWED_KEY: &[u8] = b"followed";
const CONTRACT_KEY: &[u8] = b"contract";
const FOLLOWED_BYTES: usize = 8 + 32 + 32 + 8 + 8;

/// Why the followed log cannot be opened or written (ours: the disk or the database).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The database failed.
    #[error("deposit log {path}: {reason}")]
    Storage {
        /// The database directory.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The stored log is damaged or belongs to another contract; delete the directory to
    /// follow the contract again from its first block.
    #[error("deposit log {path}: {reason} (delete the directory to follow the contract again)")]
    Unusable {
        /// The database directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The persisted followed log of one node.
#[derive(Debug, Clone)]
pub struct FollowedLog {
    path: PathBuf,
    tree: sled::Tree,
}

fn deposit_key(index: u64) -> [u8; 9] {
    let mut key = [DEPOSIT_PREFIX; 9];
    if let Some(tail) = key.get_mut(1..) {
        tail.copy_from_slice(&index.to_be_bytes());
    }
    key
}

fn encode_followed(block: &Eth1Block, count: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(FOLLOWED_BYTES);
    out.extend_from_slice(&block.number.to_le_bytes());
    out.extend_from_slice(&block.hash);
    out.extend_from_slice(&block.parent_hash);
    out.extend_from_slice(&block.timestamp.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out
}

fn decode_followed(bytes: &[u8]) -> Option<(Eth1Block, u64)> {
    if bytes.len() != FOLLOWED_BYTES {
        return None;
    }
    let (number, rest) = bytes.split_first_chunk::<8>()?;
    let (hash, rest) = rest.split_first_chunk::<32>()?;
    let (parent_hash, rest) = rest.split_first_chunk::<32>()?;
    let (timestamp, rest) = rest.split_first_chunk::<8>()?;
    let count: [u8; 8] = rest.try_into().ok()?;
    Some((
        Eth1Block {
            number: u64::from_le_bytes(*number),
            hash: *hash,
            parent_hash: *parent_hash,
            timestamp: u64::from_le_bytes(*timestamp),
        },
        u64::from_le_bytes(count),
    ))
}

impl FollowedLog {
    /// Opens (or creates) the log in `dir` for `contract`; returns it with everything followed
    /// so far (every deposit from index 0 and the block followed up to), if anything was.
    pub fn open(dir: &Path, contract: [u8; 20]) -> Result<(Self, Option<Followed>), LogError> {
        let storage = |e: sled::Error| LogError::Storage {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        };
        let unusable = |reason: String| LogError::Unusable {
            path: dir.to_path_buf(),
            reason,
        };
        let db = crate::store::open_sled(&sled::Config::new().path(dir).cache_capacity(8 << 20))
            .map_err(storage)?;
        let tree = db.open_tree("followed").map_err(storage)?;
        match tree.get(CONTRACT_KEY).map_err(storage)? {
            Some(stored) if stored.as_ref() != contract => {
                return Err(unusable(format!(
                    "it follows contract 0x{}, not 0x{}",
                    hex::encode(&stored),
                    hex::encode(contract)
                )));
            }
            Some(_) => {}
            None => {
                tree.insert(CONTRACT_KEY, &contract).map_err(storage)?;
                tree.flush().map_err(storage)?;
            }
        }
        let log = Self {
            path: dir.to_path_buf(),
            tree,
        };
        let Some(followed) = log.tree.get(FOLLOWED_KEY).map_err(storage)? else {
            return Ok((log, None));
        };
        let (block, count) =
            decode_followed(&followed).ok_or_else(|| unusable("malformed `followed`".into()))?;
        let mut deposits = Vec::new();
        for entry in log.tree.scan_prefix([DEPOSIT_PREFIX]) {
            let (key, value) = entry.map_err(storage)?;
            let expected = deposit_key(deposits.len() as u64);
            if key.as_ref() != expected {
                return Err(unusable(format!(
                    "deposit key {} where {} was expected: the log has a gap",
                    hex::encode(&key),
                    hex::encode(expected)
                )));
            }
            let deposit = DepositData::decode(&value)
                .map_err(|e| unusable(format!("deposit {}: {e}", deposits.len())))?;
            deposits.push(deposit);
        }
        if deposits.len() as u64 != count {
            return Err(unusable(format!(
                "{} deposits stored, the followed block says {count}",
                deposits.len()
            )));
        }
        Ok((
            log,
            Some(Followed {
                deposits,
                first_index: 0,
                block,
                deposit_count: count,
            }),
        ))
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records one follower step: its new deposits and the block followed up to, atomically
    /// and flushed.
    pub fn append(&self, followed: &Followed) -> Result<(), LogError> {
        let storage = |e: sled::Error| LogError::Storage {
            path: self.path.clone(),
            reason: e.to_string(),
        };
        let mut batch = sled::Batch::default();
        for (index, deposit) in (followed.first_index..).zip(&followed.deposits) {
            batch.insert(&deposit_key(index), deposit.encode());
        }
        batch.insert(
            FOLLOWED_KEY,
            encode_followed(&followed.block, followed.deposit_count),
        );
        self.tree.apply_batch(batch).map_err(storage)?;
        self.tree.flush().map_err(storage)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deposit(i: u8) -> DepositData {
        DepositData {
            pubkey: [i; 48],
            withdrawal_credentials: [1; 32],
            amount: 32_000_000_000,
            signature: [2; 96],
        }
    }

    fn block(number: u64) -> Eth1Block {
        Eth1Block {
            number,
            hash: [number as u8; 32],
            parent_hash: [number.wrapping_sub(1) as u8; 32],
            timestamp: number * 12,
        }
    }

    #[test]
    fn follower_steps_survive_a_reopen_and_another_contract_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deposit-log");
        {
            let (log, restored) = FollowedLog::open(&path, [7; 20]).unwrap();
            assert!(restored.is_none());
            log.append(&Followed {
                deposits: vec![deposit(0), deposit(1)],
                first_index: 0,
                block: block(5),
                deposit_count: 2,
            })
            .unwrap();
            log.append(&Followed {
                deposits: vec![],
                first_index: 2,
                block: block(6),
                deposit_count: 2,
            })
            .unwrap();
            log.append(&Followed {
                deposits: vec![deposit(2)],
                first_index: 2,
                block: block(9),
                deposit_count: 3,
            })
            .unwrap();
        }
        let (_, restored) = FollowedLog::open(&path, [7; 20]).unwrap();
        assert_eq!(
            restored,
            Some(Followed {
                deposits: vec![deposit(0), deposit(1), deposit(2)],
                first_index: 0,
                block: block(9),
                deposit_count: 3,
            })
        );
        let err = FollowedLog::open(&path, [8; 20]).unwrap_err();
        assert!(
            matches!(err, LogError::Unusable { .. }) && err.to_string().contains("0x0707"),
            "{err}"
        );
    }
}

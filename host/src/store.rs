//! Durable storage behind a small trait: the sled backend for nodes, an in-memory one for fast
//! tests.
//!
//! Everything a block import changes — the block, the state it touches and the new head — is
//! one [`WriteBatch`], committed atomically and flushed to disk before
//! [`KvStore::commit`] returns. Keys of the chain live in one keyspace (a single sled tree) so
//! that one batch covers them all; see [`keys`].

mod ban_list;
mod dir_lock;
mod memory;
mod sled_open;
mod sled_store;
pub mod value_log;

pub use ban_list::BanList;
pub use dir_lock::{DataDirLock, DataDirLockError, LOCK_FILE};

pub use memory::MemoryStore;
pub use sled_open::{open_sled, wait_released};
pub use sled_store::SledStore;

/// Why storage failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database reported an error (I/O, corruption it detected).
    #[error("database at {path}: {message}")]
    Backend {
        /// Where the database lives.
        path: String,
        /// The backend's message.
        message: String,
    },
    /// A stored value does not decode.
    #[error("corrupt store: {0}")]
    Corrupt(String),
}

/// Writes applied together, all or nothing.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push((key.into(), Some(value.into())));
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        self.ops.push((key.into(), None));
    }

    /// The operations, in order.
    pub fn ops(&self) -> &[(Vec<u8>, Option<Vec<u8>>)] {
        &self.ops
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Callback of [`KvStore::scan_prefix`]: called with each key and value; an error stops the scan.
pub type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), StoreError> + 'a;

/// A key-value store with atomic, durable batches.
pub trait KvStore: Send + Sync {
    /// The value at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// Calls `visit` for every key starting with `prefix`, in key order.
    fn scan_prefix(&self, prefix: &[u8], visit: &mut Visitor<'_>) -> Result<(), StoreError>;
    /// Calls `visit` for at most `limit` keys in `start..end`, in key order (pruning walks a
    /// range in bounded batches). The default filters a scan of the range's common prefix;
    /// the backends seek to `start`.
    fn scan_range(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<(), StoreError> {
        scan_range_by_prefix(self, start, end, limit, visit)
    }
    /// Applies `batch` atomically; when this returns `Ok` the batch survives a crash.
    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError>;
    /// Applies `batch` atomically without waiting for the disk: a crash before the next
    /// [`commit`](Self::commit) returns (or the backend writes out on its own) loses the whole
    /// batch, never part of it, and never a batch committed before it. For work that is simply
    /// redone after a crash (pruning), so that it adds no disk flush of its own to the ones
    /// import waits for. The default commits durably.
    fn commit_unflushed(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        self.commit(batch)
    }
    /// The keyspace `name` of the same database, beside the chain's (its own sled tree): for
    /// derived data kept apart from the chain's keys, such as persisted state anchors. Asking
    /// twice for one name gives the same keyspace.
    fn tree(&self, name: &str) -> Result<std::sync::Arc<dyn KvStore>, StoreError>;
    /// Where this keyspace lives, for error messages (a path and tree, or `memory`).
    fn location(&self) -> String;
}

/// [`KvStore::scan_range`] as a filtered scan of the range's common prefix.
pub fn scan_range_by_prefix<S: KvStore + ?Sized>(
    store: &S,
    start: &[u8],
    end: &[u8],
    limit: usize,
    visit: &mut Visitor<'_>,
) -> Result<(), StoreError> {
    let common = start.iter().zip(end).take_while(|(a, b)| a == b).count();
    let prefix = start.get(..common).unwrap_or_default();
    let mut seen = 0usize;
    store.scan_prefix(prefix, &mut |key, value| {
        if seen < limit && key >= start && key < end {
            seen = seen.saturating_add(1);
            visit(key, value)?;
        }
        Ok(())
    })
}

/// The chain's key layout. Integers in keys are big-endian so that scans come in order.
pub mod keys {
    use crate::hashes::BlockHash;

    /// Encoded block by hash: `b` ‖ hash.
    pub fn block(hash: &BlockHash) -> Vec<u8> {
        [b"b".as_slice(), hash.as_bytes()].concat()
    }
    /// Canonical block hash at a height: `h` ‖ height.
    pub fn height(height: u64) -> Vec<u8> {
        [b"h".as_slice(), &height.to_be_bytes()].concat()
    }
    /// Undo record of a block (what reverting it restores): `u` ‖ hash.
    pub fn undo(hash: &BlockHash) -> Vec<u8> {
        [b"u".as_slice(), hash.as_bytes()].concat()
    }
    /// The eth1 state after a block (agreed eth1 data, deposit index, votes): `e` ‖ hash.
    pub fn eth1(hash: &BlockHash) -> Vec<u8> {
        [b"e".as_slice(), hash.as_bytes()].concat()
    }
    /// The module schedule after a block (scheduled modules, pending upgrade votes): `s` ‖
    /// hash.
    pub fn schedule(hash: &BlockHash) -> Vec<u8> {
        [b"s".as_slice(), hash.as_bytes()].concat()
    }
    /// The first signed header this node saw for `(slot, proposer)` (header ‖ signature): what
    /// a second, different header of that authority at that slot is evidence against. One
    /// record per slot of an authority chain: `q` ‖ slot ‖ proposer.
    pub fn first_header(slot: u64, proposer: u32) -> Vec<u8> {
        [
            FIRST_HEADER_PREFIX,
            &slot.to_be_bytes(),
            &proposer.to_be_bytes(),
        ]
        .concat()
    }
    /// Prefix of the equivocation evidence records.
    pub const EVIDENCE_PREFIX: &[u8] = b"x";
    /// Evidence that the authority `proposer` signed two blocks for `slot` (two signed
    /// headers): `x` ‖ slot ‖ proposer.
    pub fn evidence(slot: u64, proposer: u32) -> Vec<u8> {
        [
            EVIDENCE_PREFIX,
            &slot.to_be_bytes(),
            &proposer.to_be_bytes(),
        ]
        .concat()
    }
    /// Prefix of the validator chunk records.
    pub const VALIDATOR_CHUNK_PREFIX: &[u8] = b"rv";
    /// Validator chunk `chunk`: the encodings of validators `chunk × CHUNK_LEN` onwards (at most
    /// [`CHUNK_LEN`](crate::state::chunked::CHUNK_LEN) of them, fewer only in the last chunk),
    /// concatenated: `rv` ‖ chunk.
    pub fn validator_chunk(chunk: u32) -> Vec<u8> {
        [VALIDATOR_CHUNK_PREFIX, &chunk.to_be_bytes()].concat()
    }
    /// Prefix of the balance chunk records.
    pub const BALANCE_CHUNK_PREFIX: &[u8] = b"rb";
    /// Balance chunk `chunk`: the balances of the validators of validator chunk `chunk`, 8
    /// bytes each (little-endian): `rb` ‖ chunk. Apart from the validators so that a top-up
    /// rewrites 8 KiB, not a chunk of records.
    pub fn balance_chunk(chunk: u32) -> Vec<u8> {
        [BALANCE_CHUNK_PREFIX, &chunk.to_be_bytes()].concat()
    }
    /// The per-validator records of store format 3, read only to migrate a store to chunk
    /// records (and deleted once it is).
    pub mod legacy {
        /// Prefix of validator records.
        pub const VALIDATOR_PREFIX: &[u8] = b"v";
        /// Validator record: `v` ‖ index.
        pub fn validator(index: u32) -> Vec<u8> {
            [VALIDATOR_PREFIX, &index.to_be_bytes()].concat()
        }
        /// Prefix of balances.
        pub const BALANCE_PREFIX: &[u8] = b"l";
        /// Balance: `l` ‖ index.
        pub fn balance(index: u32) -> Vec<u8> {
            [BALANCE_PREFIX, &index.to_be_bytes()].concat()
        }
    }
    /// deposits@3's queue extent after a block (entries ever pushed, front offset,
    /// `deposit_balance_to_consume`): `p` ‖ hash. Absent: the state has no queue.
    pub fn pending(hash: &BlockHash) -> Vec<u8> {
        [b"p".as_slice(), hash.as_bytes()].concat()
    }
    /// Prefix of the canonical chain's queued-deposit entries.
    pub const PENDING_ENTRY_PREFIX: &[u8] = b"n";
    /// The `index`-th deposit ever queued on the canonical chain (encoded
    /// `PendingDeposit`): `n` ‖ index.
    pub fn pending_entry(index: u64) -> Vec<u8> {
        [PENDING_ENTRY_PREFIX, &index.to_be_bytes()].concat()
    }
    /// Prefix of the side-block index.
    pub const SIDE_BLOCK_PREFIX: &[u8] = b"k";
    /// A stored block that is not (or no longer) canonical at `height`: `k` ‖ height ‖ hash.
    /// Written when fork choice stores a side-branch block or reverts a canonical one, so
    /// pruning finds the blocks no height index names (the record is empty).
    pub fn side_block(height: u64, hash: &BlockHash) -> Vec<u8> {
        [SIDE_BLOCK_PREFIX, &height.to_be_bytes(), hash.as_bytes()].concat()
    }
    /// Prefix of the first-signed-header records (see [`first_header`]).
    pub const FIRST_HEADER_PREFIX: &[u8] = b"q";
    /// How far pruning has gone (`chain::prune`): one record, rewritten in each pruning batch.
    pub const PRUNED: &[u8] = b"mpruned";
    /// The head record.
    pub const HEAD: &[u8] = b"mhead";
    /// The finalized checkpoint votes are counted from (`chain::finality`), as of the head's
    /// parent: height and epoch, 8 bytes each, big-endian. Written with every block of a chain
    /// with two or more authorities; an open walks the blocks above it only.
    pub const FINALITY_ROOT: &[u8] = b"mfinalroot";
    /// The genesis hash.
    pub const GENESIS: &[u8] = b"mgenesis";
    /// The store format version.
    pub const FORMAT: &[u8] = b"mformat";
    /// The operator's open proposals (what this node's blocks vote for), kept across restarts.
    pub const PROPOSALS: &[u8] = b"mproposals";
    /// Height of the checkpoint a chain was started from (absent: it started at genesis). No
    /// block between genesis and this height is stored.
    pub const BASE: &[u8] = b"mbase";
}

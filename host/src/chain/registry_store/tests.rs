//! The chunk records on a real sled store: interrupted initialisations, import and revert
//! across a chunk boundary, corrupt records, and the migration from per-validator records.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::chain::block::DepositData;
use crate::chain::genesis::Genesis;
use crate::chain::native_deposits::Verification;
use crate::chain::workload::{self, DevDepositLog};
use crate::chain::{Chain, DepositEngine, Head, OpenError, STORE_FORMAT};
use crate::store::SledStore;

/// Validators per batch in these tests: one chunk, so a 3,000-validator genesis takes 3 record
/// batches.
const PER_BATCH: usize = CHUNK_LEN;
const ETH: u64 = 1_000_000_000;

/// A sled store whose commits fail once `allowed` have succeeded: a node killed part way
/// through initialising or migrating its store (what was committed stays, nothing after it
/// arrives).
struct Interrupted {
    inner: SledStore,
    allowed: usize,
    commits: AtomicUsize,
}

impl KvStore for Interrupted {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(key)
    }
    fn scan_prefix(
        &self,
        prefix: &[u8],
        visit: &mut crate::store::Visitor<'_>,
    ) -> Result<(), StoreError> {
        self.inner.scan_prefix(prefix, visit)
    }
    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        if self.commits.fetch_add(1, Ordering::SeqCst) >= self.allowed {
            return Err(StoreError::Backend {
                path: self.location(),
                message: "interrupted".into(),
            });
        }
        self.inner.commit(batch)
    }
    fn tree(&self, name: &str) -> Result<Arc<dyn KvStore>, StoreError> {
        self.inner.tree(name)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}

fn engine() -> DepositEngine {
    DepositEngine::Native(Verification::Batched)
}

/// Opens the chain at `path` through a store that stops after `allowed` commits; `None` if
/// the open got that far, else the chain.
fn open_interrupted(path: &Path, genesis: &Genesis, allowed: usize) -> Option<Chain> {
    let store = Arc::new(Interrupted {
        inner: SledStore::open(path).unwrap(),
        allowed,
        commits: AtomicUsize::new(0),
    });
    match Chain::open_batched(store, genesis.clone(), engine(), PER_BATCH) {
        Ok(chain) => Some(chain),
        Err(err) => {
            assert!(err.to_string().contains("interrupted"), "{err}");
            None
        }
    }
}

/// Opens the chain at `path` (initialising it if needed).
fn open_chain(path: &Path, genesis: &Genesis) -> Chain {
    let store = Arc::new(SledStore::open(path).unwrap());
    Chain::open_batched(store, genesis.clone(), engine(), PER_BATCH).unwrap()
}

/// The head and registry of a chain.
fn state(chain: &Chain) -> (Head, Registry) {
    (chain.head(), chain.registry().as_ref().clone())
}

/// Opens the store at `path` (initialising it if needed); the head and the registry.
fn open(path: &Path, genesis: &Genesis) -> (Head, Registry) {
    state(&open_chain(path, genesis))
}

/// Keys under `prefix` in the store at `path`.
fn count(path: &Path, prefix: &[u8]) -> usize {
    let store = SledStore::open(path).unwrap();
    let mut count = 0;
    store
        .scan_prefix(prefix, &mut |_, _| {
            count += 1;
            Ok(())
        })
        .unwrap();
    count
}

/// (validator chunk records, balance chunk records) at `path`.
fn chunk_records(path: &Path) -> (usize, usize) {
    (
        count(path, keys::VALIDATOR_CHUNK_PREFIX),
        count(path, keys::BALANCE_CHUNK_PREFIX),
    )
}

/// Per-validator (format 3) records at `path`.
fn legacy_records(path: &Path) -> usize {
    count(path, keys::legacy::VALIDATOR_PREFIX) + count(path, keys::legacy::BALANCE_PREFIX)
}

fn format(path: &Path) -> Option<Vec<u8>> {
    SledStore::open(path).unwrap().get(keys::FORMAT).unwrap()
}

/// Opens the store at `path` twice: the first open finishes whatever was interrupted, the
/// second reads the registry back from the records and checks it against the head's root.
fn assert_recovers_to(path: &Path, genesis: &Genesis, expected: &(Head, Registry)) {
    let first = open(path, genesis);
    assert_eq!(first.0, expected.0);
    let reopened = open(path, genesis);
    assert_eq!(reopened.0, expected.0);
    assert!(reopened.1 == expected.1, "the stored registry differs");
    assert_eq!(format(path), Some(STORE_FORMAT.to_le_bytes().to_vec()));
    assert_eq!(legacy_records(path), 0);
}

#[test]
fn a_genesis_write_interrupted_at_any_batch_reopens_to_the_uninterrupted_state_root() {
    let genesis = Genesis::generated("interrupted-genesis", 3_000, 7);
    let dir = tempfile::tempdir().unwrap();
    let expected = open(&dir.path().join("uninterrupted"), &genesis);
    assert_eq!(chunk_records(&dir.path().join("uninterrupted")), (3, 3));
    // 0: nothing written; 1, 2: record batches; 3: every record, not the final batch.
    for allowed in 0..=3 {
        let path = dir.path().join(format!("interrupted-{allowed}"));
        assert!(open_interrupted(&path, &genesis, allowed).is_none());
        assert_eq!(format(&path), None, "FORMAT was written");
        assert_eq!(chunk_records(&path), (allowed, allowed));
        assert_recovers_to(&path, &genesis, &expected);
    }
}

#[test]
fn records_a_larger_interrupted_registry_left_are_deleted_before_a_genesis_write() {
    let larger = Genesis::generated("another-chain", 5_000, 8);
    let genesis = Genesis::generated("interrupted-genesis", 3_000, 7);
    let dir = tempfile::tempdir().unwrap();
    let expected = open(&dir.path().join("uninterrupted"), &genesis);
    let path = dir.path().join("interrupted");
    // Every record of the 5,000-validator registry (5 chunks), not its final batch.
    assert!(open_interrupted(&path, &larger, 5).is_none());
    assert_eq!(chunk_records(&path), (5, 5));
    // And per-validator records an interrupted format-3 initialisation left.
    let store = SledStore::open(&path).unwrap();
    let mut batch = WriteBatch::new();
    batch.put(keys::legacy::validator(0), vec![1; 3]);
    batch.put(keys::legacy::balance(4_999), vec![2; 8]);
    store.commit(&batch).unwrap();
    drop(store);
    assert_recovers_to(&path, &genesis, &expected);
    assert_eq!(chunk_records(&path), (3, 3));
}

/// Adds `deposits` to `log`, builds the next block carrying them and imports it.
fn import(chain: &mut Chain, log: &mut DevDepositLog, deposits: Vec<DepositData>) {
    for deposit in deposits {
        log.push(deposit);
    }
    let slot = chain.head().slot + 1;
    let block = chain
        .build_block_from(slot, 0, log.eth1_data(), log)
        .unwrap();
    chain.import(&block).unwrap();
}

/// A new validator's deposit.
fn new_validator(seed: u64) -> DepositData {
    workload::new_validator(seed, 32 * ETH, [0; 4])
}

/// A top-up of the validator with `pubkey`.
fn top_up(pubkey: [u8; 48], amount: u64) -> DepositData {
    workload::unsigned(pubkey, amount)
}

/// 1,020 validators: the first block's deposits cross into chunk 1.
fn boundary_genesis() -> Genesis {
    Genesis::generated("chunk-boundary", 1_020, 9)
}

/// Imports into `chain` block 1 (8 new validators, 1,020 to 1,027, across the chunk
/// boundary, and a top-up in chunk 0) and returns the state after it.
fn import_across_the_boundary(chain: &mut Chain, log: &mut DevDepositLog) -> (Head, Registry) {
    let genesis = boundary_genesis();
    let deposits = (100..108)
        .map(new_validator)
        .chain([top_up(genesis.validators[3].pubkey, ETH)])
        .collect();
    import(chain, log, deposits);
    assert_eq!(chain.registry().len(), 1_028);
    state(chain)
}

#[test]
fn imports_and_reverts_across_a_chunk_boundary_reopen_to_the_same_state() {
    let genesis = boundary_genesis();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain");
    let mut log = DevDepositLog::new();
    let mut chain = open_chain(&path, &genesis);
    let at_genesis = state(&chain);
    let after_1 = import_across_the_boundary(&mut chain, &mut log);
    // Block 2: top-ups in chunk 0 and (validator 1,025) chunk 1, and one more validator.
    let deposits = vec![
        top_up(genesis.validators[1_000].pubkey, 2 * ETH),
        top_up(new_validator(105).pubkey, 3 * ETH),
        new_validator(108),
    ];
    import(&mut chain, &mut log, deposits);
    let after_2 = state(&chain);
    drop(chain);

    let reopened = open_chain(&path, &genesis);
    assert_eq!(reopened.head(), after_2.0);
    assert!(*reopened.registry() == after_2.1);
    drop(reopened);
    assert_eq!(chunk_records(&path), (2, 2));

    let mut chain = open_chain(&path, &genesis);
    chain.revert_head().unwrap();
    drop(chain);
    assert_recovers_to(&path, &genesis, &after_1);

    let mut chain = open_chain(&path, &genesis);
    chain.revert_head().unwrap();
    drop(chain);
    assert_recovers_to(&path, &genesis, &at_genesis);
    // Chunk 1 emptied: its records are deleted, not left empty.
    assert_eq!(chunk_records(&path), (1, 1));
}

/// A store initialised with `genesis` at a fresh `path`, then `tamper`ed with.
fn tampered(path: &Path, genesis: &Genesis, tamper: impl FnOnce(&SledStore)) {
    drop(open_chain(path, genesis));
    let store = SledStore::open(path).unwrap();
    tamper(&store);
}

/// Replaces (or with `None` deletes) `key`.
fn set(store: &SledStore, key: Vec<u8>, value: Option<Vec<u8>>) {
    let mut batch = WriteBatch::new();
    match value {
        Some(value) => batch.put(key, value),
        None => batch.delete(key),
    }
    store.commit(&batch).unwrap();
}

/// `key`'s value changed by `edit`.
fn edited(store: &SledStore, key: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Option<Vec<u8>> {
    let mut value = store.get(key).unwrap().unwrap();
    edit(&mut value);
    Some(value)
}

#[test]
fn corrupt_chunk_records_are_refused_with_an_error_naming_the_chunk() {
    type Tamper = Box<dyn FnOnce(&SledStore)>;
    let genesis = Genesis::generated("corrupt-chunks", 3_000, 7);
    let v = crate::state::VALIDATOR_BYTES;
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "truncated",
            Box::new(|s| {
                let value = edited(s, &keys::validator_chunk(1), |b| b.truncate(b.len() - 1));
                set(s, keys::validator_chunk(1), value);
            }),
            "validator chunk 1: the record is 123903 bytes",
        ),
        (
            "a balance short",
            Box::new(|s| {
                let value = edited(s, &keys::balance_chunk(2), |b| b.truncate(b.len() - 8));
                set(s, keys::balance_chunk(2), value);
            }),
            "registry chunk 2 holds 952 validators but 951 balances",
        ),
        (
            "missing",
            Box::new(|s| set(s, keys::validator_chunk(1), None)),
            "validator chunk records are not dense: chunk 1 is missing",
        ),
        (
            "partial before the last",
            Box::new(move |s| {
                let value = edited(s, &keys::validator_chunk(0), |b| b.truncate(b.len() - v));
                set(s, keys::validator_chunk(0), value);
            }),
            "validator chunk 1 follows chunk 0, which holds 1023 of 1024",
        ),
        (
            "a validator that does not decode",
            Box::new(move |s| {
                // Validator 1,029's slashed flag (after pubkey, credentials, effective balance).
                let value = edited(s, &keys::validator_chunk(1), |b| b[5 * v + 88] = 7);
                set(s, keys::validator_chunk(1), value);
            }),
            "validator chunk 1: validator 1029",
        ),
        (
            "a malformed key",
            Box::new(|s| set(s, b"rb\x00".to_vec(), Some(vec![0; 8]))),
            "balance chunk record has the malformed key 726200",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, (case, tamper, expected)) in cases.into_iter().enumerate() {
        let path = dir.path().join(i.to_string());
        tampered(&path, &genesis, tamper);
        let store = Arc::new(SledStore::open(&path).unwrap());
        let err = Chain::open_batched(store, genesis.clone(), engine(), PER_BATCH)
            .err()
            .unwrap_or_else(|| panic!("{case}: the store opened"));
        match &err {
            OpenError::Corrupt(msg) | OpenError::Store(StoreError::Corrupt(msg)) => {
                assert!(msg.contains(expected), "{case}: {msg}")
            }
            other => panic!("{case}: expected a corrupt-store error, got {other}"),
        }
    }
}

/// Rewrites the chain at `path` in the per-validator layout of store format 3.
fn to_per_validator_records(path: &Path) {
    let store = SledStore::open(path).unwrap();
    let registry = load_registry(&store).unwrap();
    let mut batch = WriteBatch::new();
    for (i, (v, b)) in (0u32..).zip(registry.validators().iter().zip(registry.balances())) {
        batch.put(keys::legacy::validator(i), v.encode().to_vec());
        batch.put(keys::legacy::balance(i), b.to_le_bytes().to_vec());
    }
    for prefix in [keys::VALIDATOR_CHUNK_PREFIX, keys::BALANCE_CHUNK_PREFIX] {
        store
            .scan_prefix(prefix, &mut |key, _| {
                batch.delete(key.to_vec());
                Ok(())
            })
            .unwrap();
    }
    batch.put(
        keys::FORMAT,
        legacy::PER_VALIDATOR_FORMAT.to_le_bytes().to_vec(),
    );
    store.commit(&batch).unwrap();
}

/// A format-3 store at `path`: the boundary genesis and one block across the boundary.
fn per_validator_store(path: &Path) -> (Head, Registry) {
    let mut chain = open_chain(path, &boundary_genesis());
    let expected = import_across_the_boundary(&mut chain, &mut DevDepositLog::new());
    drop(chain);
    to_per_validator_records(path);
    assert_eq!(chunk_records(path), (0, 0));
    assert_eq!(legacy_records(path), 2 * 1_028);
    expected
}

#[test]
fn a_per_validator_store_is_migrated_and_an_interrupted_migration_reopens_to_the_same_state() {
    let genesis = boundary_genesis();
    let dir = tempfile::tempdir().unwrap();
    let mut interruptions = 0;
    // Each run stops one commit later: chunk records, FORMAT, deleting the old records.
    for allowed in 0.. {
        let path = dir.path().join(format!("migrated-{allowed}"));
        let expected = per_validator_store(&path);
        if let Some(chain) = open_interrupted(&path, &genesis, allowed) {
            assert_eq!(state(&chain).0, expected.0);
            drop(chain);
            assert_recovers_to(&path, &genesis, &expected);
            assert_eq!(chunk_records(&path), (2, 2));
            break;
        }
        interruptions += 1;
        assert_recovers_to(&path, &genesis, &expected);
        assert_eq!(chunk_records(&path), (2, 2));
    }
    // 2 chunk batches, FORMAT, 2 batches deleting 2,056 old records.
    assert_eq!(interruptions, 5);
}

#[test]
fn an_unknown_store_format_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let genesis = Genesis::generated("format", 10, 7);
    tampered(dir.path(), &genesis, |s| {
        set(s, keys::FORMAT.to_vec(), Some(9u32.to_le_bytes().to_vec()))
    });
    let store = Arc::new(SledStore::open(dir.path()).unwrap());
    let err = Chain::open_batched(store, genesis, engine(), PER_BATCH)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("store format 9") && err.to_string().contains("migrates format 3"),
        "{err}"
    );
}

/// Rewrites the store at `path` as a node from before the value log left it (format 4): every
/// logged value inline under its key, no pointers, no value log.
fn without_value_log(path: &Path) {
    use crate::store::value_log;
    let mut inline = Vec::new();
    {
        let store = SledStore::open(path).unwrap();
        store
            .scan_prefix(&[], &mut |k, v| {
                if value_log::is_logged(k) {
                    inline.push((k.to_vec(), v.to_vec()));
                }
                Ok(())
            })
            .unwrap();
    }
    assert!(crate::store::wait_released(path, std::time::Duration::from_secs(30)).unwrap());
    let db = sled::open(path).unwrap();
    let tree = db.open_tree("chain").unwrap();
    let internal: Vec<_> = tree
        .iter()
        .keys()
        .map(Result::unwrap)
        .filter(|k| value_log::is_internal(k))
        .collect();
    for key in internal {
        tree.remove(key).unwrap();
    }
    for (key, value) in inline {
        tree.insert(key, value).unwrap();
    }
    tree.insert(keys::FORMAT, &4u32.to_le_bytes()[..]).unwrap();
    db.flush().unwrap();
    drop(tree);
    drop(db);
    std::fs::remove_dir_all(path.join("values")).unwrap();
    assert!(crate::store::wait_released(path, std::time::Duration::from_secs(30)).unwrap());
}

#[test]
fn a_store_from_before_the_value_log_opens_with_the_same_head_and_registry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain");
    let genesis = Genesis::generated("value-log", 40, 7);
    let expected = {
        let mut chain = open_chain(&path, &genesis);
        let mut log = DevDepositLog::new();
        for i in 0..3u64 {
            import(&mut chain, &mut log, vec![new_validator(1_000 + i)]);
        }
        state(&chain)
    };
    without_value_log(&path);
    assert!(!path.join("values").exists());
    assert_recovers_to(&path, &genesis, &expected);
    // Every block, undo record and chunk moved into the log: nothing logged is inline.
    let db = sled::open(&path).unwrap();
    let tree = db.open_tree("chain").unwrap();
    let inline = tree
        .iter()
        .keys()
        .map(Result::unwrap)
        .filter(|k| crate::store::value_log::is_logged(k))
        .count();
    assert_eq!(inline, 0);
}

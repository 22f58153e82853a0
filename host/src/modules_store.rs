//! The module store: uploaded module components kept content-addressed (by sha256) in their own
//! sled database under `<data_dir>/modules`, each with its metadata.
//!
//! A module enters the store only through the module lifecycle's store stage ([`lifecycle`]:
//! an upload or a module fetched for the chain), after it has been validated, precompiled and
//! warmed; the bytes and the metadata are written in one atomic,
//! flushed batch, so a crash leaves either both or neither. Nothing in the store is ever
//! executed from a peer's artifact: only the wasm bytes are kept here, compiled locally.

pub mod lifecycle;
pub mod upload;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::hashes::ModuleHash;

/// Name of the store's directory inside the data directory.
pub const MODULES_DIR: &str = "modules";

/// Why the module store failed. Always our side's fault (disk, database), never the module's.
#[derive(Debug, thiserror::Error)]
pub enum ModuleStoreError {
    /// sled reported an error.
    #[error("module store at {}: {message}", path.display())]
    Backend {
        /// The database directory.
        path: PathBuf,
        /// sled's message.
        message: String,
    },
    /// A stored metadata record does not decode.
    #[error("module store at {}: corrupt metadata for module {sha256}: {message}", path.display())]
    Corrupt {
        /// The database directory.
        path: PathBuf,
        /// The module's hash.
        sha256: ModuleHash,
        /// What is wrong.
        message: String,
    },
}

/// What the node knows about a stored module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRecord {
    /// SHA-256 of the component bytes (hex in JSON): the module's identity.
    pub sha256: ModuleHash,
    /// The module kind (`deposits`, `checkpoint`, `gossip-policy`).
    pub kind: String,
    /// The contract (WIT package) version it was built against.
    pub contract: String,
    /// The algorithm version the module reports.
    pub module_version: u32,
    /// The module's own one-line description.
    pub description: String,
    /// Size of the component in bytes.
    pub size: u64,
    /// When this node first stored it (ms since the Unix epoch).
    pub first_seen_unix_ms: u64,
    /// Where it came from (e.g. `admin upload from 127.0.0.1`).
    pub source: String,
    /// Time to compile it, in milliseconds.
    pub compile_ms: u64,
    /// Time to instantiate and warm it (its dry run included), in microseconds.
    pub warm_us: u64,
    /// Fuel of its warm-up dry run (0 in records written before warm-ups were recorded).
    #[serde(default)]
    pub warm_fuel: u64,
    /// Recent real inputs of the node its warm-up replayed (0: only the built-in ones).
    #[serde(default)]
    pub warm_real_inputs: u32,
    /// Size of the compiled artifact in bytes.
    pub compiled_size: u64,
}

impl ModuleRecord {
    /// `<kind>-v<version>@<first 12 hex digits of sha256>`, as logs name modules.
    pub fn name(&self) -> String {
        format!(
            "{}-v{}@{}",
            self.kind,
            self.module_version,
            self.sha256.to_hex().get(..12).unwrap_or_default()
        )
    }
}

/// A module a node runs for a kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActiveModule {
    /// The kind.
    pub kind: String,
    /// `<kind>-v<version>@<hash prefix>`.
    pub name: String,
    /// SHA-256 of its component (hex).
    pub sha256: String,
}

/// What `GET /modules` and `modnode module list` show: for every kind, the active module and
/// every stored version with its metadata (kinds in [`Kind::ALL`](crate::runtime::Kind::ALL)
/// order, then any other kind found in the store).
pub fn listing(active: &[ActiveModule], stored: &[ModuleRecord]) -> serde_json::Value {
    let mut kinds: Vec<String> = crate::runtime::Kind::ALL
        .iter()
        .map(|k| k.to_string())
        .collect();
    for m in stored {
        if !kinds.contains(&m.kind) {
            kinds.push(m.kind.clone());
        }
    }
    let kinds: Vec<serde_json::Value> = kinds
        .into_iter()
        .map(|kind| {
            let active = active.iter().find(|a| a.kind == kind);
            let versions: Vec<&ModuleRecord> = stored.iter().filter(|m| m.kind == kind).collect();
            serde_json::json!({"kind": kind, "active": active, "stored": versions})
        })
        .collect();
    serde_json::json!({ "kinds": kinds })
}

/// The sled database of stored modules.
pub struct ModuleStore {
    path: PathBuf,
    tree: sled::Tree,
    db: sled::Db,
}

impl std::fmt::Debug for ModuleStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Key of a module's bytes: `b` ‖ sha256.
fn bytes_key(sha256: &ModuleHash) -> Vec<u8> {
    [b"b".as_slice(), sha256.as_bytes()].concat()
}

/// Key of a module's metadata: `m` ‖ sha256.
fn meta_key(sha256: &ModuleHash) -> Vec<u8> {
    [b"m".as_slice(), sha256.as_bytes()].concat()
}

impl ModuleStore {
    /// Opens (or creates) the store in `<data_dir>/modules`.
    pub fn open(data_dir: &Path) -> Result<Self, ModuleStoreError> {
        let path = data_dir.join(MODULES_DIR);
        let err = |e: sled::Error| ModuleStoreError::Backend {
            path: path.clone(),
            message: e.to_string(),
        };
        let db = crate::store::open_sled(&sled::Config::new().path(&path).cache_capacity(16 << 20))
            .map_err(err)?;
        let tree = db.open_tree("modules").map_err(err)?;
        Ok(Self { path, tree, db })
    }

    fn err(&self, e: sled::Error) -> ModuleStoreError {
        ModuleStoreError::Backend {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The metadata of module `sha256`, if stored.
    pub fn meta(&self, sha256: &ModuleHash) -> Result<Option<ModuleRecord>, ModuleStoreError> {
        let Some(raw) = self.tree.get(meta_key(sha256)).map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        self.decode(sha256, &raw).map(Some)
    }

    fn decode(&self, sha256: &ModuleHash, raw: &[u8]) -> Result<ModuleRecord, ModuleStoreError> {
        serde_json::from_slice(raw).map_err(|e| ModuleStoreError::Corrupt {
            path: self.path.clone(),
            sha256: *sha256,
            message: e.to_string(),
        })
    }

    /// The bytes of module `sha256`, if stored.
    pub fn bytes(&self, sha256: &ModuleHash) -> Result<Option<Vec<u8>>, ModuleStoreError> {
        Ok(self
            .tree
            .get(bytes_key(sha256))
            .map_err(|e| self.err(e))?
            .map(|v| v.to_vec()))
    }

    /// Every stored module's metadata, ordered by kind, then module version, then first seen.
    pub fn list(&self) -> Result<Vec<ModuleRecord>, ModuleStoreError> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(b"m") {
            let (key, raw) = item.map_err(|e| self.err(e))?;
            let mut sha256 = ModuleHash::default();
            if let Some(hash) = key.get(1..).filter(|h| h.len() == 32) {
                sha256.0.copy_from_slice(hash);
            }
            out.push(self.decode(&sha256, &raw)?);
        }
        out.sort_by(|a, b| {
            (&a.kind, a.module_version, a.first_seen_unix_ms).cmp(&(
                &b.kind,
                b.module_version,
                b.first_seen_unix_ms,
            ))
        });
        Ok(out)
    }

    /// How many modules are stored.
    pub fn len(&self) -> usize {
        self.tree.scan_prefix(b"m").count()
    }

    /// Whether the store holds no module.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores `bytes` with `meta` in one atomic batch and flushes it to disk before returning.
    pub fn insert(
        &self,
        sha256: &ModuleHash,
        bytes: &[u8],
        meta: &ModuleRecord,
    ) -> Result<(), ModuleStoreError> {
        let encoded = serde_json::to_vec(meta).map_err(|e| ModuleStoreError::Corrupt {
            path: self.path.clone(),
            sha256: *sha256,
            message: e.to_string(),
        })?;
        let mut batch = sled::Batch::default();
        batch.insert(bytes_key(sha256), bytes);
        batch.insert(meta_key(sha256), encoded);
        self.tree.apply_batch(batch).map_err(|e| self.err(e))?;
        self.db.flush().map_err(|e| self.err(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(kind: &str, version: u32, sha: &ModuleHash) -> ModuleRecord {
        ModuleRecord {
            sha256: *sha,
            kind: kind.into(),
            contract: "1.0.0".into(),
            module_version: version,
            description: "test".into(),
            size: 3,
            first_seen_unix_ms: 1,
            source: "test".into(),
            compile_ms: 1,
            warm_us: 1,
            warm_fuel: 0,
            warm_real_inputs: 0,
            compiled_size: 10,
        }
    }

    #[test]
    fn modules_survive_a_reopen_and_list_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (ModuleHash([1u8; 32]), ModuleHash([2u8; 32]));
        {
            let store = ModuleStore::open(dir.path()).unwrap();
            assert!(store.is_empty());
            store
                .insert(&a, b"aaa", &meta("gossip-policy", 2, &a))
                .unwrap();
            store.insert(&b, b"bbb", &meta("deposits", 1, &b)).unwrap();
        }
        // sled releases its file lock from a background thread shortly after the drop.
        assert!(
            crate::store::wait_released(
                &dir.path().join(MODULES_DIR),
                std::time::Duration::from_secs(60)
            )
            .unwrap(),
            "the dropped module store still holds its database"
        );
        let store = ModuleStore::open(dir.path()).unwrap();
        assert_eq!(store.bytes(&a).unwrap().as_deref(), Some(&b"aaa"[..]));
        assert_eq!(store.meta(&b).unwrap(), Some(meta("deposits", 1, &b)));
        assert_eq!(store.meta(&ModuleHash([3; 32])).unwrap(), None);
        let kinds: Vec<_> = store.list().unwrap().into_iter().map(|m| m.kind).collect();
        assert_eq!(kinds, ["deposits", "gossip-policy"]);
        assert_eq!(meta("deposits", 1, &b).name(), "deposits-v1@020202020202");
    }

    #[test]
    fn listing_groups_by_kind_with_the_active_module() {
        let (a, b) = (ModuleHash([1u8; 32]), ModuleHash([2u8; 32]));
        let active = ActiveModule {
            kind: "deposits".into(),
            name: "deposits-v2@abc".into(),
            sha256: "abc".into(),
        };
        let value = listing(
            &[active],
            &[meta("deposits", 1, &a), meta("gossip-policy", 2, &b)],
        );
        let kinds = value["kinds"].as_array().unwrap();
        assert_eq!(kinds.len(), 3);
        assert_eq!(kinds[0]["kind"], "deposits");
        assert_eq!(kinds[0]["active"]["name"], "deposits-v2@abc");
        assert_eq!(kinds[0]["stored"][0]["sha256"], hex::encode(a));
        assert_eq!(kinds[1]["kind"], "checkpoint");
        assert!(kinds[1]["active"].is_null());
        assert_eq!(kinds[2]["stored"][0]["module_version"], 2);
    }
}

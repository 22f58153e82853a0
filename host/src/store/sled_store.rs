//! The sled-backed [`KvStore`].
//!
//! sled 0.34 writes asynchronously and only guarantees recovery of what was flushed, so every
//! commit is one `apply_batch` (atomic) followed by `flush` (durable) before it returns; an
//! unflushed commit (pruning's) is the `apply_batch` alone.

use std::path::{Path, PathBuf};

use super::{KvStore, StoreError, WriteBatch};

/// A sled database holding the chain in one tree (or, from [`KvStore::tree`], another tree of
/// the same database).
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
    chain: sled::Tree,
    /// The tree's name, for messages.
    name: String,
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SledStore {
    /// Opens (or creates) the database in `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let err = |e: sled::Error| StoreError::Backend {
            path: path.display().to_string(),
            message: format!(
                "{e}; if the node was killed mid-write and sled cannot recover, move the directory \
                 aside and resync"
            ),
        };
        let db = crate::store::open_sled(
            &sled::Config::new()
                .path(path)
                .cache_capacity(64 << 20)
                .mode(sled::Mode::HighThroughput),
        )
        .map_err(err)?;
        let chain = db.open_tree("chain").map_err(err)?;
        Ok(Self {
            path: path.to_path_buf(),
            db,
            chain,
            name: "chain".into(),
        })
    }

    fn err(&self, e: sled::Error) -> StoreError {
        StoreError::Backend {
            path: self.location(),
            message: e.to_string(),
        }
    }

    /// The node's persistent peer bans, in their own tree of this database.
    pub fn ban_list(&self) -> Result<super::BanList, StoreError> {
        let tree = self.db.open_tree("peer_bans").map_err(|e| self.err(e))?;
        Ok(super::BanList::new(self.path.display().to_string(), tree))
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        self.db.size_on_disk().map_err(|e| self.err(e))
    }
}

impl KvStore for SledStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .chain
            .get(key)
            .map_err(|e| self.err(e))?
            .map(|v| v.to_vec()))
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut super::Visitor<'_>) -> Result<(), StoreError> {
        for item in self.chain.scan_prefix(prefix) {
            let (k, v) = item.map_err(|e| self.err(e))?;
            visit(&k, &v)?;
        }
        Ok(())
    }

    fn scan_range(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        visit: &mut super::Visitor<'_>,
    ) -> Result<(), StoreError> {
        if start >= end {
            return Ok(());
        }
        for item in self.chain.range(start..end).take(limit) {
            let (k, v) = item.map_err(|e| self.err(e))?;
            visit(&k, &v)?;
        }
        Ok(())
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        self.commit_unflushed(batch)?;
        self.db.flush().map_err(|e| self.err(e))?;
        Ok(())
    }

    /// sled logs a batch as one unit and recovers a prefix of its log, so an unflushed batch
    /// is recovered whole or not at all, and only with everything logged before it; its
    /// flusher writes it out within `flush_every_ms` (500 ms) or the next `commit` does.
    fn commit_unflushed(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let mut sled_batch = sled::Batch::default();
        for (key, value) in batch.ops() {
            match value {
                Some(v) => sled_batch.insert(key.as_slice(), v.as_slice()),
                None => sled_batch.remove(key.as_slice()),
            }
        }
        self.chain.apply_batch(sled_batch).map_err(|e| self.err(e))
    }

    fn tree(&self, name: &str) -> Result<std::sync::Arc<dyn KvStore>, StoreError> {
        let tree = self.db.open_tree(name).map_err(|e| self.err(e))?;
        Ok(std::sync::Arc::new(Self {
            path: self.path.clone(),
            db: self.db.clone(),
            chain: tree,
            name: name.into(),
        }))
    }

    fn location(&self) -> String {
        format!("tree {} of {}", self.name, self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(ops: &[(&[u8], Option<&[u8]>)]) -> WriteBatch {
        let mut batch = WriteBatch::new();
        for (key, value) in ops {
            match value {
                Some(v) => batch.put(key.to_vec(), v.to_vec()),
                None => batch.delete(key.to_vec()),
            }
        }
        batch
    }

    #[test]
    fn an_unflushed_commit_is_read_at_once_and_kept_with_the_next_flushed_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let store = SledStore::open(&path).unwrap();
            store
                .commit(&batch(&[(b"a", Some(b"1")), (b"b", Some(b"2"))]))
                .unwrap();
            store
                .commit_unflushed(&batch(&[(b"a", None), (b"cursor", Some(b"1"))]))
                .unwrap();
            assert_eq!(store.get(b"a").unwrap(), None);
            assert_eq!(store.get(b"cursor").unwrap(), Some(b"1".to_vec()));
            store.commit(&batch(&[(b"c", Some(b"3"))])).unwrap();
        }
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        let store = SledStore::open(&path).unwrap();
        assert_eq!(store.get(b"a").unwrap(), None);
        assert_eq!(store.get(b"b").unwrap(), Some(b"2".to_vec()));
        assert_eq!(store.get(b"cursor").unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.get(b"c").unwrap(), Some(b"3".to_vec()));
    }
}

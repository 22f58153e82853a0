//! An in-memory [`KvStore`] for fast tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::{KvStore, StoreError, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// A store in a `BTreeMap`; batches are atomic, nothing is durable.
#[derive(Debug, Default)]
pub struct MemoryStore {
    map: Mutex<Map>,
    /// Keyspaces handed out by [`KvStore::tree`], by name.
    trees: Mutex<HashMap<String, Arc<MemoryStore>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> Result<std::sync::MutexGuard<'_, Map>, StoreError> {
        self.map.lock().map_err(|_| StoreError::Backend {
            path: "memory".into(),
            message: "lock poisoned".into(),
        })
    }
}

impl KvStore for MemoryStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.map()?.get(key).cloned())
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut super::Visitor<'_>) -> Result<(), StoreError> {
        let map = self.map()?;
        for (k, v) in map
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            visit(k, v)?;
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
        let map = self.map()?;
        for (k, v) in map.range(start.to_vec()..end.to_vec()).take(limit) {
            visit(k, v)?;
        }
        Ok(())
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let mut map = self.map()?;
        for (key, value) in batch.ops() {
            match value {
                Some(v) => map.insert(key.clone(), v.clone()),
                None => map.remove(key),
            };
        }
        Ok(())
    }

    fn tree(&self, name: &str) -> Result<Arc<dyn KvStore>, StoreError> {
        let mut trees = self.trees.lock().map_err(|_| StoreError::Backend {
            path: "memory".into(),
            message: "lock poisoned".into(),
        })?;
        let tree: Arc<dyn KvStore> = trees.entry(name.to_string()).or_default().clone();
        Ok(tree)
    }

    fn location(&self) -> String {
        "memory".into()
    }
}

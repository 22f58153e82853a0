//! Durable restore progress in sled: the manifest being restored and every chunk that passed
//! verification, so a restart resumes without fetching a verified chunk again (the stored
//! chunks are re-verified locally, which costs CPU, not the network).

use super::manifest::{Manifest, ManifestError, ManifestLimits};

const TREE: &str = "checkpoint-restore";
const MANIFEST_KEY: &[u8] = b"manifest";
const CHUNK_PREFIX: &[u8] = b"chunk/";

/// Why restore progress could not be read or written. Always this node's fault.
#[derive(Debug, thiserror::Error)]
pub enum RestoreStoreError {
    /// sled failed.
    #[error("checkpoint restore store: {0}")]
    Sled(#[from] sled::Error),
    /// The stored manifest no longer decodes (written by another version, or damaged).
    #[error("the stored checkpoint manifest is unreadable ({0}); delete the restore progress")]
    Manifest(#[from] ManifestError),
    /// A stored key is not one this code writes.
    #[error("unexpected key in the checkpoint restore store: {0}")]
    BadKey(String),
}

/// The restore progress tree of a node's database.
#[derive(Debug, Clone)]
pub struct RestoreStore {
    tree: sled::Tree,
}

impl RestoreStore {
    /// Opens (creating) the progress tree in `db`.
    pub fn open(db: &sled::Db) -> Result<Self, RestoreStoreError> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
        })
    }

    /// The manifest being restored, if any.
    pub fn manifest(&self) -> Result<Option<Manifest>, RestoreStoreError> {
        match self.tree.get(MANIFEST_KEY)? {
            None => Ok(None),
            Some(bytes) => Ok(Some(Manifest::decode(&bytes, &ManifestLimits::default())?)),
        }
    }

    /// Starts (or continues) restoring `manifest`: progress of any other checkpoint is dropped.
    pub fn begin(&self, manifest: &Manifest) -> Result<(), RestoreStoreError> {
        let encoded = manifest.encode();
        if self.tree.get(MANIFEST_KEY)?.as_deref() == Some(encoded.as_slice()) {
            return Ok(());
        }
        self.switch(manifest, &[])
    }

    /// Replaces the progress with `manifest` and the chunks carried over to it (`(index in
    /// `manifest`, bytes)`, already verified against it), as one atomic sled batch, flushed: a
    /// crash at any point leaves either the old progress whole or the new one whole, never the
    /// new manifest with an old checkpoint's chunk under one of its indices.
    pub fn switch(
        &self,
        manifest: &Manifest,
        carried: &[(usize, Vec<u8>)],
    ) -> Result<(), RestoreStoreError> {
        let mut batch = sled::Batch::default();
        for key in self.tree.iter().keys() {
            batch.remove(key?);
        }
        batch.insert(MANIFEST_KEY, manifest.encode());
        // A key both removed and inserted ends inserted: the batch keeps the last write.
        for (index, bytes) in carried {
            batch.insert(chunk_key(*index), bytes.as_slice());
        }
        self.tree.apply_batch(batch)?;
        self.tree.flush()?;
        Ok(())
    }

    /// Stores a verified chunk (not flushed: call [`flush`](Self::flush) after a batch).
    pub fn put_chunk(&self, index: usize, bytes: &[u8]) -> Result<(), RestoreStoreError> {
        self.tree.insert(chunk_key(index), bytes)?;
        Ok(())
    }

    /// Makes every stored chunk durable.
    pub fn flush(&self) -> Result<(), RestoreStoreError> {
        self.tree.flush()?;
        Ok(())
    }

    /// The stored chunks, `(index, bytes)` in index order.
    pub fn chunks(&self) -> Result<Vec<(usize, Vec<u8>)>, RestoreStoreError> {
        let mut out = Vec::new();
        for entry in self.tree.scan_prefix(CHUNK_PREFIX) {
            let (key, value) = entry?;
            let index = key
                .strip_prefix(CHUNK_PREFIX)
                .and_then(|i| <[u8; 8]>::try_from(i).ok())
                .and_then(|i| usize::try_from(u64::from_be_bytes(i)).ok())
                .ok_or_else(|| RestoreStoreError::BadKey(hex::encode(&key)))?;
            out.push((index, value.to_vec()));
        }
        Ok(out)
    }

    /// Drops all progress (after the restored state is written, or to give up).
    pub fn clear(&self) -> Result<(), RestoreStoreError> {
        self.tree.clear()?;
        self.tree.flush()?;
        Ok(())
    }
}

fn chunk_key(index: usize) -> Vec<u8> {
    let index = u64::try_from(index).unwrap_or(u64::MAX);
    [CHUNK_PREFIX, &index.to_be_bytes()].concat()
}

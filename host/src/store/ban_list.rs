//! [`BanList`]: the peer bans a node keeps across restarts, in their own small sled tree next
//! to the chain. Keys are free, so a ban that a restart lifts is no ban at all.
//!
//! One entry per banned node id (32 bytes) holding the ban's end in unix milliseconds (8
//! bytes, big-endian). Expired entries are dropped when the list is loaded, and the tree never
//! holds more than [`MAX_BANS`] entries (the one ending soonest makes room).

use super::StoreError;

/// Most bans kept on disk (the peer manager keeps as many in memory).
pub const MAX_BANS: usize = 4096;

/// Persistent peer bans.
#[derive(Clone)]
pub struct BanList {
    path: String,
    tree: sled::Tree,
}

impl std::fmt::Debug for BanList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BanList")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl BanList {
    pub(super) fn new(path: String, tree: sled::Tree) -> Self {
        Self { path, tree }
    }

    fn err(&self, e: sled::Error) -> StoreError {
        StoreError::Backend {
            path: self.path.clone(),
            message: format!("peer bans: {e}"),
        }
    }

    /// The bans still in force at `now_ms` (unix milliseconds), `(node id, end in unix ms)`;
    /// expired and undecodable entries are removed.
    pub fn load(&self, now_ms: u64) -> Result<Vec<([u8; 32], u64)>, StoreError> {
        let mut live = Vec::new();
        let mut stale = Vec::new();
        for item in self.tree.iter() {
            let (key, value) = item.map_err(|e| self.err(e))?;
            let node = <[u8; 32]>::try_from(key.as_ref()).ok();
            let until = <[u8; 8]>::try_from(value.as_ref())
                .ok()
                .map(u64::from_be_bytes);
            match (node, until) {
                (Some(node), Some(until)) if until > now_ms => live.push((node, until)),
                _ => stale.push(key),
            }
        }
        for key in stale {
            self.tree.remove(key).map_err(|e| self.err(e))?;
        }
        Ok(live)
    }

    /// Records that `node` is banned until `until_ms` (unix milliseconds). Durable within
    /// sled's flush interval; a later end replaces an earlier one.
    pub fn record(&self, node: [u8; 32], until_ms: u64) -> Result<(), StoreError> {
        if !self.tree.contains_key(node).map_err(|e| self.err(e))? && self.tree.len() >= MAX_BANS {
            let mut soonest: Option<(sled::IVec, u64)> = None;
            for item in self.tree.iter() {
                let (key, value) = item.map_err(|e| self.err(e))?;
                let end = <[u8; 8]>::try_from(value.as_ref()).map_or(0, u64::from_be_bytes);
                if soonest.as_ref().is_none_or(|(_, s)| end < *s) {
                    soonest = Some((key, end));
                }
            }
            match soonest {
                Some((key, end)) if end < until_ms => {
                    self.tree.remove(key).map_err(|e| self.err(e))?;
                }
                _ => return Ok(()),
            }
        }
        self.tree
            .update_and_fetch(node, |old| {
                let old = old
                    .and_then(|v| <[u8; 8]>::try_from(v).ok())
                    .map_or(0, u64::from_be_bytes);
                Some(old.max(until_ms).to_be_bytes().to_vec())
            })
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(dir: &std::path::Path) -> BanList {
        let db = sled::Config::new().path(dir).open().unwrap();
        BanList::new(
            dir.display().to_string(),
            db.open_tree("peer_bans").unwrap(),
        )
    }

    #[test]
    fn bans_survive_reopening_and_expire() {
        let dir = tempfile::TempDir::new().unwrap();
        {
            let bans = list(dir.path());
            bans.record([1; 32], 2_000).unwrap();
            bans.record([2; 32], 5_000).unwrap();
            bans.record([2; 32], 4_000).unwrap();
            bans.tree.flush().unwrap();
        }
        // sled lets go of its lock from its flusher thread a moment after the last handle is
        // dropped: reopening before that fails with "could not acquire lock".
        assert!(
            crate::store::wait_released(dir.path(), std::time::Duration::from_secs(60)).unwrap(),
            "the dropped ban list still holds {}",
            dir.path().display()
        );
        let bans = list(dir.path());
        let mut live = bans.load(1_000).unwrap();
        live.sort();
        assert_eq!(live, vec![([1; 32], 2_000), ([2; 32], 5_000)]);
        assert_eq!(bans.load(3_000).unwrap(), vec![([2; 32], 5_000)]);
        assert_eq!(bans.tree.len(), 1, "the expired ban was dropped");
    }
}

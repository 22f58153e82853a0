//! Counting chunks shared by many states once, and what each state owns alone.
//!
//! Every chunk a cached state holds is keyed by its address (a chunk stays allocated while a
//! cached state holds it, so addresses are unique among the chunks counted). A chunk has a
//! reference count (states holding it) and the sum of their ids: when exactly one state holds
//! it, that sum *is* the owner's id, which keeps each state's exclusive bytes up to date in
//! O(chunks of the state) per insertion or removal, never O(states × chunks).

use std::collections::HashMap;

/// One chunk as the ledger knows it.
#[derive(Debug, Clone, Copy)]
struct ChunkInfo {
    refs: u32,
    bytes: usize,
    owner_sum: u64,
}

/// The chunk ledger (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    chunks: HashMap<usize, ChunkInfo>,
    exclusive: HashMap<u64, usize>,
    total: usize,
}

impl Ledger {
    /// Bytes of every distinct chunk counted.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Bytes of the chunks only state `id` holds.
    pub(crate) fn exclusive(&self, id: u64) -> usize {
        self.exclusive.get(&id).copied().unwrap_or(0)
    }

    fn credit(&mut self, id: u64, bytes: usize) {
        let slot = self.exclusive.entry(id).or_insert(0);
        *slot = slot.saturating_add(bytes);
    }

    fn debit(&mut self, id: u64, bytes: usize) {
        if let Some(slot) = self.exclusive.get_mut(&id) {
            *slot = slot.saturating_sub(bytes);
        }
    }

    /// Counts state `id`'s chunks. Returns the bytes newly counted (chunks no state held).
    pub(crate) fn add(&mut self, id: u64, chunks: impl Iterator<Item = (usize, usize)>) -> usize {
        self.exclusive.entry(id).or_insert(0);
        let mut added = 0usize;
        for (ptr, bytes) in chunks {
            match self.chunks.get_mut(&ptr) {
                None => {
                    self.chunks.insert(
                        ptr,
                        ChunkInfo {
                            refs: 1,
                            bytes,
                            owner_sum: id,
                        },
                    );
                    added = added.saturating_add(bytes);
                    self.credit(id, bytes);
                }
                Some(info) => {
                    let previous_owner = (info.refs == 1).then_some(info.owner_sum);
                    info.refs = info.refs.saturating_add(1);
                    info.owner_sum = info.owner_sum.wrapping_add(id);
                    let bytes = info.bytes;
                    if let Some(owner) = previous_owner {
                        self.debit(owner, bytes);
                    }
                }
            }
        }
        self.total = self.total.saturating_add(added);
        added
    }

    /// Stops counting state `id`'s chunks (the same ones [`Ledger::add`] was given). Returns
    /// the bytes no state holds any more.
    pub(crate) fn remove(
        &mut self,
        id: u64,
        chunks: impl Iterator<Item = (usize, usize)>,
    ) -> usize {
        let mut freed = 0usize;
        for (ptr, _) in chunks {
            let Some(info) = self.chunks.get_mut(&ptr) else {
                continue;
            };
            info.refs = info.refs.saturating_sub(1);
            info.owner_sum = info.owner_sum.wrapping_sub(id);
            let (refs, bytes, owner) = (info.refs, info.bytes, info.owner_sum);
            match refs {
                0 => {
                    self.chunks.remove(&ptr);
                    freed = freed.saturating_add(bytes);
                }
                1 => self.credit(owner, bytes),
                _ => {}
            }
        }
        self.exclusive.remove(&id);
        self.total = self.total.saturating_sub(freed);
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_chunks_count_once_and_move_to_the_last_holder() {
        let mut ledger = Ledger::default();
        let a = [(1, 100), (2, 100), (3, 100)];
        let b = [(1, 100), (2, 100), (4, 50)];
        assert_eq!(ledger.add(7, a.into_iter()), 300);
        assert_eq!(ledger.add(9, b.into_iter()), 50);
        assert_eq!(ledger.total(), 350);
        assert_eq!((ledger.exclusive(7), ledger.exclusive(9)), (100, 50));
        assert_eq!(ledger.remove(7, a.into_iter()), 100);
        assert_eq!(ledger.total(), 250);
        assert_eq!(ledger.exclusive(9), 250);
        assert_eq!(ledger.remove(9, b.into_iter()), 250);
        assert_eq!(ledger.total(), 0);
    }
}

//! The pending-deposit queue of `modnode:deposits@3.0.0` (Electra's `pending_deposits` and
//! `deposit_balance_to_consume`): host-owned state, persistent and structurally shared like the
//! registry.
//!
//! Entries live in a [`ChunkedVec`] and their leaf hashes in a [`MerkleTree`], both
//! copy-on-write chunks, so a clone (a state snapshot) shares every chunk and a push costs
//! O(log n) hashes. The queue is drained from the front by moving a start offset: nothing is
//! shifted and nothing is rehashed, so an epoch that applies 16 deposits costs the same with a
//! queue of a thousand or a million entries. Drained entries keep their leaves (the tree only
//! grows, by one leaf per deposit ever queued); the commitment names the live window:
//!
//! `root = sha256("modnode-pending-v1" ‖ tree_root ‖ leaves (LE u64) ‖ start (LE u64) ‖
//! deposit_balance_to_consume (LE u64))`.
//!
//! Calls write through a [`PendingOverlay`] that becomes a [`PendingDelta`] applied only when
//! the whole call succeeded; [`PendingQueue::undo_for`] records what reverts a delta.

// Consensus code: on top of what the crate denies outside tests (see `lib.rs`), no `panic!`.
#![cfg_attr(not(test), deny(clippy::panic))]

use sha2::{Digest, Sha256};

use super::chunked::ChunkedVec;
use super::merkle::{Hash32, MerkleError, MerkleTree};
use super::validator::{PUBKEY_LEN, Pubkey, WITHDRAWAL_CREDENTIALS_LEN};

/// Length of a BLS signature.
pub const SIGNATURE_LEN: usize = 96;
/// Bytes of an encoded [`PendingDeposit`].
pub const PENDING_DEPOSIT_BYTES: usize =
    PUBKEY_LEN + WITHDRAWAL_CREDENTIALS_LEN + 8 + SIGNATURE_LEN + 8 + 8;
/// Entries a queue may hold at once (the WIT's `read` and the registry agree on `u32` counts).
pub const MAX_QUEUED: u64 = u32::MAX as u64;

/// `PendingDeposit`: one queued deposit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingDeposit {
    /// BLS public key.
    pub pubkey: Pubkey,
    /// Withdrawal credentials.
    pub withdrawal_credentials: [u8; WITHDRAWAL_CREDENTIALS_LEN],
    /// Amount in Gwei.
    pub amount: u64,
    /// Proof of possession, checked when applied to an unknown pubkey.
    pub signature: [u8; SIGNATURE_LEN],
    /// Slot of the block that queued it.
    pub slot: u64,
    /// Height of the block that queued it.
    pub height: u64,
}

impl PendingDeposit {
    /// Canonical encoding: pubkey, withdrawal credentials, amount (LE), signature, slot (LE),
    /// height (LE).
    pub fn encode(&self) -> [u8; PENDING_DEPOSIT_BYTES] {
        let mut out = [0u8; PENDING_DEPOSIT_BYTES];
        let parts: [&[u8]; 6] = [
            &self.pubkey,
            &self.withdrawal_credentials,
            &self.amount.to_le_bytes(),
            &self.signature,
            &self.slot.to_le_bytes(),
            &self.height.to_le_bytes(),
        ];
        let mut at = 0usize;
        for part in parts {
            let end = at.saturating_add(part.len());
            if let Some(dst) = out.get_mut(at..end) {
                dst.copy_from_slice(part);
            }
            at = end;
        }
        out
    }

    /// Decodes [`encode`](Self::encode)'s bytes.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != PENDING_DEPOSIT_BYTES {
            return None;
        }
        let (pubkey, rest) = bytes.split_first_chunk::<PUBKEY_LEN>()?;
        let (withdrawal_credentials, rest) =
            rest.split_first_chunk::<WITHDRAWAL_CREDENTIALS_LEN>()?;
        let (amount, rest) = rest.split_first_chunk::<8>()?;
        let (signature, rest) = rest.split_first_chunk::<SIGNATURE_LEN>()?;
        let (slot, rest) = rest.split_first_chunk::<8>()?;
        let (height, _) = rest.split_first_chunk::<8>()?;
        Some(Self {
            pubkey: *pubkey,
            withdrawal_credentials: *withdrawal_credentials,
            amount: u64::from_le_bytes(*amount),
            signature: *signature,
            slot: u64::from_le_bytes(*slot),
            height: u64::from_le_bytes(*height),
        })
    }

    /// The entry's leaf in the queue's tree: `sha256(encode())`.
    pub fn leaf(&self) -> Hash32 {
        Sha256::digest(self.encode()).into()
    }
}

/// The queue's commitment from its parts (see the module docs): the tree root over every
/// entry ever pushed, that count, the front offset and `deposit_balance_to_consume`. A
/// checkpoint's manifest carries these parts, and its state root must follow from them.
pub fn pending_root(tree_root: &Hash32, total: u64, start: u64, balance_to_consume: u64) -> Hash32 {
    let mut h = Sha256::new();
    h.update(b"modnode-pending-v1");
    h.update(tree_root);
    h.update(total.to_le_bytes());
    h.update(start.to_le_bytes());
    h.update(balance_to_consume.to_le_bytes());
    h.finalize().into()
}

/// Why a queue operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PendingError {
    /// The queue would hold more than [`MAX_QUEUED`] entries: the module's fault.
    #[error("the pending-deposit queue would hold more than {MAX_QUEUED} entries")]
    Full,
    /// Dropping more entries than the queue holds: the module's fault.
    #[error("dropping {wanted} pending deposits from a queue of {len}")]
    Short {
        /// Entries asked for.
        wanted: u64,
        /// Entries held.
        len: u64,
    },
    /// The queue's tree refused a leaf or a truncation: ours (a bug or a corrupt record).
    #[error("the pending-deposit tree: {0}")]
    Tree(#[from] MerkleError),
    /// Parts given to [`PendingQueue::from_parts`] do not fit each other: ours (a restore
    /// assembled them wrong).
    #[error(
        "a pending-deposit queue of {entries} entries cannot have {leaves} tree leaves and front offset {start}"
    )]
    Parts {
        /// Entries given.
        entries: u64,
        /// Leaves of the tree given.
        leaves: u64,
        /// Front offset given.
        start: u64,
    },
    /// An undo record does not fit this queue: ours (a bug or a corrupt record).
    #[error("a pending-deposit undo record of {undo_len} entries does not fit a queue of {len}")]
    Undo {
        /// Entries (drained ones included) the record restores.
        undo_len: u64,
        /// Entries the queue holds, drained ones included.
        len: u64,
    },
}

/// The queue (see the module docs). `Clone` shares every chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingQueue {
    entries: ChunkedVec<PendingDeposit>,
    tree: MerkleTree,
    start: u64,
    balance_to_consume: u64,
}

/// A call's changes to the queue: entries pushed at the end, entries dropped from the front
/// (pushed ones included when more than the queue held), and the new balance to consume.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingDelta {
    /// Entries appended, in order.
    pub pushed: Vec<PendingDeposit>,
    /// Entries removed from the front.
    pub dropped: u64,
    /// `deposit_balance_to_consume` after the call, if the call set it.
    pub balance_to_consume: Option<u64>,
}

impl PendingDelta {
    /// Whether the call changed nothing.
    pub fn is_empty(&self) -> bool {
        self.pushed.is_empty() && self.dropped == 0 && self.balance_to_consume.is_none()
    }
}

/// What reverts one [`PendingDelta`]: the queue's extent and counter before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingUndo {
    /// Entries ever pushed, before the delta.
    pub total: u64,
    /// The front offset before the delta.
    pub start: u64,
    /// `deposit_balance_to_consume` before the delta.
    pub balance_to_consume: u64,
}

impl PendingQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries queued (pushed and not yet dropped).
    pub fn len(&self) -> u64 {
        self.total().saturating_sub(self.start)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries ever pushed, drained ones included.
    pub fn total(&self) -> u64 {
        self.tree.len()
    }

    /// The front offset: entries drained so far.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The entry pushed `index`-th (drained ones included), by its absolute position.
    pub fn entry(&self, index: u64) -> Option<&PendingDeposit> {
        self.entries.get(usize::try_from(index).ok()?)
    }

    /// `deposit_balance_to_consume`.
    pub fn balance_to_consume(&self) -> u64 {
        self.balance_to_consume
    }

    /// The entry `offset` places after the front.
    pub fn get(&self, offset: u64) -> Option<&PendingDeposit> {
        let index = self.start.checked_add(offset)?;
        self.entries.get(usize::try_from(index).ok()?)
    }

    /// Up to `count` entries from `offset` after the front, in queue order.
    pub fn window(&self, offset: u64, count: usize) -> impl Iterator<Item = &PendingDeposit> {
        let from = self
            .start
            .checked_add(offset)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(usize::MAX);
        self.entries.range(from, from.saturating_add(count))
    }

    /// The commitment (see the module docs).
    pub fn root(&self) -> Hash32 {
        pending_root(
            &self.tree.tree_root(),
            self.total(),
            self.start,
            self.balance_to_consume,
        )
    }

    /// The tree over every entry ever pushed (drained ones included), whose
    /// [`tree_root`](MerkleTree::tree_root) the commitment names: checkpoints prove the
    /// entries against it.
    pub fn tree(&self) -> &MerkleTree {
        &self.tree
    }

    /// A queue from its parts as a checkpoint restore proved them: every entry ever pushed,
    /// in order, the tree over their leaves (`tree.leaf(i)` must be `entries[i].leaf()`: the
    /// caller proved each leaf from the entry's bytes), the front offset and
    /// `deposit_balance_to_consume`. Refuses parts that do not fit each other.
    pub fn from_parts(
        entries: Vec<PendingDeposit>,
        tree: MerkleTree,
        start: u64,
        balance_to_consume: u64,
    ) -> Result<Self, PendingError> {
        let total = u64::try_from(entries.len()).map_err(|_| PendingError::Full)?;
        if tree.len() != total || start > total {
            return Err(PendingError::Parts {
                entries: total,
                leaves: tree.len(),
                start,
            });
        }
        if total.saturating_sub(start) > MAX_QUEUED {
            return Err(PendingError::Full);
        }
        Ok(Self {
            entries: ChunkedVec::from(entries),
            tree,
            start,
            balance_to_consume,
        })
    }

    /// What reverts `delta` once applied.
    pub fn undo_for(&self) -> PendingUndo {
        PendingUndo {
            total: self.total(),
            start: self.start,
            balance_to_consume: self.balance_to_consume,
        }
    }

    /// Applies a call's changes: O(k log n) for k pushes, O(1) for the drops.
    pub fn apply(&mut self, delta: &PendingDelta) -> Result<(), PendingError> {
        let total = u64::try_from(delta.pushed.len())
            .ok()
            .and_then(|k| self.total().checked_add(k))
            .ok_or(PendingError::Full)?;
        let len_after_push = total.saturating_sub(self.start);
        if len_after_push > MAX_QUEUED {
            return Err(PendingError::Full);
        }
        if delta.dropped > len_after_push {
            return Err(PendingError::Short {
                wanted: delta.dropped,
                len: len_after_push,
            });
        }
        let leaves: Vec<Hash32> = delta.pushed.iter().map(PendingDeposit::leaf).collect();
        self.tree.extend_from_slice(&leaves)?;
        self.entries.extend_from_slice(&delta.pushed);
        // `dropped <= len_after_push`, so the start stays within the entries.
        self.start = self.start.saturating_add(delta.dropped);
        if let Some(balance) = delta.balance_to_consume {
            self.balance_to_consume = balance;
        }
        Ok(())
    }

    /// The root after `delta`, without changing the queue.
    pub fn root_after(&self, delta: &PendingDelta) -> Result<Hash32, PendingError> {
        let mut after = self.clone();
        after.apply(delta)?;
        Ok(after.root())
    }

    /// Reverts the delta `undo` was taken before.
    pub fn rollback(&mut self, undo: &PendingUndo) -> Result<(), PendingError> {
        let total = self.total();
        if undo.total > total || undo.start > undo.total {
            return Err(PendingError::Undo {
                undo_len: undo.total,
                len: total,
            });
        }
        self.tree.truncate(undo.total)?;
        self.entries
            .truncate(usize::try_from(undo.total).map_err(|_| PendingError::Full)?);
        self.start = undo.start;
        self.balance_to_consume = undo.balance_to_consume;
        Ok(())
    }

    /// Heap bytes of the chunk tables (what a snapshot owns alone; the chunks are shared).
    pub fn table_bytes(&self) -> usize {
        self.entries
            .table_bytes()
            .saturating_add(self.tree.table_bytes())
    }
}

/// A call's view of the queue: the base state plus this call's drops, pushes and counter.
#[derive(Debug, Clone)]
pub struct PendingOverlay {
    base: PendingQueue,
    delta: PendingDelta,
}

impl PendingOverlay {
    /// A fresh view of `base` (a clone shares its chunks).
    pub fn new(base: PendingQueue) -> Self {
        Self {
            base,
            delta: PendingDelta::default(),
        }
    }

    /// Entries queued as this call sees them.
    pub fn len(&self) -> u64 {
        let pushed = u64::try_from(self.delta.pushed.len()).unwrap_or(u64::MAX);
        self.base
            .len()
            .saturating_add(pushed)
            .saturating_sub(self.delta.dropped)
    }

    /// Whether the call sees an empty queue.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends an entry.
    pub fn push(&mut self, deposit: PendingDeposit) -> Result<(), PendingError> {
        if self.len() >= MAX_QUEUED {
            return Err(PendingError::Full);
        }
        self.delta.pushed.push(deposit);
        Ok(())
    }

    /// Up to `count` entries from `offset` after the front, as this call sees them.
    pub fn read(&self, offset: u64, count: usize) -> Vec<PendingDeposit> {
        let Some(at) = self.delta.dropped.checked_add(offset) else {
            return Vec::new();
        };
        let base_len = self.base.len();
        let from_base: Vec<PendingDeposit> = self.base.window(at, count).copied().collect();
        let rest = count.saturating_sub(from_base.len());
        let pushed_from = usize::try_from(at.saturating_sub(base_len)).unwrap_or(usize::MAX);
        let from_pushed = self
            .delta
            .pushed
            .iter()
            .skip(pushed_from)
            .take(rest)
            .copied();
        from_base.into_iter().chain(from_pushed).collect()
    }

    /// Removes `count` entries from the front.
    pub fn drop_front(&mut self, count: u64) -> Result<(), PendingError> {
        let len = self.len();
        if count > len {
            return Err(PendingError::Short { wanted: count, len });
        }
        self.delta.dropped = self.delta.dropped.saturating_add(count);
        Ok(())
    }

    /// `deposit_balance_to_consume` as this call sees it.
    pub fn balance_to_consume(&self) -> u64 {
        self.delta
            .balance_to_consume
            .unwrap_or(self.base.balance_to_consume())
    }

    /// Sets `deposit_balance_to_consume`.
    pub fn set_balance_to_consume(&mut self, gwei: u64) {
        self.delta.balance_to_consume = Some(gwei);
    }

    /// The call's changes.
    pub fn into_delta(self) -> PendingDelta {
        self.delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64) -> PendingDeposit {
        PendingDeposit {
            pubkey: [(i % 251) as u8; 48],
            withdrawal_credentials: [1; 32],
            amount: i * 1_000,
            signature: [7; 96],
            slot: i,
            height: i + 1,
        }
    }

    fn delta(pushed: std::ops::Range<u64>, dropped: u64, balance: Option<u64>) -> PendingDelta {
        PendingDelta {
            pushed: pushed.map(entry).collect(),
            dropped,
            balance_to_consume: balance,
        }
    }

    #[test]
    fn encoding_round_trips() {
        let e = entry(77);
        assert_eq!(PendingDeposit::decode(&e.encode()), Some(e));
        assert_eq!(PendingDeposit::decode(&e.encode()[1..]), None);
    }

    #[test]
    fn drains_from_the_front_and_the_root_names_the_window() {
        let mut q = PendingQueue::new();
        let empty = q.root();
        q.apply(&delta(0..10, 0, None)).unwrap();
        assert_eq!(q.len(), 10);
        let full = q.root();
        assert_ne!(full, empty);
        q.apply(&delta(0..0, 4, Some(5))).unwrap();
        assert_eq!(q.len(), 6);
        assert_eq!(q.get(0), Some(&entry(4)));
        assert_eq!(q.balance_to_consume(), 5);
        assert_ne!(q.root(), full);
        let window: Vec<_> = q.window(1, 3).copied().collect();
        assert_eq!(window, vec![entry(5), entry(6), entry(7)]);
        assert_eq!(
            q.apply(&delta(0..0, 7, None)),
            Err(PendingError::Short { wanted: 7, len: 6 })
        );
        // Same contents reached another way, same root.
        let mut other = PendingQueue::new();
        other.apply(&delta(0..3, 0, None)).unwrap();
        other.apply(&delta(3..10, 4, Some(5))).unwrap();
        assert_eq!(other.root(), q.root());
    }

    /// The chunks a queue holds, by address.
    fn chunk_addresses(q: &PendingQueue) -> std::collections::HashSet<usize> {
        q.entries
            .chunk_ptrs()
            .chain(q.tree.chunk_ptrs())
            .map(|(ptr, _)| ptr)
            .collect()
    }

    #[test]
    fn a_clone_shares_every_chunk_and_a_push_to_it_copies_only_a_path_of_chunks() {
        // A state snapshot clones the queue: with 100,000 entries (98 entry chunks and the
        // tree's levels), the clone must share every chunk, and the next block's pushes and
        // drops copy only the chunks on the path they write — O(log n), never O(n).
        let mut q = PendingQueue::new();
        q.apply(&delta(0..100_000, 10, Some(3))).unwrap();
        let (root, len) = (q.root(), q.len());
        let before = chunk_addresses(&q);
        assert!(before.len() > 100, "{} chunks", before.len());
        let mut next = q.clone();
        assert_eq!(chunk_addresses(&next), before, "a clone shares every chunk");
        next.apply(&delta(100_000..100_016, 16, Some(0))).unwrap();
        // The original is untouched.
        assert_eq!((q.root(), q.len()), (root, len));
        assert_eq!(q.entry(100_000), None);
        assert_eq!(next.len(), len);
        let after = chunk_addresses(&next);
        let copied = after.difference(&before).count();
        let depth = (u64::BITS - next.total().leading_zeros()) as usize;
        assert!(
            copied <= 2 * depth + 2,
            "{copied} chunks copied for 16 pushes, the tree's depth is {depth}"
        );
        assert!(after.intersection(&before).count() >= before.len() - copied);
        // The table bytes a snapshot owns alone stay small next to the entries it shares.
        assert!(next.table_bytes() < 64 << 10, "{}", next.table_bytes());
    }

    #[test]
    fn from_parts_rebuilds_the_queue_its_parts_came_from() {
        let mut q = PendingQueue::new();
        q.apply(&delta(0..3000, 1200, Some(77))).unwrap();
        let entries: Vec<PendingDeposit> = (0..3000).map(|i| *q.entry(i).unwrap()).collect();
        let rebuilt =
            PendingQueue::from_parts(entries.clone(), q.tree().clone(), q.start(), 77).unwrap();
        assert_eq!(rebuilt, q);
        assert_eq!(rebuilt.root(), q.root());
        assert!(matches!(
            PendingQueue::from_parts(entries[..10].to_vec(), q.tree().clone(), 0, 0),
            Err(PendingError::Parts { .. })
        ));
        assert!(matches!(
            PendingQueue::from_parts(entries, q.tree().clone(), 3001, 0),
            Err(PendingError::Parts { .. })
        ));
    }

    #[test]
    fn rollback_restores_the_root_and_clones_are_untouched() {
        let mut q = PendingQueue::new();
        q.apply(&delta(0..2000, 100, Some(1))).unwrap();
        let before = q.clone();
        let undo = q.undo_for();
        q.apply(&delta(2000..2100, 500, Some(9))).unwrap();
        assert_eq!(before.len(), 1900);
        assert_eq!(q.len(), 1500);
        q.rollback(&undo).unwrap();
        assert_eq!(q.root(), before.root());
        assert_eq!(q, before);
        assert!(
            q.rollback(&PendingUndo {
                total: 5000,
                start: 0,
                balance_to_consume: 0
            })
            .is_err()
        );
    }

    #[test]
    fn the_overlay_sees_its_own_pushes_and_drops_and_applies_as_one_delta() {
        let mut q = PendingQueue::new();
        q.apply(&delta(0..5, 2, None)).unwrap();
        let mut o = PendingOverlay::new(q.clone());
        assert_eq!(o.len(), 3);
        o.push(entry(5)).unwrap();
        o.push(entry(6)).unwrap();
        assert_eq!(o.read(0, 10), (2..7).map(entry).collect::<Vec<_>>());
        o.drop_front(4).unwrap();
        assert_eq!(o.read(0, 10), vec![entry(6)]);
        assert_eq!(o.read(1, 10), vec![]);
        assert!(o.drop_front(2).is_err());
        o.set_balance_to_consume(3);
        assert_eq!(o.balance_to_consume(), 3);
        let d = o.into_delta();
        let root = q.root_after(&d).unwrap();
        q.apply(&d).unwrap();
        assert_eq!(q.root(), root);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get(0), Some(&entry(6)));
    }

    #[test]
    fn an_epoch_reads_a_bounded_window_whatever_the_queue_length() {
        let mut q = PendingQueue::new();
        q.apply(&delta(0..100_000, 0, None)).unwrap();
        let o = PendingOverlay::new(q.clone());
        let w = o.read(0, 16);
        assert_eq!(w.len(), 16);
        assert_eq!(w[15], entry(15));
        // Dropping from the front does not touch the tree.
        let tree_root = q.tree.tree_root();
        q.apply(&delta(0..0, 16, Some(0))).unwrap();
        assert_eq!(q.tree.tree_root(), tree_root);
        assert_eq!(q.get(0), Some(&entry(16)));
    }
}

//! deposits@3's pending-deposit queue in a checkpoint: host-made chunks of queue entries, each
//! with a range proof against the queue's tree, and the manifest part ([`QueuePart`]) that
//! carries the queue's tree root and counters.
//!
//! The checkpoint module's chunks cover the registry. A state that holds a queue (a chain that
//! has run `modnode:deposits@3.0.0`) adds chunks the host makes itself — the queue's encoding
//! is the host's, no module is involved — listed after the registry's in the manifest (format
//! [`MANIFEST_FORMAT_QUEUE`](super::manifest::MANIFEST_FORMAT_QUEUE)). Every entry ever pushed
//! travels, drained ones included: the queue's tree keeps a leaf per entry ever queued (its
//! root is what the state root commits to), and a restored node's store rebuilds the queue from
//! them (`state_cache/pending_store.rs`). Chunks are bounded like the registry's: about the target
//! chunk size each, and never more than [`MAX_QUEUE_CHUNKS`] of them.
//!
//! The manifest's state root must follow from the registry root, the extras and
//! [`QueuePart::root`] (the queue's commitment from its tree root and counters), so a restorer
//! checks every queue chunk on its own against [`QueuePart::proof_root`] and refuses a manifest
//! whose counters do not give its state root before fetching anything.
//!
//! Chunk layout (`MNCQ/1`): magic `MNCQ` | version `1` | first entry (u64 LE) | one past the
//! last (u64 LE) | the entries, [`PENDING_DEPOSIT_BYTES`] each ([`PendingDeposit::encode`]) |
//! the range proof ([`RangeProof::to_bytes`], over the tree of every entry ever pushed).

use super::manifest::{ChunkEntry, ManifestLimits};
use super::restore::{RestoreError, VerifiedChunk};
use crate::state::merkle::{
    Hash32, MerkleError, MerkleTree, RangeNodes, RangeProof, mix_in_length,
    verify_range_keeping_nodes,
};
use crate::state::pending::{PENDING_DEPOSIT_BYTES, pending_root};
use crate::state::{PendingDeposit, PendingQueue};

/// Magic of a queue chunk.
pub const QUEUE_CHUNK_MAGIC: &[u8; 4] = b"MNCQ";
/// Version of the queue chunk layout.
pub const QUEUE_CHUNK_VERSION: u8 = 1;
/// Bytes before the entries: magic, version, first entry, end.
const HEADER_BYTES: usize = 4 + 1 + 8 + 8;
/// Most queue chunks one checkpoint makes: a longer queue gets larger chunks, so a queue of
/// `u32::MAX` entries still fits the manifest's chunk limit beside the registry's chunks.
pub const MAX_QUEUE_CHUNKS: u64 = 1 << 14;
/// Bytes of an encoded entry, as a `u64`.
const ENTRY_BYTES: u64 = PENDING_DEPOSIT_BYTES as u64;
/// Most entries in one chunk, so it stays under the manifest's chunk size limit with room for
/// the header and the proof (at most 128 hashes).
const MAX_ENTRIES_PER_CHUNK: u64 = ((64 << 20) - (16 << 10)) / ENTRY_BYTES;

/// The queue as a checkpoint's manifest carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePart {
    /// Root of the queue's tree over every entry ever pushed, before its length is mixed in
    /// (what the queue's commitment names).
    pub tree_root: Hash32,
    /// Entries ever pushed: the tree's leaves, the entries the queue chunks cover.
    pub total: u64,
    /// The front offset: entries drained so far.
    pub start: u64,
    /// `deposit_balance_to_consume`, in Gwei.
    pub balance_to_consume: u64,
    /// How many of the manifest's chunks, at the end of its list, are queue chunks.
    pub chunks: u32,
}

/// Encoded size of a [`QueuePart`].
pub const QUEUE_PART_BYTES: usize = 32 + 8 + 8 + 8 + 4;

impl QueuePart {
    /// The part of `queue`, cut into `chunks` chunks.
    pub fn of(queue: &PendingQueue, chunks: u32) -> Self {
        Self {
            tree_root: queue.tree().tree_root(),
            total: queue.total(),
            start: queue.start(),
            balance_to_consume: queue.balance_to_consume(),
            chunks,
        }
    }

    /// The queue's commitment these parts give ([`PendingQueue::root`]), which the state root
    /// commits to.
    pub fn root(&self) -> Hash32 {
        pending_root(
            &self.tree_root,
            self.total,
            self.start,
            self.balance_to_consume,
        )
    }

    /// What each queue chunk's range proof leads to: the tree root with the entry count mixed
    /// in (the tree's [`root`](crate::state::merkle::MerkleTree::root)).
    pub fn proof_root(&self) -> Hash32 {
        mix_in_length(&self.tree_root, self.total)
    }

    /// `tree_root 32 | total u64 | start u64 | balance_to_consume u64 | chunks u32`, LE.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.tree_root);
        out.extend_from_slice(&self.total.to_le_bytes());
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.balance_to_consume.to_le_bytes());
        out.extend_from_slice(&self.chunks.to_le_bytes());
    }

    /// Decodes [`encode`](Self::encode)'s bytes from the front of `bytes`, returning the rest.
    pub fn decode(bytes: &[u8]) -> Option<(Self, &[u8])> {
        let (tree_root, rest) = bytes.split_first_chunk::<32>()?;
        let (total, rest) = rest.split_first_chunk::<8>()?;
        let (start, rest) = rest.split_first_chunk::<8>()?;
        let (balance, rest) = rest.split_first_chunk::<8>()?;
        let (chunks, rest) = rest.split_first_chunk::<4>()?;
        let part = Self {
            tree_root: *tree_root,
            total: u64::from_le_bytes(*total),
            start: u64::from_le_bytes(*start),
            balance_to_consume: u64::from_le_bytes(*balance),
            chunks: u32::from_le_bytes(*chunks),
        };
        Some((part, rest))
    }

    /// Checks the counters and that `chunks` (the manifest's queue chunks, the first at
    /// manifest index `first_index`) tile `[0, total)` exactly, in order, each within the size
    /// limit and holding at least its entries' bytes. The reason names the chunk.
    pub fn validate(
        &self,
        chunks: &[ChunkEntry],
        first_index: usize,
        limits: &ManifestLimits,
    ) -> Result<(), String> {
        if self.start > self.total {
            return Err(format!(
                "front offset {} is past the {} entries ever queued",
                self.start, self.total
            ));
        }
        if u64::try_from(chunks.len()).ok() != Some(u64::from(self.chunks)) {
            return Err(format!(
                "{} queue chunks counted, {} listed",
                self.chunks,
                chunks.len()
            ));
        }
        let mut next = 0u64;
        for (offset, c) in chunks.iter().enumerate() {
            let index = first_index.saturating_add(offset);
            if c.start != next || c.start >= c.end || c.end > self.total {
                return Err(format!(
                    "chunk {index} covers entries [{}, {}); the next uncovered entry is {next} of {}",
                    c.start, c.end, self.total
                ));
            }
            let least = c
                .end
                .saturating_sub(c.start)
                .saturating_mul(ENTRY_BYTES)
                .saturating_add(HEADER_BYTES as u64);
            if c.size > limits.max_chunk_bytes || u64::from(c.size) < least {
                return Err(format!(
                    "chunk {index} of entries [{}, {}) is listed at {} bytes: at least {least} and at most {} are possible",
                    c.start, c.end, c.size, limits.max_chunk_bytes
                ));
            }
            next = c.end;
        }
        if next != self.total {
            return Err(format!(
                "entries [{next}, {}) are in no queue chunk",
                self.total
            ));
        }
        Ok(())
    }
}

/// Entries per queue chunk for a queue of `total` entries ever pushed: about
/// `target_chunk_bytes` of entries (the registry chunks' budget), at least one, and enough that
/// no more than [`MAX_QUEUE_CHUNKS`] chunks are made.
pub fn entries_per_chunk(total: u64, target_chunk_bytes: u64) -> u64 {
    let by_target = target_chunk_bytes
        .checked_div(ENTRY_BYTES)
        .unwrap_or(0)
        .min(MAX_ENTRIES_PER_CHUNK);
    let by_count = total.div_ceil(MAX_QUEUE_CHUNKS);
    by_target.max(by_count).max(1)
}

/// The entry ranges of a queue of `total` entries ever pushed: `[i·n, (i+1)·n)`, the last one
/// shorter.
pub fn plan(total: u64, target_chunk_bytes: u64) -> Vec<(u64, u64)> {
    let per_chunk = entries_per_chunk(total, target_chunk_bytes);
    let mut out = Vec::new();
    let mut start = 0u64;
    while start < total {
        let end = start.saturating_add(per_chunk).min(total);
        out.push((start, end));
        start = end;
    }
    out
}

/// The chunk of entries `[start, end)` of `queue` (drained entries included), with its range
/// proof; `Err` names what the queue lacks (ours: a range planned outside it).
pub fn build_chunk(queue: &PendingQueue, start: u64, end: u64) -> Result<Vec<u8>, String> {
    let proof = queue
        .tree()
        .range_proof(start, end)
        .map_err(|e| format!("queue entries [{start}, {end}): {e}"))?
        .to_bytes();
    let count = usize::try_from(end.saturating_sub(start)).map_err(|_| "range too long")?;
    let mut out = Vec::with_capacity(
        count
            .saturating_mul(PENDING_DEPOSIT_BYTES)
            .saturating_add(HEADER_BYTES)
            .saturating_add(proof.len()),
    );
    out.extend_from_slice(QUEUE_CHUNK_MAGIC);
    out.push(QUEUE_CHUNK_VERSION);
    out.extend_from_slice(&start.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    for index in start..end {
        let entry = queue
            .entry(index)
            .ok_or_else(|| format!("the queue has no entry {index}"))?;
        out.extend_from_slice(&entry.encode());
    }
    out.extend_from_slice(&proof);
    Ok(out)
}

/// An opened queue chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueChunk {
    /// First entry.
    pub start: u64,
    /// One past the last entry.
    pub end: u64,
    /// The entries, in order.
    pub entries: Vec<PendingDeposit>,
    /// The range proof against [`QueuePart::proof_root`].
    pub proof: RangeProof,
}

/// Decodes a queue chunk; the reason names the malformed part.
pub fn open_chunk(bytes: &[u8]) -> Result<QueueChunk, String> {
    let (magic, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or("shorter than a queue chunk header")?;
    if magic != QUEUE_CHUNK_MAGIC {
        return Err("not a queue chunk (bad magic)".into());
    }
    let (&version, rest) = rest.split_first().ok_or("truncated in the version")?;
    if version != QUEUE_CHUNK_VERSION {
        return Err(format!(
            "queue chunk version {version}, this node reads {QUEUE_CHUNK_VERSION}"
        ));
    }
    let (start, rest) = rest
        .split_first_chunk::<8>()
        .ok_or("truncated in the first entry")?;
    let (end, rest) = rest
        .split_first_chunk::<8>()
        .ok_or("truncated in the end")?;
    let (start, end) = (u64::from_le_bytes(*start), u64::from_le_bytes(*end));
    let count = end
        .checked_sub(start)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("empty or reversed range [{start}, {end})"))?;
    let entry_bytes = count
        .checked_mul(ENTRY_BYTES)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= rest.len())
        .ok_or_else(|| {
            format!(
                "{count} entries do not fit the chunk's {} bytes",
                rest.len()
            )
        })?;
    let (entries, proof) = rest
        .split_at_checked(entry_bytes)
        .ok_or("truncated in the entries")?;
    let entries = entries
        .chunks_exact(PENDING_DEPOSIT_BYTES)
        .map(PendingDeposit::decode)
        .collect::<Option<Vec<_>>>()
        .ok_or("an entry does not decode")?;
    let proof = RangeProof::from_bytes(proof).map_err(|e| format!("range proof: {e}"))?;
    Ok(QueueChunk {
        start,
        end,
        entries,
        proof,
    })
}

/// Checks a pending-deposit queue chunk whose size and hash match its entry `entry` (chunk
/// `index`): it opens (the host's layout), covers the listed entries, and its range proof proves
/// their leaves against the queue's tree root in `part`. A failure is the manifest producer's:
/// these are the bytes it listed.
pub(super) fn verify_queue_chunk(
    part: &QueuePart,
    index: usize,
    entry: ChunkEntry,
    bytes: &[u8],
) -> Result<VerifiedChunk, RestoreError> {
    let chunk = open_chunk(bytes).map_err(|reason| RestoreError::Malformed {
        index,
        reason: format!("pending-deposit queue chunk: {reason}"),
    })?;
    if (chunk.start, chunk.end) != (entry.start, entry.end) {
        return Err(RestoreError::WrongRange {
            index,
            start: entry.start,
            end: entry.end,
            found_start: chunk.start,
            found_end: chunk.end,
        });
    }
    if chunk.proof.tree_len() != part.total {
        return Err(RestoreError::Proof {
            index,
            source: MerkleError::RootMismatch,
        });
    }
    let hashes: Vec<Hash32> = chunk.entries.iter().map(PendingDeposit::leaf).collect();
    let nodes = verify_range_keeping_nodes(&part.proof_root(), entry.start, &hashes, &chunk.proof)
        .map_err(|source| RestoreError::Proof { index, source })?;
    Ok(VerifiedChunk {
        index,
        start: entry.start,
        end: entry.end,
        validators: Vec::new(),
        balances: Vec::new(),
        hashes,
        nodes,
        pending: chunk.entries,
    })
}

/// The queue of `part` from its verified chunks, in entry order: the entries as proven, the
/// tree assembled from the nodes their proofs computed (nothing hashed again).
pub(super) fn rebuild_queue(
    part: &QueuePart,
    mut chunks: Vec<VerifiedChunk>,
) -> Result<PendingQueue, RestoreError> {
    let total = usize::try_from(part.total).unwrap_or(usize::MAX);
    let mut entries = Vec::with_capacity(total.min(1 << 24));
    for chunk in &mut chunks {
        entries.append(&mut chunk.pending);
    }
    let ranges: Vec<(&[Hash32], &RangeNodes)> = chunks
        .iter()
        .map(|c| (c.hashes.as_slice(), &c.nodes))
        .collect();
    let tree = MerkleTree::from_proven_ranges(part.total, &ranges)
        .map_err(|e| RestoreError::Queue(e.to_string()))?;
    PendingQueue::from_parts(entries, tree, part.start, part.balance_to_consume)
        .map_err(|e| RestoreError::Queue(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::PendingDelta;

    fn queue(n: u64, drained: u64) -> PendingQueue {
        let mut q = PendingQueue::new();
        q.apply(&PendingDelta {
            pushed: (0..n)
                .map(|i| PendingDeposit {
                    pubkey: [(i % 251) as u8; 48],
                    withdrawal_credentials: [1; 32],
                    amount: i,
                    signature: [2; 96],
                    slot: i,
                    height: i,
                })
                .collect(),
            dropped: drained,
            balance_to_consume: Some(5),
        })
        .unwrap();
        q
    }

    #[test]
    fn chunks_are_bounded_by_the_target_and_by_their_count() {
        assert_eq!(entries_per_chunk(10, 1000), 5);
        assert_eq!(entries_per_chunk(10, 0), 1);
        assert_eq!(entries_per_chunk(1_000_000, 1 << 20), 5242);
        // A huge queue with a tiny target still makes at most MAX_QUEUE_CHUNKS chunks.
        assert_eq!(plan(u64::from(u32::MAX), 0).len() as u64, MAX_QUEUE_CHUNKS);
        assert_eq!(plan(11, 1000), vec![(0, 5), (5, 10), (10, 11)]);
        assert!(plan(0, 1000).is_empty());
    }

    #[test]
    fn a_chunk_opens_to_its_entries_and_proves_them() {
        let q = queue(40, 7);
        let part = QueuePart::of(&q, 3);
        assert_eq!(part.root(), q.root());
        let bytes = build_chunk(&q, 16, 32).unwrap();
        let chunk = open_chunk(&bytes).unwrap();
        assert_eq!((chunk.start, chunk.end), (16, 32));
        assert_eq!(chunk.entries[0], *q.entry(16).unwrap());
        let leaves: Vec<Hash32> = chunk.entries.iter().map(PendingDeposit::leaf).collect();
        crate::state::merkle::verify_range(&part.proof_root(), 16, &leaves, &chunk.proof).unwrap();
        // Every truncation is refused, never a panic.
        for len in 0..bytes.len() {
            assert!(open_chunk(&bytes[..len]).is_err(), "{len} bytes");
        }
        assert!(build_chunk(&q, 30, 41).is_err());
    }
}

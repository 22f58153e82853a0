//! The chunk log's appends gathered in block-aligned memory and written out as whole blocks
//! through the log's direct-I/O handle ([`ChunkLog::write_direct`]).
//!
//! A direct write must start and end on a block boundary ([`DIRECT_ALIGN`]); chunks do not.
//! [`Staging`] holds the file's bytes from the last block boundary at or before the end of
//! what was written out, so appending stays contiguous (no gaps between chunks) however the
//! chunks and the flushes fall:
//! - when it holds [`STAGE_BYTES`], its whole blocks are written and the partial last block
//!   stays staged;
//! - [`Staging::write_padded`] (a flush) writes everything, the last block padded with zeros,
//!   and keeps that block's bytes staged: the next write starts on its boundary and writes them
//!   again, byte for byte the same, so a write torn by a crash cannot change a byte that was
//!   durable before it.
//!
//! The padding is cut off again (the file's length set to the staged end) before the sync that
//! follows, so after a flush the log ends where its last chunk does, as when it is written
//! through the page cache.

use super::chunk_log::{ChunkLog, DIRECT_ALIGN, LogError};

/// Staged bytes that make a write-out of whole blocks (a restore's flush comes earlier, every
/// 8 MiB at most).
pub(super) const STAGE_BYTES: usize = 8 << 20;

/// The log's bytes from `base` (block-aligned) to its end, in block-aligned memory.
#[derive(Debug)]
pub(super) struct Staging {
    /// Backing memory; its block-aligned part starts at `skew`.
    memory: Vec<u8>,
    skew: usize,
    /// File offset of the first staged byte: a multiple of [`DIRECT_ALIGN`].
    base: u64,
    /// Bytes staged: the file's `base..base + len`.
    len: usize,
    /// Of them, how many are on disk already (the partial block a write-out kept).
    written: usize,
}

/// `n` rounded down to a multiple of [`DIRECT_ALIGN`].
fn block_floor(n: usize) -> usize {
    n.saturating_sub(n.checked_rem(DIRECT_ALIGN).unwrap_or(0))
}

/// `n` rounded up to a multiple of [`DIRECT_ALIGN`].
fn block_ceil(n: usize) -> usize {
    n.div_ceil(DIRECT_ALIGN).saturating_mul(DIRECT_ALIGN)
}

impl Staging {
    /// Staging for appends at `end` of `log`: the bytes of `end`'s partial block are read back
    /// (what the file lacks of them — unrecorded bytes a switch abandoned — reads as zeros).
    pub(super) fn at(log: &ChunkLog, end: u64) -> Result<Self, LogError> {
        let align = u64::try_from(DIRECT_ALIGN).unwrap_or(u64::MAX);
        let base = end.saturating_sub(end.checked_rem(align).unwrap_or(0));
        let head = usize::try_from(end.saturating_sub(base)).unwrap_or(0);
        let mut staging = Self {
            memory: Vec::new(),
            skew: 0,
            base,
            len: 0,
            written: 0,
        };
        let mut bytes = log.read_up_to(base, head)?;
        bytes.resize(head, 0);
        staging.push(&bytes);
        staging.written = head;
        Ok(staging)
    }

    /// The file offset after the last staged byte.
    pub(super) fn end(&self) -> u64 {
        self.base
            .saturating_add(u64::try_from(self.len).unwrap_or(u64::MAX))
    }

    /// Whether enough is staged for [`write_blocks`](Self::write_blocks).
    pub(super) fn is_full(&self) -> bool {
        self.len >= STAGE_BYTES
    }

    /// Whether bytes are staged that are not on disk.
    pub(super) fn has_unwritten(&self) -> bool {
        self.len > self.written
    }

    fn capacity(&self) -> usize {
        self.memory.len().saturating_sub(self.skew)
    }

    /// The staged memory's aligned part (all of it, staged or not).
    fn aligned(&mut self) -> &mut [u8] {
        let skew = self.skew;
        self.memory.get_mut(skew..).unwrap_or_default()
    }

    /// Appends `bytes` after the staged ones, growing the memory when they do not fit.
    pub(super) fn push(&mut self, bytes: &[u8]) {
        let needed = self.len.saturating_add(bytes.len());
        if needed > self.capacity() {
            let capacity = block_ceil(
                needed
                    .max(STAGE_BYTES)
                    .max(self.capacity().saturating_mul(2)),
            );
            let mut memory = vec![0u8; capacity.saturating_add(DIRECT_ALIGN)];
            let skew = memory.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
            let len = self.len;
            if let (Some(to), Some(from)) = (
                memory.get_mut(skew..skew.saturating_add(len)),
                self.memory.get(self.skew..self.skew.saturating_add(len)),
            ) {
                to.copy_from_slice(from);
            }
            self.memory = memory;
            self.skew = skew;
        }
        let at = self.len;
        if let Some(to) = self.aligned().get_mut(at..needed) {
            to.copy_from_slice(bytes);
            self.len = needed;
        }
    }

    /// Writes the staged whole blocks to `log` and keeps the partial last one staged.
    pub(super) fn write_blocks(&mut self, log: &ChunkLog) -> Result<(), LogError> {
        let whole = block_floor(self.len);
        if whole == 0 {
            return Ok(());
        }
        let base = self.base;
        log.write_direct(base, self.aligned().get(..whole).unwrap_or_default())?;
        self.keep_from(whole);
        Ok(())
    }

    /// Writes everything staged to `log`, the last block padded with zeros, cuts the padding
    /// off the file, and keeps that block's bytes staged (see the module docs).
    pub(super) fn write_padded(&mut self, log: &ChunkLog) -> Result<(), LogError> {
        if !self.has_unwritten() {
            return Ok(());
        }
        let (len, padded) = (self.len, block_ceil(self.len));
        if padded > self.capacity() {
            // Never: the memory is a whole number of blocks. Grow it rather than write less.
            self.push(&vec![0; padded.saturating_sub(len)]);
            self.len = len;
        }
        if let Some(padding) = self.aligned().get_mut(len..padded) {
            padding.fill(0);
        }
        let base = self.base;
        log.write_direct(base, self.aligned().get(..padded).unwrap_or_default())?;
        if padded > len {
            log.set_len(self.end())?;
        }
        self.keep_from(block_floor(len));
        self.written = self.len;
        Ok(())
    }

    /// Drops the staged bytes before `from` (a multiple of [`DIRECT_ALIGN`], written out).
    fn keep_from(&mut self, from: usize) {
        let len = self.len;
        self.aligned().copy_within(from..len, 0);
        self.base = self
            .base
            .saturating_add(u64::try_from(from).unwrap_or(u64::MAX));
        self.len = len.saturating_sub(from);
        self.written = self.written.saturating_sub(from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Appends `chunks` to a fresh log through staging, flushing after the chunks `flushes`
    /// marks and reopening the staging there when `reopen` is set; the file's bytes.
    fn append(chunks: &[Vec<u8>], flushes: &[bool], reopen: bool, direct: bool) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let log = ChunkLog::create(dir.path(), 0).unwrap();
        if !direct {
            log.refuse_direct();
        }
        let mut staging = Staging::at(&log, 0).unwrap();
        for (chunk, &flush) in chunks
            .iter()
            .zip(flushes.iter().chain(std::iter::repeat(&false)))
        {
            staging.push(chunk);
            if staging.is_full() {
                staging.write_blocks(&log).unwrap();
            }
            if flush {
                staging.write_padded(&log).unwrap();
                if reopen {
                    let end = staging.end();
                    staging = Staging::at(&log, end).unwrap();
                }
            }
        }
        let end = staging.end();
        staging.write_padded(&log).unwrap();
        log.sync().unwrap();
        let bytes = std::fs::read(log.path()).unwrap();
        assert_eq!(
            bytes.len() as u64,
            end,
            "the log ends where the last chunk does"
        );
        bytes
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever the chunk sizes and wherever the flushes fall (a reopened store primes its
        /// staging from the file), the log holds exactly the chunks one after the other.
        #[test]
        fn staged_appends_lay_the_chunks_end_to_end(
            sizes in proptest::collection::vec(0usize..40_000, 1..40),
            flushes in proptest::collection::vec(any::<bool>(), 0..40),
            reopen in any::<bool>(),
            seed in any::<u8>(),
        ) {
            let chunks: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8 ^ seed | 1).collect())
                .collect();
            let expected = chunks.concat();
            prop_assert_eq!(append(&chunks, &flushes, reopen, true), expected.clone());
            prop_assert_eq!(append(&chunks, &flushes, reopen, false), expected);
        }
    }

    #[test]
    fn more_than_a_stage_is_written_in_whole_blocks_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = ChunkLog::create(dir.path(), 0).unwrap();
        let mut staging = Staging::at(&log, 0).unwrap();
        let big = vec![5u8; STAGE_BYTES + 1000];
        staging.push(&big);
        assert!(staging.is_full());
        staging.write_blocks(&log).unwrap();
        assert_eq!(staging.base, block_floor(big.len()) as u64);
        assert_eq!(staging.len, big.len() - block_floor(big.len()));
        assert!(staging.has_unwritten());
        staging.write_padded(&log).unwrap();
        assert!(!staging.has_unwritten());
        assert_eq!(staging.end(), big.len() as u64);
        let on_disk = std::fs::read(log.path()).unwrap();
        assert_eq!(&on_disk[..big.len()], &big[..]);
        if !log.is_direct() {
            eprintln!(
                "note: no direct I/O in the temporary directory's file system; the fallback wrote"
            );
        }
    }

    /// The store's appends over staging: chunks of odd sizes, flushed at odd points, the store
    /// reopened between them (staging primed from the file), and the file system refusing
    /// direct writes half-way with bytes staged: every chunk reads back whole.
    #[test]
    fn a_store_reads_back_every_chunk_however_its_appends_were_written() {
        use super::super::RestoreStore;
        use sha2::{Digest, Sha256};
        let dir = tempfile::tempdir().unwrap();
        let chunk = |i: usize| -> Vec<u8> {
            (0..(i * 977 + 13) % 30_000)
                .map(|j| (i + j) as u8)
                .collect()
        };
        let put = |store: &RestoreStore, range: std::ops::Range<usize>| {
            for i in range {
                let bytes = chunk(i);
                store
                    .put_chunk(i, &bytes, &Sha256::digest(&bytes).into())
                    .unwrap();
            }
        };
        let store = RestoreStore::open(dir.path()).unwrap();
        put(&store, 0..7);
        store.flush().unwrap();
        put(&store, 7..9);
        store.flush().unwrap();
        drop(store);
        let store = RestoreStore::open(dir.path()).unwrap();
        put(&store, 9..14);
        store.refuse_direct_writes().unwrap();
        put(&store, 14..20);
        store.flush().unwrap();
        drop(store);
        let store = RestoreStore::open(dir.path()).unwrap();
        let read: Vec<(usize, Vec<u8>)> = store.chunks().unwrap();
        let expected: Vec<(usize, Vec<u8>)> = (0..20).map(|i| (i, chunk(i))).collect();
        assert_eq!(read.len(), expected.len(), "every chunk is recorded");
        assert!(read == expected, "every chunk reads back as it was put");
    }

    #[test]
    fn a_switch_that_abandoned_unwritten_bytes_primes_with_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let log = ChunkLog::create(dir.path(), 0).unwrap();
        log.write_at(0, &[9; 100]).unwrap();
        // The store's end is past the file's (bytes reserved, never written, then abandoned).
        let staging = Staging::at(&log, 150).unwrap();
        assert_eq!((staging.base, staging.len, staging.written), (0, 150, 150));
        let mut staging = staging;
        assert_eq!(
            &staging.aligned()[..150],
            &[[9u8; 100].as_slice(), &[0; 50]].concat()[..]
        );
    }
}

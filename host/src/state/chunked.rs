//! A persistent vector: fixed-size chunks behind `Arc`s, copied on write.
//!
//! [`ChunkedVec`] is what lets the node keep many states of a 2M-validator registry at once.
//! Cloning it clones one `Arc` per chunk (a few thousand pointers for millions of elements, never
//! the elements); a write copies only the chunk it touches, and only if another clone still
//! shares it. Two states one block apart therefore share every chunk the block did not touch.
//!
//! Every chunk but the last holds exactly [`CHUNK_LEN`] elements, so element `i` lives in chunk
//! `i / CHUNK_LEN` at offset `i % CHUNK_LEN`. Chunks are allocated with room for
//! [`CHUNK_LEN`] elements so appends never reallocate them, and [`ChunkedVec::chunk_ptrs`]
//! names each chunk by its address so a cache can count a chunk shared by many states once.

// Consensus code: on top of what the crate denies outside tests (see `lib.rs`), no `panic!`.
#![cfg_attr(not(test), deny(clippy::panic))]

use std::fmt;
use std::sync::Arc;

/// Elements per chunk. A power of two, so the split of an index is a shift and a mask.
pub const CHUNK_LEN: usize = 1024;
const CHUNK_SHIFT: u32 = CHUNK_LEN.trailing_zeros();
const CHUNK_MASK: usize = CHUNK_LEN - 1;

/// A chunk as stored: a vector with capacity [`CHUNK_LEN`].
type Chunk<T> = Vec<T>;

/// A persistent vector of `T` in shared, copy-on-write chunks (see the module docs).
#[derive(Clone)]
pub struct ChunkedVec<T> {
    chunks: Vec<Arc<Chunk<T>>>,
    len: usize,
}

impl<T> ChunkedVec<T> {
    /// The empty vector, as a constant (for `static` empties).
    pub const EMPTY: Self = Self {
        chunks: Vec::new(),
        len: 0,
    };
}

impl<T> Default for ChunkedVec<T> {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<T: fmt::Debug + Clone> fmt::Debug for ChunkedVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: PartialEq> PartialEq for ChunkedVec<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .chunks
                .iter()
                .zip(&other.chunks)
                .all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
    }
}

impl<T: Eq> Eq for ChunkedVec<T> {}

/// `(chunk, offset)` of element `index`.
fn split(index: usize) -> (usize, usize) {
    (index >> CHUNK_SHIFT, index & CHUNK_MASK)
}

impl<T: Clone> ChunkedVec<T> {
    /// An empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// `len` copies of `value`.
    pub fn filled(len: usize, value: T) -> Self {
        let mut chunks = Vec::with_capacity(len.div_ceil(CHUNK_LEN));
        let mut left = len;
        while left > 0 {
            let take = left.min(CHUNK_LEN);
            // Exact: a filled vector is usually a fixed-size table that never grows.
            let mut chunk = Vec::with_capacity(take);
            chunk.resize(take, value.clone());
            chunks.push(Arc::new(chunk));
            left = left.saturating_sub(take);
        }
        Self { chunks, len }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `index`.
    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len {
            return None;
        }
        let (chunk, offset) = split(index);
        self.chunks.get(chunk)?.get(offset)
    }

    /// The first element.
    pub fn first(&self) -> Option<&T> {
        self.get(0)
    }

    /// The last element.
    pub fn last(&self) -> Option<&T> {
        self.get(self.len.checked_sub(1)?)
    }

    /// Mutable access to element `index`, copying its chunk first if another vector shares it.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        if index >= self.len {
            return None;
        }
        let (chunk, offset) = split(index);
        unshare(self.chunks.get_mut(chunk)?).get_mut(offset)
    }

    /// Replaces element `index`; returns whether it exists.
    pub fn set(&mut self, index: usize, value: T) -> bool {
        match self.get_mut(index) {
            Some(slot) => {
                *slot = value;
                true
            }
            None => false,
        }
    }

    /// Appends an element.
    pub fn push(&mut self, value: T) {
        let (_, offset) = split(self.len);
        if offset == 0 || self.chunks.is_empty() {
            let mut chunk = Vec::with_capacity(CHUNK_LEN);
            chunk.push(value);
            self.chunks.push(Arc::new(chunk));
        } else if let Some(last) = self.chunks.last_mut() {
            unshare(last).push(value);
        }
        self.len = self.len.saturating_add(1);
    }

    /// Appends every element of `values`.
    pub fn extend_from_slice(&mut self, values: &[T]) {
        for value in values {
            self.push(value.clone());
        }
    }

    /// Grows to `len` elements with copies of `value`, or truncates to `len`.
    pub fn resize(&mut self, len: usize, value: T) {
        self.truncate(len);
        while self.len < len {
            self.push(value.clone());
        }
    }

    /// Drops the elements at `len` and up; does nothing if there are at most `len`.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let chunks = len.div_ceil(CHUNK_LEN);
        self.chunks.truncate(chunks);
        let (_, offset) = split(len);
        if offset != 0
            && let Some(last) = self.chunks.last_mut()
        {
            unshare(last).truncate(offset);
        }
        self.len = len;
    }

    /// Sets every element to `value`, keeping the length.
    pub fn fill(&mut self, value: T) {
        for chunk in &mut self.chunks {
            unshare(chunk).fill(value.clone());
        }
    }

    /// The elements in order.
    pub fn iter(&self) -> Iter<'_, T> {
        fn chunk_iter<T>(chunk: &Arc<Chunk<T>>) -> std::slice::Iter<'_, T> {
            chunk.iter()
        }
        let f: fn(&Arc<Chunk<T>>) -> std::slice::Iter<'_, T> = chunk_iter::<T>;
        self.chunks.iter().flat_map(f)
    }

    /// The chunks in order, as slices: [`CHUNK_LEN`] elements each, the last one 1 to
    /// [`CHUNK_LEN`] (what the store keeps one record per).
    pub fn chunks(&self) -> impl ExactSizeIterator<Item = &[T]> + '_ {
        self.chunks.iter().map(|chunk| chunk.as_slice())
    }

    /// The elements of `start..end` (clamped to the length), in order.
    pub fn range(&self, start: usize, end: usize) -> impl Iterator<Item = &T> + '_ {
        let end = end.min(self.len);
        let start = start.min(end);
        let (first, offset) = split(start);
        self.chunks
            .iter()
            .skip(first)
            .flat_map(|chunk| chunk.iter())
            .skip(offset)
            .take(end.saturating_sub(start))
    }

    /// The elements of `start..end` (clamped to the length) as the contiguous slices they are
    /// stored in, in order. Vectors of the same length are split at the same indices, so two of
    /// them can be walked slice by slice in step (the checkpoint leaf encoder does).
    pub fn slices(&self, start: usize, end: usize) -> impl Iterator<Item = &[T]> + '_ {
        let end = end.min(self.len);
        let start = start.min(end);
        let (first, _) = split(start);
        self.chunks
            .iter()
            .enumerate()
            .skip(first)
            .map_while(move |(index, chunk)| {
                let base = index.checked_mul(CHUNK_LEN)?;
                let from = start.saturating_sub(base);
                let to = end.checked_sub(base)?.min(chunk.len());
                (from < to).then(|| chunk.get(from..to)).flatten()
            })
    }

    /// Each chunk's address and the heap bytes it owns, for accounting shared chunks once.
    pub fn chunk_ptrs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.chunks.iter().map(|chunk| {
            let bytes = chunk_bytes::<T>(chunk);
            (Arc::as_ptr(chunk) as usize, bytes)
        })
    }

    /// Heap bytes of the chunk table itself (not of the chunks), owned by this vector alone.
    pub fn table_bytes(&self) -> usize {
        self.chunks
            .capacity()
            .saturating_mul(std::mem::size_of::<Arc<Chunk<T>>>())
    }

    /// Indices below `len` (clamped to both lengths) whose elements differ between `self` and
    /// `other`. Chunks the two share are skipped without being read, so for two states a few
    /// blocks apart this reads only the chunks those blocks copied.
    pub fn differing(&self, other: &Self, len: usize) -> Vec<usize>
    where
        T: PartialEq,
    {
        let len = len.min(self.len).min(other.len);
        let mut out = Vec::new();
        for (chunk, (a, b)) in self.chunks.iter().zip(&other.chunks).enumerate() {
            let start = chunk.saturating_mul(CHUNK_LEN);
            if start >= len {
                break;
            }
            if Arc::ptr_eq(a, b) {
                continue;
            }
            let end = len.saturating_sub(start).min(CHUNK_LEN);
            out.extend(
                a.iter()
                    .zip(b.iter())
                    .take(end)
                    .enumerate()
                    .filter(|(_, (x, y))| x != y)
                    .map(|(offset, _)| start.saturating_add(offset)),
            );
        }
        out
    }

    /// Heap bytes of the table and every chunk, as if nothing were shared.
    pub fn heap_bytes(&self) -> usize {
        self.chunk_ptrs()
            .fold(self.table_bytes(), |sum, (_, bytes)| {
                sum.saturating_add(bytes)
            })
    }
}

/// Heap bytes one chunk costs: its elements' allocation plus the `Arc`'s counts and `Vec` header.
fn chunk_bytes<T>(chunk: &Chunk<T>) -> usize {
    chunk
        .capacity()
        .saturating_mul(std::mem::size_of::<T>())
        .saturating_add(std::mem::size_of::<Arc<Chunk<T>>>().saturating_mul(2))
        .saturating_add(std::mem::size_of::<Chunk<T>>())
}

/// The chunk, copied into a fresh full-capacity allocation first if it is shared.
fn unshare<T: Clone>(chunk: &mut Arc<Chunk<T>>) -> &mut Chunk<T> {
    if Arc::get_mut(chunk).is_none() {
        let mut copy = Vec::with_capacity(chunk.capacity());
        copy.extend_from_slice(chunk);
        *chunk = Arc::new(copy);
    }
    // `chunk` is unique now: either it was, or it was just replaced by a fresh `Arc`.
    Arc::make_mut(chunk)
}

impl<T: Clone> From<Vec<T>> for ChunkedVec<T> {
    fn from(values: Vec<T>) -> Self {
        Self::from(values.as_slice())
    }
}

impl<T: Clone> From<&[T]> for ChunkedVec<T> {
    fn from(values: &[T]) -> Self {
        let len = values.len();
        let chunks = values
            .chunks(CHUNK_LEN)
            .map(|part| {
                let mut chunk = Vec::with_capacity(CHUNK_LEN);
                chunk.extend_from_slice(part);
                Arc::new(chunk)
            })
            .collect();
        Self { chunks, len }
    }
}

impl<T: Clone> ChunkedVec<T> {
    /// The concatenation of `parts`, copied once straight into the chunks (no intermediate
    /// vector of the whole).
    pub fn from_slices<'a>(parts: impl IntoIterator<Item = &'a [T]>) -> Self
    where
        T: 'a,
    {
        let mut builder = ChunkedBuilder::new();
        for part in parts {
            builder.extend_from_slice(part);
        }
        builder.finish()
    }
}

/// A [`ChunkedVec`] built by appending, each element copied once into its final chunk: for
/// a caller that receives the elements in pieces (a restore's verified chunks, in order) and
/// wants to drop each piece as soon as it is copied.
#[derive(Debug, Clone)]
pub struct ChunkedBuilder<T> {
    chunks: Vec<Arc<Chunk<T>>>,
    current: Chunk<T>,
    len: usize,
}

impl<T: Clone> Default for ChunkedBuilder<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> ChunkedBuilder<T> {
    /// An empty builder.
    pub fn new() -> Self {
        Self {
            chunks: Vec::new(),
            current: Vec::with_capacity(CHUNK_LEN),
            len: 0,
        }
    }

    /// Elements appended so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `part`.
    pub fn extend_from_slice(&mut self, part: &[T]) {
        let mut rest = part;
        while !rest.is_empty() {
            let room = CHUNK_LEN.saturating_sub(self.current.len());
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.current.extend_from_slice(now);
            self.len = self.len.saturating_add(now.len());
            rest = later;
            if self.current.len() == CHUNK_LEN {
                self.chunks.push(Arc::new(std::mem::replace(
                    &mut self.current,
                    Vec::with_capacity(CHUNK_LEN),
                )));
            }
        }
    }

    /// Element `index` of those appended so far.
    pub fn get(&self, index: usize) -> Option<&T> {
        let chunk = index >> CHUNK_SHIFT;
        match self.chunks.get(chunk) {
            Some(full) => full.get(index & CHUNK_MASK),
            None if chunk == self.chunks.len() => self.current.get(index & CHUNK_MASK),
            None => None,
        }
    }

    /// The vector of everything appended.
    pub fn finish(mut self) -> ChunkedVec<T> {
        if !self.current.is_empty() {
            self.chunks.push(Arc::new(self.current));
        }
        ChunkedVec {
            chunks: self.chunks,
            len: self.len,
        }
    }
}

/// Iterator over a [`ChunkedVec`]'s elements.
pub type Iter<'a, T> = std::iter::FlatMap<
    std::slice::Iter<'a, Arc<Chunk<T>>>,
    std::slice::Iter<'a, T>,
    fn(&'a Arc<Chunk<T>>) -> std::slice::Iter<'a, T>,
>;

impl<'a, T: Clone> IntoIterator for &'a ChunkedVec<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Clone> FromIterator<T> for ChunkedVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut out = Self::new();
        for value in iter {
            out.push(value);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// Built from consecutive parts of any sizes, the vector is the one built from their
        /// concatenation: same elements, same chunk boundaries.
        #[test]
        fn from_slices_equals_from_the_concatenation(
            sizes in proptest::collection::vec(0usize..3000, 0..8)
        ) {
            let mut next = 0u32;
            let parts: Vec<Vec<u32>> = sizes
                .iter()
                .map(|&n| (0..n).map(|_| { next += 1; next }).collect())
                .collect();
            let whole: Vec<u32> = parts.concat();
            let built = ChunkedVec::from_slices(parts.iter().map(Vec::as_slice));
            let expected = ChunkedVec::from(whole.as_slice());
            prop_assert_eq!(built.len(), whole.len());
            prop_assert!(built == expected);
            let lens = |v: &ChunkedVec<u32>| v.chunks.iter().map(|c| c.len()).collect::<Vec<_>>();
            prop_assert_eq!(lens(&built), lens(&expected));
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u32),
        Set(usize, u32),
        Truncate(usize),
        Snapshot,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u32>().prop_map(Op::Push),
            3 => (0usize..5000, any::<u32>()).prop_map(|(i, v)| Op::Set(i, v)),
            1 => (0usize..5000).prop_map(Op::Truncate),
            1 => Just(Op::Snapshot),
        ]
    }

    proptest! {
        // Failing cases are printed, not written next to the sources.
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// Behaves like a `Vec`, and a clone taken earlier never sees later writes.
        #[test]
        fn matches_vec_and_snapshots_are_immutable(
            start in 0usize..3000,
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let mut model: Vec<u32> = (0..start as u32).collect();
            let mut vec = ChunkedVec::from(model.clone());
            let mut snapshots = Vec::new();
            for op in ops {
                match op {
                    Op::Push(v) => { model.push(v); vec.push(v); }
                    Op::Set(i, v) => {
                        let expected = i < model.len();
                        if expected { model[i] = v; }
                        prop_assert_eq!(vec.set(i, v), expected);
                    }
                    Op::Truncate(n) => { model.truncate(n); vec.truncate(n); }
                    Op::Snapshot => snapshots.push((model.clone(), vec.clone())),
                }
                prop_assert_eq!(vec.len(), model.len());
            }
            prop_assert!(vec.iter().eq(model.iter()));
            prop_assert!(vec.range(7, 2100).eq(model.iter().skip(7).take(2093)));
            for (model, vec) in snapshots {
                prop_assert!(vec.iter().eq(model.iter()));
            }
        }
    }

    proptest! {
        // Failing cases are printed, not written next to the sources.
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// `slices` covers exactly `range`, in order, never crossing a chunk, and two vectors
        /// of one length are split at the same indices.
        #[test]
        fn slices_tile_the_range_at_chunk_boundaries(
            len in 0usize..5000,
            a in 0usize..5200,
            b in 0usize..5200,
        ) {
            let model: Vec<u32> = (0..len as u32).collect();
            let vec = ChunkedVec::from(model.clone());
            let other: ChunkedVec<u64> = (0..len as u64).collect();
            let (start, end) = (a.min(b), a.max(b));
            let slices: Vec<&[u32]> = vec.slices(start, end).collect();
            let flat: Vec<u32> = slices.concat();
            prop_assert!(flat.iter().eq(vec.range(start, end)));
            prop_assert!(slices.iter().all(|s| !s.is_empty() && s.len() <= CHUNK_LEN));
            let mut at = start.min(len);
            for s in &slices {
                // A slice starts at a chunk boundary unless it is the first.
                prop_assert!(at == start || at % CHUNK_LEN == 0);
                at += s.len();
            }
            let lens: Vec<usize> = other.slices(start, end).map(<[u64]>::len).collect();
            prop_assert_eq!(lens, slices.iter().map(|s| s.len()).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_write_copies_only_the_chunk_it_touches() {
        let base: ChunkedVec<u64> = (0..CHUNK_LEN as u64 * 4).collect();
        let mut next = base.clone();
        next.set(CHUNK_LEN + 3, 7);
        let shared = base
            .chunk_ptrs()
            .zip(next.chunk_ptrs())
            .filter(|(a, b)| a.0 == b.0)
            .count();
        assert_eq!(shared, 3);
        assert_eq!(base.get(CHUNK_LEN + 3), Some(&(CHUNK_LEN as u64 + 3)));
        assert_eq!(next.get(CHUNK_LEN + 3), Some(&7));
    }
}

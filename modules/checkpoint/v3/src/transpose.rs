//! Byte-matrix transposition: `count` rows of `width` bytes turned into `width` rows of `count`
//! bytes (byte `c` of every row, for each `c` in turn) — the column transform of
//! [`mod@crate::format`] and its inverse.
//!
//! The matrix is cut into 16×16 blocks transposed with 128-bit vectors (wasm SIMD in the
//! module: 16 loads, 64 byte interleaves that compile to single `punpck` instructions, 16
//! stores — about half an operation per byte), then the strips left over into 8×8 blocks
//! transposed as eight `u64` words, then what is still left byte by byte. Under fuel metering
//! a byte-by-byte walk costs ~17 fuel a byte, the 8×8 words ~3, the vectors well under 1.
//!
//! Native builds (the crate's own tests) run the same 16×16 algorithm on `[u8; 16]` arrays:
//! only the four vector operations (load, store, interleave low and high halves) differ.

/// Rows of `width` bytes turned into columns. A trailing partial row is ignored.
pub fn transpose(rows: &[u8], width: usize) -> Vec<u8> {
    let count = rows.len().checked_div(width).unwrap_or(0);
    let whole = rows.get(..count.saturating_mul(width)).unwrap_or(&[]);
    let mut out = vec![0u8; whole.len()];
    if count == 0 {
        return out;
    }
    let shape = Shape { width, count };
    let rows16 = shape
        .count
        .saturating_sub(count.checked_rem(16).unwrap_or(0));
    let rows8 = shape
        .count
        .saturating_sub(count.checked_rem(8).unwrap_or(0));
    let columns16 = width.saturating_sub(width.checked_rem(16).unwrap_or(0));
    let columns8 = width.saturating_sub(width.checked_rem(8).unwrap_or(0));
    // Five disjoint regions cover the matrix: 16×16 blocks, two strips of 8×8 blocks beside
    // and below them, and the bytes right of and below those.
    blocks16(whole, &mut out, shape, rows16, columns16);
    blocks8(whole, &mut out, shape, (0, rows16), (columns16, columns8));
    blocks8(whole, &mut out, shape, (rows16, rows8), (0, columns8));
    bytes(whole, &mut out, shape, (0, count), (columns8, width));
    bytes(whole, &mut out, shape, (rows8, count), (0, columns8));
    out
}

/// The matrix being transposed: `count` rows of `width` bytes.
#[derive(Clone, Copy)]
struct Shape {
    width: usize,
    count: usize,
}

impl Shape {
    /// Where byte `column` of row `row` is in the input (wrapping: every caller stays inside
    /// the matrix, whose size is a `usize`).
    fn input(self, row: usize, column: usize) -> usize {
        row.wrapping_mul(self.width).wrapping_add(column)
    }

    /// Where that byte goes in the output.
    fn output(self, row: usize, column: usize) -> usize {
        column.wrapping_mul(self.count).wrapping_add(row)
    }
}

/// Rows `0..rows` × columns `0..columns` (both multiples of 16) in 16×16 blocks.
#[cfg_attr(target_arch = "wasm32", target_feature(enable = "simd128"))]
fn blocks16(whole: &[u8], out: &mut [u8], shape: Shape, rows: usize, columns: usize) {
    for row in (0..rows).step_by(16) {
        for column in (0..columns).step_by(16) {
            // The block's last byte, in the input and in the output, is inside the matrix:
            // checked once here, so the loads and stores below need no check of their own.
            let last_in = shape.input(row.wrapping_add(15), column.wrapping_add(15));
            let last_out = shape.output(row.wrapping_add(15), column.wrapping_add(15));
            if last_in >= whole.len() || last_out >= out.len() {
                return;
            }
            let mut v = [lanes::ZERO; 16];
            for (k, v) in v.iter_mut().enumerate() {
                // SAFETY: row + k ≤ row + 15 and column + 15 are inside the matrix (checked
                // above), so the 16 bytes from `input(row + k, column)` are inside `whole`.
                *v = unsafe {
                    lanes::load(
                        whole
                            .as_ptr()
                            .wrapping_add(shape.input(row.wrapping_add(k), column)),
                    )
                };
            }
            // Four rounds: each rotates the 8-bit position (4 row bits, 4 column bits) left
            // by one, so after four the row and column halves have swapped.
            v = interleave_round(interleave_round(interleave_round(interleave_round(v))));
            for (k, v) in v.iter().enumerate() {
                // SAFETY: as for the loads: column + k ≤ column + 15 and row + 15 are inside
                // the matrix, so the 16 bytes from `output(row, column + k)` are inside `out`.
                unsafe {
                    lanes::store(
                        out.as_mut_ptr()
                            .wrapping_add(shape.output(row, column.wrapping_add(k))),
                        *v,
                    );
                }
            }
        }
    }
}

/// Vector `k` interleaved byte by byte with vector `k + 8`, low halves into `2k`, high
/// halves into `2k + 1`.
#[inline]
#[cfg_attr(target_arch = "wasm32", target_feature(enable = "simd128"))]
fn interleave_round(v: [lanes::Lane; 16]) -> [lanes::Lane; 16] {
    let [
        a0,
        a1,
        a2,
        a3,
        a4,
        a5,
        a6,
        a7,
        a8,
        a9,
        a10,
        a11,
        a12,
        a13,
        a14,
        a15,
    ] = v;
    [
        lanes::low(a0, a8),
        lanes::high(a0, a8),
        lanes::low(a1, a9),
        lanes::high(a1, a9),
        lanes::low(a2, a10),
        lanes::high(a2, a10),
        lanes::low(a3, a11),
        lanes::high(a3, a11),
        lanes::low(a4, a12),
        lanes::high(a4, a12),
        lanes::low(a5, a13),
        lanes::high(a5, a13),
        lanes::low(a6, a14),
        lanes::high(a6, a14),
        lanes::low(a7, a15),
        lanes::high(a7, a15),
    ]
}

/// Rows `rows.0..rows.1` × columns `columns.0..columns.1` (all multiples of 8) in 8×8 blocks
/// of `u64` words.
fn blocks8(
    whole: &[u8],
    out: &mut [u8],
    shape: Shape,
    rows: (usize, usize),
    columns: (usize, usize),
) {
    for row in (rows.0..rows.1).step_by(8) {
        for column in (columns.0..columns.1).step_by(8) {
            let mut words = [0u64; 8];
            for (k, word) in words.iter_mut().enumerate() {
                *word = read_u64(whole, shape.input(row.wrapping_add(k), column));
            }
            transpose_8x8(&mut words);
            for (k, word) in words.iter().enumerate() {
                let at = shape.output(row, column.wrapping_add(k));
                if let Some(dst) = out.get_mut(at..at.wrapping_add(8)) {
                    dst.copy_from_slice(&word.to_le_bytes());
                }
            }
        }
    }
}

/// Rows `rows.0..rows.1` × columns `columns.0..columns.1`, byte by byte.
fn bytes(
    whole: &[u8],
    out: &mut [u8],
    shape: Shape,
    rows: (usize, usize),
    columns: (usize, usize),
) {
    for column in columns.0..columns.1 {
        for row in rows.0..rows.1 {
            if let (Some(s), Some(d)) = (
                whole.get(shape.input(row, column)),
                out.get_mut(shape.output(row, column)),
            ) {
                *d = *s;
            }
        }
    }
}

/// The little-endian `u64` at `at` of `bytes` (0 past the end, never reached by [`transpose`]).
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at.wrapping_add(8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes)
}

/// Transposes the 8×8 byte matrix whose row `k` is `words[k]` (byte `j` = column `j`, little
/// endian): afterwards `words[j]` holds column `j`. Three rounds exchange 4×4, 2×2 and 1×1
/// blocks between pairs of words.
pub fn transpose_8x8(words: &mut [u64; 8]) {
    /// Exchanges the bytes of `a` selected by `mask << shift` with those of `b` under `mask`.
    fn exchange(a: &mut u64, b: &mut u64, shift: u32, mask: u64) {
        let t = (a.wrapping_shr(shift) ^ *b) & mask;
        *a ^= t.wrapping_shl(shift);
        *b ^= t;
    }
    let [w0, w1, w2, w3, w4, w5, w6, w7] = words;
    const HALVES: u64 = 0x0000_0000_FFFF_FFFF;
    exchange(w0, w4, 32, HALVES);
    exchange(w1, w5, 32, HALVES);
    exchange(w2, w6, 32, HALVES);
    exchange(w3, w7, 32, HALVES);
    const PAIRS: u64 = 0x0000_FFFF_0000_FFFF;
    exchange(w0, w2, 16, PAIRS);
    exchange(w1, w3, 16, PAIRS);
    exchange(w4, w6, 16, PAIRS);
    exchange(w5, w7, 16, PAIRS);
    const BYTES: u64 = 0x00FF_00FF_00FF_00FF;
    exchange(w0, w1, 8, BYTES);
    exchange(w2, w3, 8, BYTES);
    exchange(w4, w5, 8, BYTES);
    exchange(w6, w7, 8, BYTES);
}

/// The four vector operations of [`blocks16`], as wasm SIMD.
#[cfg(target_arch = "wasm32")]
mod lanes {
    use core::arch::wasm32::{u8x16_shuffle, v128, v128_load, v128_store};

    /// Sixteen bytes.
    pub type Lane = v128;
    /// All zero.
    pub const ZERO: Lane = core::arch::wasm32::u64x2(0, 0);

    /// The sixteen bytes at `at`.
    ///
    /// # Safety
    /// `at..at + 16` must be readable.
    #[inline]
    #[target_feature(enable = "simd128")]
    pub unsafe fn load(at: *const u8) -> Lane {
        // SAFETY: the caller vouches for the 16 bytes; `v128_load` reads them unaligned.
        unsafe { v128_load(at.cast()) }
    }

    /// Writes `lane` to `at..at + 16`.
    ///
    /// # Safety
    /// `at..at + 16` must be writable.
    #[inline]
    #[target_feature(enable = "simd128")]
    pub unsafe fn store(at: *mut u8, lane: Lane) {
        // SAFETY: the caller vouches for the 16 bytes; `v128_store` writes them unaligned.
        unsafe { v128_store(at.cast(), lane) }
    }

    /// Bytes 0..8 of `a` and `b` interleaved: a0 b0 a1 b1 … a7 b7.
    #[inline]
    #[target_feature(enable = "simd128")]
    pub fn low(a: Lane, b: Lane) -> Lane {
        u8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(a, b)
    }

    /// Bytes 8..16 of `a` and `b` interleaved: a8 b8 a9 b9 … a15 b15.
    #[inline]
    #[target_feature(enable = "simd128")]
    pub fn high(a: Lane, b: Lane) -> Lane {
        u8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(a, b)
    }
}

/// The four vector operations of [`blocks16`] on byte arrays, for native builds (tests).
#[cfg(not(target_arch = "wasm32"))]
mod lanes {
    /// Sixteen bytes.
    pub type Lane = [u8; 16];
    /// All zero.
    pub const ZERO: Lane = [0; 16];

    /// The sixteen bytes at `at`.
    ///
    /// # Safety
    /// `at..at + 16` must be readable.
    pub unsafe fn load(at: *const u8) -> Lane {
        // SAFETY: the caller vouches for the 16 bytes; `[u8; 16]` has alignment 1.
        unsafe { at.cast::<Lane>().read() }
    }

    /// Writes `lane` to `at..at + 16`.
    ///
    /// # Safety
    /// `at..at + 16` must be writable.
    pub unsafe fn store(at: *mut u8, lane: Lane) {
        // SAFETY: the caller vouches for the 16 bytes; `[u8; 16]` has alignment 1.
        unsafe { at.cast::<Lane>().write(lane) }
    }

    /// Bytes 0..8 of `a` and `b` interleaved: a0 b0 a1 b1 … a7 b7.
    pub fn low(a: Lane, b: Lane) -> Lane {
        interleave(a, b, 0)
    }

    /// Bytes 8..16 of `a` and `b` interleaved: a8 b8 a9 b9 … a15 b15.
    pub fn high(a: Lane, b: Lane) -> Lane {
        interleave(a, b, 8)
    }

    fn interleave(a: Lane, b: Lane, from: usize) -> Lane {
        let mut out = ZERO;
        for (k, pair) in out.chunks_exact_mut(2).enumerate() {
            let at = from.wrapping_add(k);
            if let (Some(x), Some(y), [p, q]) = (a.get(at), b.get(at), pair) {
                *p = *x;
                *q = *y;
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    /// Byte `c` of every row, for each `c` in turn, one byte at a time.
    fn naive(rows: &[u8], width: usize) -> Vec<u8> {
        let count = rows.len() / width;
        (0..width)
            .flat_map(|c| (0..count).map(move |r| rows[r * width + c]))
            .collect()
    }

    /// The shapes chunks have (256 leaves of 129 bytes and back, a partial last chunk of 232
    /// or 196 leaves, a 1,024-leaf chunk) and small ones around the block sizes: every region
    /// — 16×16 blocks, the 8×8 strips beside and below them, the single bytes — is right.
    #[test]
    fn chunk_shapes_are_the_naive_transposition() {
        let shapes = [
            (256, 129),
            (129, 256),
            (232, 129),
            (129, 232),
            (196, 129),
            (1024, 129),
            (16, 16),
            (24, 40),
            (40, 24),
            (15, 17),
            (8, 8),
            (1, 1),
        ];
        for (count, width) in shapes {
            let rows: Vec<u8> = (0..count * width)
                .map(|i| (i as u8).wrapping_mul(151).wrapping_add((i / 251) as u8))
                .collect();
            let columns = transpose(&rows, width);
            assert_eq!(columns, naive(&rows, width), "{count} rows of {width}");
            assert_eq!(
                transpose(&columns, count),
                rows,
                "{count} rows of {width} back"
            );
        }
    }

    /// One 16×16 block through the four interleaving rounds is its transposition.
    #[test]
    fn four_interleaving_rounds_transpose_a_block() {
        let block: Vec<u8> = (0..=255u8).collect();
        let mut v = [lanes::ZERO; 16];
        for (k, v) in v.iter_mut().enumerate() {
            v.copy_from_slice(&block[k * 16..k * 16 + 16]);
        }
        let v = interleave_round(interleave_round(interleave_round(interleave_round(v))));
        let out: Vec<u8> = v.iter().flatten().copied().collect();
        assert_eq!(out, naive(&block, 16));
        // Three rounds are not enough: the test can tell.
        let mut w = [lanes::ZERO; 16];
        for (k, w) in w.iter_mut().enumerate() {
            w.copy_from_slice(&block[k * 16..k * 16 + 16]);
        }
        let w = interleave_round(interleave_round(interleave_round(w)));
        assert_ne!(w.iter().flatten().copied().collect::<Vec<u8>>(), out);
    }
}

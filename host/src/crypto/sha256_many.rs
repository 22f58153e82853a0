//! SHA-256 of many messages at once: the state's leaves (129 bytes each), the Merkle tree's
//! nodes (two 32-byte children each) and a checkpoint's chunks, which a restore hashes by the
//! million.
//!
//! Every function gives exactly `sha256(message)` for each message, as `sha2::Sha256::digest`
//! would. On x86-64 with AVX-512 (F and BW) they run sixteen messages in the sixteen 32-bit
//! lanes of 512-bit registers (the multi-buffer technique of Intel's `isa-l_crypto` and of the
//! `hashtree` library Ethereum clients use for SSZ): SHA-256 is a chain of 32-bit additions,
//! rotations and bitwise functions, the same operations in every lane, so sixteen independent
//! compressions cost a few times what one costs with the SHA extensions. Each lane's block is
//! loaded whole and the sixteen are transposed into words; words that are the same in every
//! lane (padding) are broadcast, and a padding block that is the same in every lane has its
//! message schedule computed once. On the benchmark machine (Xeon with SHA-NI and AVX-512) a
//! first version measured 65 ns per 129-byte leaf against sha2's 115 ns, and a block of a
//! Merkle pair or of a chunk costs about 40 % of sha2's. Without AVX-512 but with the SHA
//! extensions (`shani`), and for what is left over after the groups of sixteen, four messages
//! are compressed together with the SHA instructions, filling the latency one message leaves
//! idle. Elsewhere, and for the last few messages, it is `sha2`.

use sha2::{Digest, Sha256};

/// `sha256` of each `size`-byte piece of `data`, in order, appended to `out`. A trailing
/// partial piece is ignored, and a `size` of 0 yields nothing.
pub fn hash_each(data: &[u8], size: usize, out: &mut Vec<[u8; 32]>) {
    if size == 0 {
        return;
    }
    out.reserve(data.len().checked_div(size).unwrap_or(0));
    let mut done = lanes::hash_groups(data, size, out);
    done = done.saturating_add(shani::hash_groups(
        data.get(done..).unwrap_or(&[]),
        size,
        out,
    ));
    for piece in data.get(done..).unwrap_or(&[]).chunks_exact(size) {
        out.push(Sha256::digest(piece).into());
    }
}

/// [`hash_each`] of `pairs` read as 64-byte pieces: the parent of each pair of Merkle nodes
/// (`sha256(left || right)`), appended to `out`. An odd last node is ignored.
pub fn hash_pairs(pairs: &[[u8; 32]], out: &mut Vec<[u8; 32]>) {
    hash_each(pairs.as_flattened(), 64, out);
}

/// `sha256` of each message, in order, appended to `out`: whole groups of sixteen run in the
/// lanes over the blocks all sixteen have (the shortest message's whole blocks), each message's
/// rest and padding is finished on its own with `sha2`'s compression; fewer than sixteen left
/// over are hashed one by one. Pays off when the messages are of similar length (a
/// checkpoint's chunks).
pub fn hash_messages(messages: &[&[u8]], out: &mut Vec<[u8; 32]>) {
    out.reserve(messages.len());
    let mut done = lanes::hash_message_groups(messages, out);
    done = done.saturating_add(shani::hash_message_groups(
        messages.get(done..).unwrap_or(&[]),
        out,
    ));
    for message in messages.get(done..).unwrap_or(&[]) {
        out.push(Sha256::digest(message).into());
    }
}

/// Finishes the SHA-256 of a message whose first `done` bytes (a whole number of blocks) left
/// the compression state `state`: the rest of its blocks, then the padding.
fn finish_message(mut state: [u32; 8], message: &[u8], done: usize) -> [u8; 32] {
    use sha2::digest::generic_array::GenericArray;
    let rest = message.get(done..).unwrap_or(&[]);
    let blocks = rest.chunks_exact(64);
    let (last, last_blocks) = padded_tail(blocks.remainder(), message.len());
    for block in blocks.chain(last.chunks_exact(64).take(last_blocks)) {
        sha2::compress256(&mut state, &[*GenericArray::from_slice(block)]);
    }
    hash_of(state)
}

/// Hashes the whole groups of `N` messages at the start of `messages` into `out`: `common`
/// gives each message's compression state after the blocks every message of its group has
/// (the shortest one's whole blocks), each message's rest and padding is finished on its own.
/// Returns how many messages it hashed.
fn hash_in_groups<const N: usize>(
    messages: &[&[u8]],
    out: &mut Vec<[u8; 32]>,
    common: impl Fn(&[&[u8]], usize) -> [[u32; 8]; N],
) -> usize {
    let mut done = 0usize;
    for group in messages.chunks_exact(N) {
        let blocks = group.iter().map(|m| m.len() / 64).min().unwrap_or(0);
        let states = common(group, blocks);
        for (message, state) in group.iter().zip(states) {
            out.push(finish_message(state, message, blocks.saturating_mul(64)));
        }
        done = done.saturating_add(N);
    }
    done
}

/// The last block or two of a `len`-byte message whose last `len % 64` bytes are `tail`: the
/// tail, the 0x80 byte, zeros and the bit length — one block when they fit in 64 bytes, two
/// when they do not. Returns them and how many blocks they are.
fn padded_tail(tail: &[u8], len: usize) -> ([u8; 128], usize) {
    let mut last = [0u8; 128];
    let (blocks, len_at) = if tail.len() < 56 {
        (1, 56..64)
    } else {
        (2, 120..128)
    };
    if let Some(dst) = last.get_mut(..tail.len()) {
        dst.copy_from_slice(tail);
    }
    if let Some(mark) = last.get_mut(tail.len()) {
        *mark = 0x80;
    }
    if let Some(dst) = last.get_mut(len_at) {
        dst.copy_from_slice(&(len as u64).wrapping_mul(8).to_be_bytes());
    }
    (last, blocks)
}

/// A final compression state as the hash: its words big-endian.
fn hash_of(state: [u32; 8]) -> [u8; 32] {
    let mut hash = [0u8; 32];
    for (bytes, word) in hash.chunks_exact_mut(4).zip(state) {
        bytes.copy_from_slice(&word.to_be_bytes());
    }
    hash
}

/// Whether [`hash_each`] runs sixteen messages at a time on this machine.
pub fn runs_sixteen_lanes() -> bool {
    lanes::available()
}

#[cfg(target_arch = "x86_64")]
mod lanes {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_i32gather_epi32, _mm512_loadu_si512, _mm512_ror_epi32,
        _mm512_set1_epi32, _mm512_set4_epi32, _mm512_setr_epi32, _mm512_setzero_si512,
        _mm512_shuffle_epi8, _mm512_shuffle_i32x4, _mm512_srli_epi32, _mm512_storeu_si512,
        _mm512_ternarylogic_epi32, _mm512_unpackhi_epi32, _mm512_unpackhi_epi64,
        _mm512_unpacklo_epi32, _mm512_unpacklo_epi64,
    };

    /// SHA-256's round constants, sixteen rounds to a row.
    pub(super) const K: [[u32; 16]; 4] = [
        [
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
            0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
            0x9bdc06a7, 0xc19bf174,
        ],
        [
            0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc,
            0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
            0x06ca6351, 0x14292967,
        ],
        [
            0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e,
            0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624,
            0xf40e3585, 0x106aa070,
        ],
        [
            0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
            0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb,
            0xbef9a3f7, 0xc67178f2,
        ],
    ];

    /// SHA-256's initial hash value.
    pub(super) const IV: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];

    /// Messages per group: the 32-bit lanes of a 512-bit register.
    const LANES: usize = 16;

    /// The CPU has the AVX-512 subsets the lanes use (std caches the answer).
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }

    /// Hashes the whole groups of sixteen `size`-byte pieces at the start of `data` into `out`
    /// when the CPU can; returns how many bytes of `data` it hashed (0 when it cannot).
    pub(super) fn hash_groups(data: &[u8], size: usize, out: &mut Vec<[u8; 32]>) -> usize {
        let group_bytes = size.saturating_mul(LANES);
        // Not even one group (a Merkle level's last few pairs): no padding schedule to make.
        if !available() || size == 0 || data.len() < group_bytes {
            return 0;
        }
        // The padding block of whole-block messages, the same for every group: scheduled once.
        let padding = size.is_multiple_of(64).then(|| padding_schedule(size));
        let mut done = 0usize;
        for group in data.chunks_exact(group_bytes) {
            let mut hashes = [[0u8; 32]; LANES];
            // SAFETY: `available()` checked that the CPU has AVX-512 F and BW.
            unsafe { hash_group(group, size, padding.as_ref(), &mut hashes) };
            out.extend_from_slice(&hashes);
            done = done.saturating_add(group_bytes);
        }
        done
    }

    /// Hashes the whole groups of sixteen messages at the start of `messages` into `out` when
    /// the CPU can; returns how many messages it hashed (0 when it cannot).
    pub(super) fn hash_message_groups(messages: &[&[u8]], out: &mut Vec<[u8; 32]>) -> usize {
        if !available() {
            return 0;
        }
        super::hash_in_groups::<LANES>(messages, out, |group, blocks| {
            // SAFETY: `available()` checked that the CPU has AVX-512 F and BW.
            unsafe { compress_common(group, blocks) }
        })
    }

    /// The compression state of each of `group`'s messages after its first `blocks` blocks
    /// (every message has at least that many).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn compress_common(group: &[&[u8]], blocks: usize) -> [[u32; 8]; LANES] {
        let mut state = initial_state();
        compress_blocks(&mut state, group, blocks);
        lane_states(state)
    }

    /// The initial hash value in every lane.
    #[target_feature(enable = "avx512f")]
    fn initial_state() -> [__m512i; 8] {
        let mut state = [_mm512_setzero_si512(); 8];
        for (lanes, word) in state.iter_mut().zip(IV) {
            *lanes = _mm512_set1_epi32(word as i32);
        }
        state
    }

    /// Compresses the first `blocks` blocks of each of `messages` (lane `l` the `l`-th; every
    /// message has at least that many) into `state`.
    #[target_feature(enable = "avx512f,avx512bw")]
    fn compress_blocks(state: &mut [__m512i; 8], messages: &[&[u8]], blocks: usize) {
        for block in 0..blocks {
            let at = block.wrapping_mul(64);
            let mut loaded = [None; LANES];
            for (lane, message) in loaded.iter_mut().zip(messages) {
                *lane = message
                    .get(at..at.wrapping_add(64))
                    .and_then(|b| b.try_into().ok());
            }
            compress(state, load_blocks(loaded));
        }
    }

    /// Each lane's compression state.
    #[target_feature(enable = "avx512f")]
    fn lane_states(state: [__m512i; 8]) -> [[u32; 8]; LANES] {
        let mut rows = [[0u32; LANES]; 8];
        for (row, word) in rows.iter_mut().zip(state) {
            // SAFETY: `row` is 16 writable `u32`s, the 64 bytes one store writes.
            unsafe { _mm512_storeu_si512(row.as_mut_ptr().cast(), word) };
        }
        let mut states = [[0u32; 8]; LANES];
        for (lane, state) in states.iter_mut().enumerate() {
            for (word, row) in state.iter_mut().zip(&rows) {
                *word = row.get(lane).copied().unwrap_or(0);
            }
        }
        states
    }

    /// Sixteen `size`-byte messages laid end to end in `group`, hashed into `out`;
    /// `padding` is [`padding_schedule`]`(size)` when `size` is a whole number of blocks.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn hash_group(
        group: &[u8],
        size: usize,
        padding: Option<&[[u32; 16]; 4]>,
        out: &mut [[u8; 32]; LANES],
    ) {
        let mut pieces = [&[][..]; LANES];
        for (piece, bytes) in pieces.iter_mut().zip(group.chunks_exact(size)) {
            *piece = bytes;
        }
        let mut state = initial_state();
        let whole = size / 64;
        compress_blocks(&mut state, &pieces, whole);
        if let Some(padding) = padding {
            // Whole blocks (Merkle pairs): the padding block is the same in every lane.
            compress_scheduled(&mut state, padding);
            store_hashes(state, out);
            return;
        }
        // The rest of each message and its padding, one block or two, the same count in
        // every lane (the messages are of one length).
        let mut padded = [[0u8; 128]; LANES];
        let mut tail_blocks = 0;
        for (block, piece) in padded.iter_mut().zip(pieces) {
            let tail = piece.get(whole.wrapping_mul(64)..).unwrap_or(&[]);
            (*block, tail_blocks) = super::padded_tail(tail, size);
        }
        let tail = size % 64;
        let padded_starts = lane_offsets(128);
        let [first_lane, ..] = &padded;
        for (block, first_lane) in first_lane.chunks_exact(64).take(tail_blocks).enumerate() {
            let at = block.wrapping_mul(64);
            // Only the words holding message bytes differ between lanes (a 129-byte leaf's
            // last block: its first word); the 0x80 byte, the zeros and the length are the same
            // in every lane, broadcast from the first lane's block instead of gathered.
            let varying = tail.saturating_sub(at).div_ceil(4).min(16);
            // SAFETY: lane `l` reads bytes `128 * l + at .. + 64` of `padded`, which is
            // `16 * 128` bytes (`at` is 0 or 64).
            let mut words =
                unsafe { gather_block(padded.as_flattened().as_ptr(), padded_starts, at, varying) };
            for (word, bytes) in words
                .iter_mut()
                .zip(first_lane.chunks_exact(4))
                .skip(varying)
            {
                let value = bytes.try_into().map_or(0, u32::from_be_bytes);
                *word = _mm512_set1_epi32(value as i32);
            }
            compress(&mut state, words);
        }
        store_hashes(state, out);
    }

    /// The lanes' final states as sixteen big-endian hashes.
    #[target_feature(enable = "avx512f")]
    fn store_hashes(state: [__m512i; 8], out: &mut [[u8; 32]; LANES]) {
        for (hash, lane) in out.iter_mut().zip(lane_states(state)) {
            *hash = super::hash_of(lane);
        }
    }

    /// `K[t] + W[t]` for the 64 rounds of the padding block of a `size`-byte message with
    /// `size % 64 == 0`: `0x80`, zeros, the bit length — the same block in every lane, so its
    /// message schedule is computed once, on scalars.
    pub(super) fn padding_schedule(size: usize) -> [[u32; 16]; 4] {
        let bits = (size as u64).wrapping_mul(8);
        let mut w = [0u32; 64];
        w[0] = 0x8000_0000;
        w[14] = (bits >> 32) as u32;
        w[15] = bits as u32;
        for t in 16..64usize {
            let at = |back: usize| w.get(t.wrapping_sub(back)).copied().unwrap_or(0);
            let (w2, w15) = (at(2), at(15));
            let s0 = w15.rotate_right(7) ^ w15.rotate_right(18) ^ (w15 >> 3);
            let s1 = w2.rotate_right(17) ^ w2.rotate_right(19) ^ (w2 >> 10);
            let next = at(16).wrapping_add(s0).wrapping_add(at(7)).wrapping_add(s1);
            if let Some(word) = w.get_mut(t) {
                *word = next;
            }
        }
        let mut kw = K;
        for (k, w) in kw.as_flattened_mut().iter_mut().zip(w) {
            *k = k.wrapping_add(w);
        }
        kw
    }

    /// `[0, size, 2 * size, …, 15 * size]` as 32-bit lanes (`size <= MAX_SIZE`).
    #[target_feature(enable = "avx512f")]
    fn lane_offsets(size: usize) -> __m512i {
        let s = size as i32;
        let mut offsets = [0i32; LANES];
        let mut at = 0i32;
        for offset in &mut offsets {
            *offset = at;
            at = at.wrapping_add(s);
        }
        let [
            o0,
            o1,
            o2,
            o3,
            o4,
            o5,
            o6,
            o7,
            o8,
            o9,
            o10,
            o11,
            o12,
            o13,
            o14,
            o15,
        ] = offsets;
        _mm512_setr_epi32(
            o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11, o12, o13, o14, o15,
        )
    }

    /// The sixteen big-endian message words of sixteen 64-byte blocks, one block per lane
    /// (a missing block, which callers never pass, reads as zeros): sixteen loads and a 16 × 16
    /// transposition of 32-bit words in four rounds of shuffles, the way multi-buffer
    /// libraries fill their lanes — cheaper than sixteen gathers.
    #[target_feature(enable = "avx512f,avx512bw")]
    fn load_blocks(blocks: [Option<&[u8; 64]>; LANES]) -> [__m512i; 16] {
        let swap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
        let mut rows = [_mm512_setzero_si512(); LANES];
        for (row, block) in rows.iter_mut().zip(blocks) {
            if let Some(block) = block {
                // SAFETY: `block` is 64 readable bytes, the size of one unaligned load.
                *row = unsafe { _mm512_loadu_si512(block.as_ptr().cast()) };
            }
        }
        let [
            r0,
            r1,
            r2,
            r3,
            r4,
            r5,
            r6,
            r7,
            r8,
            r9,
            r10,
            r11,
            r12,
            r13,
            r14,
            r15,
        ] = rows;
        // Within each 128-bit quarter q: pairs of rows interleaved by word, then by pairs of
        // words, so that `u[4k + m]` holds, in quarter q, word `4q + m` of rows 4k..4k+4.
        // (Macros, not closures: a closure is not compiled with the function's target
        // features, so the shuffles in it were calls.)
        macro_rules! pairs {
            ($a:expr, $b:expr) => {
                (_mm512_unpacklo_epi32($a, $b), _mm512_unpackhi_epi32($a, $b))
            };
        }
        let (t0, t1) = pairs!(r0, r1);
        let (t2, t3) = pairs!(r2, r3);
        let (t4, t5) = pairs!(r4, r5);
        let (t6, t7) = pairs!(r6, r7);
        let (t8, t9) = pairs!(r8, r9);
        let (t10, t11) = pairs!(r10, r11);
        let (t12, t13) = pairs!(r12, r13);
        let (t14, t15) = pairs!(r14, r15);
        macro_rules! quads {
            ($a:expr, $b:expr, $c:expr, $d:expr) => {
                (
                    _mm512_unpacklo_epi64($a, $c),
                    _mm512_unpackhi_epi64($a, $c),
                    _mm512_unpacklo_epi64($b, $d),
                    _mm512_unpackhi_epi64($b, $d),
                )
            };
        }
        let (u0, u1, u2, u3) = quads!(t0, t1, t2, t3);
        let (u4, u5, u6, u7) = quads!(t4, t5, t6, t7);
        let (u8, u9, u10, u11) = quads!(t8, t9, t10, t11);
        let (u12, u13, u14, u15) = quads!(t12, t13, t14, t15);
        // Word `4q + m` of every row: quarter q of u[m], u[4 + m], u[8 + m], u[12 + m].
        macro_rules! column {
            ($a:expr, $b:expr, $c:expr, $d:expr) => {{
                let low_ab = _mm512_shuffle_i32x4::<0x44>($a, $b);
                let high_ab = _mm512_shuffle_i32x4::<0xEE>($a, $b);
                let low_cd = _mm512_shuffle_i32x4::<0x44>($c, $d);
                let high_cd = _mm512_shuffle_i32x4::<0xEE>($c, $d);
                (
                    _mm512_shuffle_i32x4::<0x88>(low_ab, low_cd),
                    _mm512_shuffle_i32x4::<0xDD>(low_ab, low_cd),
                    _mm512_shuffle_i32x4::<0x88>(high_ab, high_cd),
                    _mm512_shuffle_i32x4::<0xDD>(high_ab, high_cd),
                )
            }};
        }
        let (w0, w4, w8, w12) = column!(u0, u4, u8, u12);
        let (w1, w5, w9, w13) = column!(u1, u5, u9, u13);
        let (w2, w6, w10, w14) = column!(u2, u6, u10, u14);
        let (w3, w7, w11, w15) = column!(u3, u7, u11, u15);
        let mut words = [
            w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15,
        ];
        for word in &mut words {
            *word = _mm512_shuffle_epi8(*word, swap);
        }
        words
    }

    /// The first `count` of the sixteen big-endian words of one 64-byte block of each lane's
    /// message, lane `l`'s block starting at `base + starts[l] + at` (the other words are
    /// left as garbage for the caller to fill).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW, and the first `4 * count` bytes from every lane's block
    /// start are readable.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn gather_block(
        base: *const u8,
        starts: __m512i,
        at: usize,
        count: usize,
    ) -> [__m512i; 16] {
        let swap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
        let mut words = [starts; 16];
        let mut offset = at as i32;
        for word in words.iter_mut().take(count) {
            let at = _mm512_add_epi32(starts, _mm512_set1_epi32(offset));
            // SAFETY: every lane reads 4 bytes inside its block (the caller's promise).
            let raw = unsafe { _mm512_i32gather_epi32::<1>(at, base.cast()) };
            *word = _mm512_shuffle_epi8(raw, swap);
            offset = offset.wrapping_add(4);
        }
        words
    }

    /// Σ or σ: three rotations or shifts combined by exclusive or.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn xor3(a: __m512i, b: __m512i, c: __m512i) -> __m512i {
        _mm512_ternarylogic_epi32::<0x96>(a, b, c)
    }

    /// One round on the working variables with `kw = K[t] + W[t]` (every lane).
    macro_rules! step {
        ($a:ident, $b:ident, $c:ident, $d:ident, $e:ident, $f:ident, $g:ident, $h:ident, $kw:expr) => {{
            let big_s1 = xor3(
                _mm512_ror_epi32::<6>($e),
                _mm512_ror_epi32::<11>($e),
                _mm512_ror_epi32::<25>($e),
            );
            let ch = _mm512_ternarylogic_epi32::<0xCA>($e, $f, $g);
            let t1 = _mm512_add_epi32(_mm512_add_epi32($h, big_s1), _mm512_add_epi32(ch, $kw));
            let big_s0 = xor3(
                _mm512_ror_epi32::<2>($a),
                _mm512_ror_epi32::<13>($a),
                _mm512_ror_epi32::<22>($a),
            );
            let maj = _mm512_ternarylogic_epi32::<0xE8>($a, $b, $c);
            $h = $g;
            $g = $f;
            $f = $e;
            $e = _mm512_add_epi32($d, t1);
            $d = $c;
            $c = $b;
            $b = $a;
            $a = _mm512_add_epi32(t1, _mm512_add_epi32(big_s0, maj));
        }};
    }

    /// Sixteen rounds, `$round!(j)` giving round `j`'s `K + W` for the constants `j`.
    macro_rules! sixteen {
        ($round:ident) => {
            $round!(0);
            $round!(1);
            $round!(2);
            $round!(3);
            $round!(4);
            $round!(5);
            $round!(6);
            $round!(7);
            $round!(8);
            $round!(9);
            $round!(10);
            $round!(11);
            $round!(12);
            $round!(13);
            $round!(14);
            $round!(15);
        };
    }

    /// One SHA-256 compression of `block` (the sixteen message words) into `state`, in
    /// every lane.
    ///
    /// The rounds run sixteen at a time with the message schedule in a ring of sixteen words
    /// indexed by constants, so the words stay in registers: a loop over the 64 rounds that
    /// shifted the ring by one each round compiled to a 1 KiB `memmove` per round.
    #[target_feature(enable = "avx512f")]
    fn compress(state: &mut [__m512i; 8], block: [__m512i; 16]) {
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
        let mut w = block;
        for (row, ks) in K.iter().enumerate() {
            let extend = row < 3;
            // Round `16 * row + j`: uses `w[j]` and, before the last sixteen rounds, replaces
            // it with the word of round `16 * row + j + 16`.
            macro_rules! round {
                ($j:literal) => {{
                    let kw = _mm512_add_epi32(w[$j], _mm512_set1_epi32(ks[$j] as i32));
                    if extend {
                        let w1 = w[($j + 1) & 15];
                        let w14 = w[($j + 14) & 15];
                        let s0 = xor3(
                            _mm512_ror_epi32::<7>(w1),
                            _mm512_ror_epi32::<18>(w1),
                            _mm512_srli_epi32::<3>(w1),
                        );
                        let s1 = xor3(
                            _mm512_ror_epi32::<17>(w14),
                            _mm512_ror_epi32::<19>(w14),
                            _mm512_srli_epi32::<10>(w14),
                        );
                        w[$j] = _mm512_add_epi32(
                            _mm512_add_epi32(w[$j], s0),
                            _mm512_add_epi32(w[($j + 9) & 15], s1),
                        );
                    }
                    step!(a, b, c, d, e, f, g, h, kw);
                }};
            }
            sixteen!(round);
        }
        for (word, round) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *word = _mm512_add_epi32(*word, round);
        }
    }

    /// One compression of a block whose `K + W` per round is `kw`, the same in every lane.
    #[target_feature(enable = "avx512f")]
    fn compress_scheduled(state: &mut [__m512i; 8], kw: &[[u32; 16]; 4]) {
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
        for ks in kw {
            macro_rules! round {
                ($j:literal) => {{
                    step!(a, b, c, d, e, f, g, h, _mm512_set1_epi32(ks[$j] as i32));
                }};
            }
            sixteen!(round);
        }
        for (word, round) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *word = _mm512_add_epi32(*word, round);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod lanes {
    pub(super) fn available() -> bool {
        false
    }

    pub(super) fn hash_groups(_: &[u8], _: usize, _: &mut Vec<[u8; 32]>) -> usize {
        0
    }

    pub(super) fn hash_message_groups(_: &[&[u8]], _: &mut Vec<[u8; 32]>) -> usize {
        0
    }
}

#[cfg(target_arch = "x86_64")]
mod shani;

#[cfg(not(target_arch = "x86_64"))]
mod shani {
    pub(super) fn available() -> bool {
        false
    }

    pub(super) fn hash_groups(_: &[u8], _: usize, _: &mut Vec<[u8; 32]>) -> usize {
        0
    }

    pub(super) fn hash_message_groups(_: &[&[u8]], _: &mut Vec<[u8; 32]>) -> usize {
        0
    }
}

#[cfg(test)]
mod tests;

//! Several messages at once with the SHA extensions (SHA-NI), where AVX-512 is missing (AMD
//! before Zen 4, most Intel client parts).
//!
//! One message's compression is a chain of `sha256rnds2` instructions, each waiting for the
//! result of the one before: a single message keeps the SHA unit waiting on latency most of the
//! time. [`WAYS`] independent messages compressed in the same loop fill those waits (the
//! technique of isa-l_crypto's `sha256_ni_x2`). On the AMD EPYC (Zen 3) this was written on,
//! a 129-byte leaf took ~66 ns four at a time against `sha2`'s ~145 ns one at a time (two
//! ways ~90–120, three ~72, six and eight slower again: their states and schedules no longer
//! fit the sixteen registers), a Merkle pair ~55 ns against ~105.
//!
//! The rounds are `sha2`'s own (its `x86` backend, the Intel reference sequence): the state
//! kept as `ABEF`/`CDGH`, four rounds per pair of `sha256rnds2`, the schedule by
//! `sha256msg1`/`sha256msg2`.

use std::arch::x86_64::{
    __m128i, _mm_add_epi32, _mm_alignr_epi8, _mm_blend_epi16, _mm_loadu_si128, _mm_or_si128,
    _mm_set_epi64x, _mm_setzero_si128, _mm_sha256msg1_epu32, _mm_sha256msg2_epu32,
    _mm_sha256rnds2_epu32, _mm_shuffle_epi8, _mm_shuffle_epi32, _mm_storeu_si128,
};

use super::lanes::{IV, K};

/// Messages compressed together.
const WAYS: usize = 4;

/// The CPU has the SHA extensions and the SSE levels their code uses (std caches the answer).
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("sha")
        && std::arch::is_x86_feature_detected!("ssse3")
        && std::arch::is_x86_feature_detected!("sse4.1")
}

/// Hashes the whole groups of [`WAYS`] `size`-byte pieces at the start of `data` into `out`
/// when the CPU can; returns how many bytes of `data` it hashed (0 when it cannot).
pub(super) fn hash_groups(data: &[u8], size: usize, out: &mut Vec<[u8; 32]>) -> usize {
    let group_bytes = size.saturating_mul(WAYS);
    // Not even one group (a Merkle level's last few pairs): nothing to set up the padding for.
    if !available() || size == 0 || data.len() < group_bytes {
        return 0;
    }
    let blocks = size / 64;
    // The padding block of whole-block messages (Merkle pairs), the same for every message:
    // its `K + W` computed once, so only its rounds run.
    let padding = size
        .is_multiple_of(64)
        .then(|| super::lanes::padding_schedule(size));
    // SAFETY: `available()` checked that the CPU has SHA, SSSE3 and SSE4.1.
    let tail = unsafe { Tail::new(size) };
    let mut done = 0usize;
    for group in data.chunks_exact(group_bytes) {
        let mut messages = [&[][..]; WAYS];
        for (message, piece) in messages.iter_mut().zip(group.chunks_exact(size)) {
            *message = piece;
        }
        // SAFETY: `available()` checked that the CPU has SHA, SSSE3 and SSE4.1.
        let mut states = unsafe { initial_states() };
        // SAFETY: as above.
        unsafe { compress_blocks(&mut states, &messages, blocks) };
        match (&padding, &tail) {
            // SAFETY: as above.
            (Some(kw), _) => unsafe { compress_scheduled(&mut states, kw) },
            (None, Some(tail)) => {
                // SAFETY: as above.
                let mut words = [[unsafe { _mm_setzero_si128() }; 4]; WAYS];
                for (words, message) in words.iter_mut().zip(messages) {
                    // SAFETY: as above.
                    *words = unsafe { tail.block(message) };
                }
                // SAFETY: as above.
                unsafe { compress_words(&mut states, words) };
            }
            (None, None) => {
                let tail_at = blocks.saturating_mul(64);
                let tails =
                    messages.map(|m| super::padded_tail(m.get(tail_at..).unwrap_or(&[]), size));
                let tail_refs = tails.each_ref().map(|(last, _)| last.as_slice());
                let tail_blocks = tails.first().map_or(0, |(_, n)| *n);
                // SAFETY: as above.
                unsafe { compress_blocks(&mut states, &tail_refs, tail_blocks) };
            }
        }
        // SAFETY: as above.
        let states = unsafe { word_states(states) };
        out.extend(states.map(super::hash_of));
        done = done.saturating_add(group_bytes);
    }
    done
}

/// Hashes the whole groups of [`WAYS`] messages at the start of `messages` into `out` when
/// the CPU can: together over the blocks all of a group have, each one's rest on its own.
/// Returns how many messages it hashed (0 when it cannot).
pub(super) fn hash_message_groups(messages: &[&[u8]], out: &mut Vec<[u8; 32]>) -> usize {
    if !available() {
        return 0;
    }
    super::hash_in_groups::<WAYS>(messages, out, |group, blocks| {
        let mut ways = [&[][..]; WAYS];
        for (way, message) in ways.iter_mut().zip(group) {
            *way = message;
        }
        // SAFETY: `available()` checked that the CPU has SHA, SSSE3 and SSE4.1.
        unsafe {
            let mut states = initial_states();
            compress_blocks(&mut states, &ways, blocks);
            word_states(states)
        }
    })
}

/// The last block of every `size`-byte message of a group made in registers, where it is one
/// block and the message has at least 16 bytes (the state's 129-byte leaves): the message's
/// last bytes shuffled into place over a padding template. Built in memory (bytes, then the
/// 0x80 mark, then the length) and loaded whole, each load waited on the narrower stores before
/// it: a tenth of the restore's hashing went there.
#[derive(Clone, Copy)]
struct Tail {
    /// Message bytes in the last block (`size % 64`, under 56).
    len: usize,
    /// The block without the message's bytes: `0x80` after them, zeros, the bit length.
    template: [__m128i; 4],
    /// Moves the message's last 16 bytes to where the register the message ends in wants
    /// them, zeroing the bytes past the end (`pshufb` indexes, 0x80 for zero).
    shift: __m128i,
}

impl Tail {
    /// The tail of `size`-byte messages, when it can be made this way.
    ///
    /// # Safety
    /// The CPU has SSSE3.
    #[target_feature(enable = "ssse3")]
    unsafe fn new(size: usize) -> Option<Self> {
        let len = size % 64;
        if size < 16 || len >= 56 {
            return None;
        }
        let (padded, blocks) = super::padded_tail([0; 64].get(..len).unwrap_or(&[]), size);
        if blocks != 1 {
            return None;
        }
        let mut template = [_mm_setzero_si128(); 4];
        for (word, bytes) in template.iter_mut().zip(padded.chunks_exact(16)) {
            // SAFETY: `bytes` is 16 readable bytes, one unaligned load.
            *word = unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) };
        }
        // The register the message ends in holds `ends` of its bytes: in the message's last
        // 16 they are the final `ends`.
        let ends = len % 16;
        let mut shift = [0x80u8; 16];
        for (j, index) in shift.iter_mut().enumerate().take(ends) {
            *index = u8::try_from(j.wrapping_add(16).wrapping_sub(ends)).unwrap_or(0x80);
        }
        // SAFETY: `shift` is 16 readable bytes, one unaligned load.
        let shift = unsafe { _mm_loadu_si128(shift.as_ptr().cast()) };
        Some(Self {
            len,
            template,
            shift,
        })
    }

    /// The big-endian words of `message`'s last block (`message` is `size` bytes).
    ///
    /// # Safety
    /// The CPU has SSSE3.
    #[target_feature(enable = "ssse3")]
    unsafe fn block(&self, message: &[u8]) -> [__m128i; 4] {
        let swap = byte_swap();
        let tail_at = message.len().wrapping_sub(self.len);
        let last16 = message.len().wrapping_sub(16);
        let mut words = self.template;
        for (part, word) in words.iter_mut().enumerate() {
            let from = part.wrapping_mul(16);
            if from >= self.len {
                break;
            }
            let whole = tail_at
                .checked_add(from)
                .and_then(|at| message.get(at..at.wrapping_add(16)))
                .filter(|_| from.wrapping_add(16) <= self.len);
            let bytes = match whole {
                // SAFETY: `bytes` is 16 readable bytes, one unaligned load.
                Some(bytes) => unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) },
                None => match message.get(last16..) {
                    // SAFETY: as above (the message's last 16 bytes).
                    Some(last) => _mm_or_si128(
                        _mm_shuffle_epi8(
                            unsafe { _mm_loadu_si128(last.as_ptr().cast()) },
                            self.shift,
                        ),
                        *word,
                    ),
                    None => *word,
                },
            };
            *word = bytes;
        }
        for word in &mut words {
            *word = _mm_shuffle_epi8(*word, swap);
        }
        words
    }
}

/// One message's compression state as `sha256rnds2` wants it: words `ABEF` and `CDGH`.
#[derive(Clone, Copy)]
struct State {
    abef: __m128i,
    cdgh: __m128i,
}

/// The initial hash value in every way.
///
/// # Safety
/// The CPU has SSSE3 and SSE4.1.
#[target_feature(enable = "ssse3,sse4.1")]
unsafe fn initial_states() -> [State; WAYS] {
    // SAFETY: `IV` is eight readable words, two 16-byte loads.
    let (dcba, efgh) = unsafe {
        (
            _mm_loadu_si128(IV.as_ptr().cast()),
            _mm_loadu_si128(IV.as_ptr().wrapping_add(4).cast()),
        )
    };
    let cdab = _mm_shuffle_epi32::<0xB1>(dcba);
    let hgfe = _mm_shuffle_epi32::<0x1B>(efgh);
    let state = State {
        abef: _mm_alignr_epi8::<8>(cdab, hgfe),
        cdgh: _mm_blend_epi16::<0xF0>(hgfe, cdab),
    };
    [state; WAYS]
}

/// Each way's state as the eight words `a..h`.
///
/// # Safety
/// The CPU has SSSE3 and SSE4.1.
#[target_feature(enable = "ssse3,sse4.1")]
unsafe fn word_states(states: [State; WAYS]) -> [[u32; 8]; WAYS] {
    states.map(|state| {
        let feba = _mm_shuffle_epi32::<0x1B>(state.abef);
        let dchg = _mm_shuffle_epi32::<0xB1>(state.cdgh);
        let dcba = _mm_blend_epi16::<0xF0>(feba, dchg);
        let hgef = _mm_alignr_epi8::<8>(dchg, feba);
        let mut words = [0u32; 8];
        // SAFETY: `words` is eight writable words, two 16-byte stores.
        unsafe {
            _mm_storeu_si128(words.as_mut_ptr().cast(), dcba);
            _mm_storeu_si128(words.as_mut_ptr().wrapping_add(4).cast(), hgef);
        }
        words
    })
}

/// Compresses the first `count` blocks of every way's message into its state (a block a
/// message does not have reads as zeros; callers pass messages that have them all).
///
/// # Safety
/// The CPU has SHA, SSSE3 and SSE4.1.
#[target_feature(enable = "sha,ssse3,sse4.1")]
unsafe fn compress_blocks(states: &mut [State; WAYS], messages: &[&[u8]; WAYS], count: usize) {
    for block in 0..count {
        let at = block.saturating_mul(64);
        let blocks = messages.map(|m| {
            m.get(at..at.saturating_add(64))
                .and_then(|b| <&[u8; 64]>::try_from(b).ok())
        });
        // SAFETY: the caller vouches for the CPU.
        unsafe { compress(states, blocks) };
    }
}

/// One compression of a block whose `K + W` per round is `kw` (sixteen to a row, in round
/// order), the same in every way.
///
/// # Safety
/// The CPU has SHA, SSSE3 and SSE4.1.
#[target_feature(enable = "sha,ssse3,sse4.1")]
unsafe fn compress_scheduled(states: &mut [State; WAYS], kw: &[[u32; 16]; 4]) {
    let saved = *states;
    for four in kw.as_flattened().chunks_exact(4) {
        // SAFETY: `four` is four readable words, one 16-byte load.
        let wk = unsafe { _mm_loadu_si128(four.as_ptr().cast()) };
        let high = _mm_shuffle_epi32::<0x0E>(wk);
        for state in states.iter_mut() {
            state.cdgh = _mm_sha256rnds2_epu32(state.cdgh, state.abef, wk);
            state.abef = _mm_sha256rnds2_epu32(state.abef, state.cdgh, high);
        }
    }
    for (state, saved) in states.iter_mut().zip(saved) {
        state.abef = _mm_add_epi32(state.abef, saved.abef);
        state.cdgh = _mm_add_epi32(state.cdgh, saved.cdgh);
    }
}

/// One block into each way's state, the ways' rounds interleaved.
///
/// # Safety
/// The CPU has SHA, SSSE3 and SSE4.1.
#[target_feature(enable = "sha,ssse3,sse4.1")]
unsafe fn compress(states: &mut [State; WAYS], blocks: [Option<&[u8; 64]>; WAYS]) {
    let swap = byte_swap();
    // Loops, not closures: a closure is not compiled with the function's target features, and
    // was a call per block.
    let mut words = [[_mm_setzero_si128(); 4]; WAYS];
    for (words, block) in words.iter_mut().zip(blocks) {
        let Some(block) = block else { continue };
        for (word, bytes) in words.iter_mut().zip(block.chunks_exact(16)) {
            // SAFETY: `bytes` is 16 readable bytes, one unaligned load.
            *word = _mm_shuffle_epi8(unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }, swap);
        }
    }
    // SAFETY: the caller vouches for the CPU.
    unsafe { compress_words(states, words) };
}

/// The shuffle that turns four little-endian loaded words into SHA-256's big-endian ones.
#[target_feature(enable = "sse2")]
fn byte_swap() -> __m128i {
    _mm_set_epi64x(0x0C0D_0E0F_0809_0A0B, 0x0405_0607_0001_0203)
}

/// One block into each way's state, given as its sixteen big-endian message words (four to a
/// register), the ways' rounds interleaved.
///
/// # Safety
/// The CPU has SHA, SSSE3 and SSE4.1.
#[target_feature(enable = "sha,ssse3,sse4.1")]
unsafe fn compress_words(states: &mut [State; WAYS], words: [[__m128i; 4]; WAYS]) {
    let saved = *states;
    // Each way's last sixteen schedule words, four to a register, oldest first.
    let mut schedule = words;
    for (round, k) in K.as_flattened().chunks_exact(4).enumerate() {
        // SAFETY: `k` is four readable words, one 16-byte load.
        let k = unsafe { _mm_loadu_si128(k.as_ptr().cast()) };
        for (state, words) in states.iter_mut().zip(schedule.iter_mut()) {
            let [w0, w1, w2, w3] = *words;
            let w = if round < 4 {
                // The block's own words, in turn: rotate them through.
                *words = [w1, w2, w3, w0];
                w0
            } else {
                let next = _mm_sha256msg2_epu32(
                    _mm_add_epi32(_mm_sha256msg1_epu32(w0, w1), _mm_alignr_epi8::<4>(w3, w2)),
                    w3,
                );
                *words = [w1, w2, w3, next];
                next
            };
            let wk = _mm_add_epi32(w, k);
            state.cdgh = _mm_sha256rnds2_epu32(state.cdgh, state.abef, wk);
            state.abef =
                _mm_sha256rnds2_epu32(state.abef, state.cdgh, _mm_shuffle_epi32::<0x0E>(wk));
        }
    }
    for (state, saved) in states.iter_mut().zip(saved) {
        state.abef = _mm_add_epi32(state.abef, saved.abef);
        state.cdgh = _mm_add_epi32(state.cdgh, saved.cdgh);
    }
}

//! The `MNCK/3` chunk encoding, free of bindings so it tests natively.
//!
//! Layout (integers little-endian): the common header (`checkpoint_common::wire`), then
//! `raw-len u32 | codec u8 | body-len u32 | body`, nothing else: no proof (the manifest lists
//! the chunk's subtree root, see the crate docs).
//!
//! The body is the leaves in byte columns — byte 0 of every leaf, then byte 1 of every leaf,
//! and so on (`leaf-size` columns of `end - start` bytes) — so that a field that is constant
//! or small across validators (epochs, flags, the high bytes of balances, the prefix of
//! withdrawal credentials) becomes a long run — then, with codec 1, an lz4 block of that; codec
//! 0 stores the columns as they are, chosen when lz4 would not make them smaller (random
//! leaves) — and then stores the leaves as they are, rows not columns, so opening such a chunk
//! costs a copy, not a transposition. The choice is a function of the bytes, so the output
//! stays deterministic.

use checkpoint_common::wire::{Decoded, Header, Reader, u32_len, write_with_len};

use crate::transpose::transpose;

/// Largest leaf payload a chunk may announce: decoding never allocates more.
pub const MAX_RAW_BYTES: usize = 32 << 20;

/// Codec byte: the leaves stored as they are (rows: lz4 did not shrink the columns).
pub const CODEC_NONE: u8 = 0;
/// Codec byte: the columns as one lz4 block (`lz4_flex` 0.11 block format).
pub const CODEC_LZ4: u8 = 1;

/// `leaves` (`leaf_size` bytes each; a trailing partial leaf is ignored) rearranged into byte
/// columns (see [`mod@crate::transpose`]).
pub fn to_columns(leaves: &[u8], leaf_size: usize) -> Vec<u8> {
    transpose(leaves, leaf_size)
}

/// The inverse of [`to_columns`]: the columns are the leaves of a `count × leaf_size`
/// transposition, so transposing back with `count` as the width restores them.
pub fn from_columns(columns: &[u8], leaf_size: usize) -> Vec<u8> {
    let count = columns.len().checked_div(leaf_size).unwrap_or(0);
    transpose(columns, count)
}

/// Encodes a chunk: `leaves` must hold exactly `(end - start) * leaf_size` bytes.
pub fn encode(header: &Header, leaves: &[u8]) -> Result<Vec<u8>, String> {
    let expected = header.leaf_bytes()?;
    if u64::try_from(leaves.len()).ok() != Some(expected) {
        return Err(format!(
            "{} leaf bytes for {} leaves of {} bytes",
            leaves.len(),
            header.count()?,
            header.leaf_size
        ));
    }
    if leaves.len() > MAX_RAW_BYTES {
        return Err(format!(
            "{} leaf bytes in one chunk, at most {MAX_RAW_BYTES}",
            leaves.len()
        ));
    }
    let leaf_size = usize::try_from(header.leaf_size).map_err(|_| "leaf size too large")?;
    let columns = to_columns(leaves, leaf_size);
    let packed = lz4_flex::block::compress(&columns);
    let (codec, body) = if packed.len() < columns.len() {
        (CODEC_LZ4, packed.as_slice())
    } else {
        (CODEC_NONE, leaves)
    };
    let mut out = Vec::with_capacity(body.len().saturating_add(40));
    header.write(&mut out);
    out.extend_from_slice(&u32_len(leaves.len(), "leaves")?.to_le_bytes());
    out.push(codec);
    write_with_len(&mut out, body, "chunk body")?;
    Ok(out)
}

/// Decodes a chunk, checking every length before allocating.
pub fn decode(bytes: &[u8]) -> Result<Decoded, String> {
    let mut r = Reader::new(bytes);
    let header = Header::read(&mut r)?;
    let raw_len = r.len("raw length")?;
    let expected = header.leaf_bytes()?;
    if u64::try_from(raw_len).ok() != Some(expected) {
        return Err(format!(
            "raw length {raw_len} is not {} leaves of {} bytes",
            header.count()?,
            header.leaf_size
        ));
    }
    if raw_len > MAX_RAW_BYTES {
        return Err(format!(
            "raw length {raw_len} is over the limit of {MAX_RAW_BYTES}"
        ));
    }
    let [codec] = r.array::<1>("codec")?;
    let body_len = r.len("body length")?;
    let body = r.take(body_len, "body")?;
    r.finish()?;
    let leaf_size = usize::try_from(header.leaf_size).map_err(|_| "leaf size too large")?;
    let leaves = match codec {
        CODEC_NONE => body.to_vec(),
        CODEC_LZ4 => {
            let columns = lz4_flex::block::decompress(body, raw_len)
                .map_err(|e| format!("chunk body does not decompress: {e}"))?;
            if columns.len() != raw_len {
                return Err(format!(
                    "chunk body holds {} bytes, {raw_len} announced",
                    columns.len()
                ));
            }
            from_columns(&columns, leaf_size)
        }
        other => return Err(format!("unknown codec {other}")),
    };
    if leaves.len() != raw_len {
        return Err(format!(
            "chunk body holds {} bytes, {raw_len} announced",
            leaves.len()
        ));
    }
    Ok(Decoded {
        header,
        leaves,
        proof: Vec::new(),
    })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Failing cases are printed, not written next to the sources.
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// Columns and back is the identity, for any leaf size and count.
        #[test]
        fn columns_roundtrip(leaf_size in 0usize..200, count in 0usize..40, seed: u8) {
            let leaves: Vec<u8> = (0..leaf_size * count)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
                .collect();
            let columns = to_columns(&leaves, leaf_size);
            prop_assert_eq!(columns.len(), leaves.len());
            prop_assert_eq!(from_columns(&columns, leaf_size), leaves);
        }
    }

    proptest! {
        // Failing cases are printed, not written next to the sources.
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// The blocked transposition equals the naive one, for any shape.
        #[test]
        fn columns_are_the_naive_transposition(width in 1usize..70, count in 0usize..70) {
            let rows: Vec<u8> = (0..width * count).map(|i| (i * 7 + i / 3) as u8).collect();
            let naive: Vec<u8> = (0..width)
                .flat_map(|c| (0..count).map(move |r| (c, r)))
                .map(|(c, r)| rows[r * width + c])
                .collect();
            prop_assert_eq!(to_columns(&rows, width), naive);
        }
    }

    #[test]
    fn encode_decode_roundtrip_compresses_and_rejects_damage() {
        // Leaves whose bytes are constant per column, as validator epochs are.
        let leaves: Vec<u8> = (0..64u32).flat_map(|_| 0u8..137).collect();
        let header = Header {
            version: 3,
            start: 1024,
            end: 1088,
            leaf_size: 137,
        };
        let bytes = encode(&header, &leaves).unwrap();
        assert!(bytes.len() < leaves.len() / 4, "{} bytes", bytes.len());
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.leaves, leaves);
        assert!(decoded.proof.is_empty());
        assert_eq!(decoded.header, header);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "truncated at {cut} decoded");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_err());
        let mut codec = bytes.clone();
        codec[32] = 9;
        assert!(decode(&codec).unwrap_err().contains("codec"));
        let wider = Header {
            end: 1089,
            ..header
        };
        assert!(encode(&wider, &leaves).is_err());
    }

    #[test]
    fn incompressible_leaves_are_stored_as_they_are() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let leaves: Vec<u8> = (0..32 * 50)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let header = Header {
            version: 3,
            start: 0,
            end: 50,
            leaf_size: 32,
        };
        let bytes = encode(&header, &leaves).unwrap();
        assert_eq!(bytes[32], CODEC_NONE);
        assert_eq!(&bytes[bytes.len() - leaves.len()..], &leaves[..]);
        assert_eq!(decode(&bytes).unwrap().leaves, leaves);
    }
}

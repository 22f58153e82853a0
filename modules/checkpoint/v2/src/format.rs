//! The `MNCK/2` chunk encoding and the byte-targeted planner, free of bindings so they test
//! natively.
//!
//! Layout (integers little-endian): the common header (`checkpoint_common::wire`), then
//! `raw-len u32 | packed-len u32 | lz4 block of the concatenated leaves | proof-len u32 | proof`.
//! The proof is stored raw: it is hashes, which do not compress.

use checkpoint_common::wire::{Decoded, Header, Reader, u32_len, write_with_len};

/// Largest decompressed leaf payload a chunk may announce: decoding never allocates more.
pub const MAX_RAW_BYTES: usize = 32 << 20;

/// Bytes a chunk spends besides its leaves: the header and the largest range proof
/// (13-byte proof header, two 32-byte siblings per level, 64 levels).
pub const OVERHEAD_BYTES: u64 = 40 + 4 + 13 + 2 * 64 * 32;

/// Leaves per chunk so that an uncompressed chunk stays near `target_bytes`: at least
/// `min_leaves`, and never more than [`MAX_RAW_BYTES`] of leaves.
pub fn leaves_per_chunk(target_bytes: u64, leaf_size: u32, min_leaves: u64) -> u64 {
    let leaf_size = u64::from(leaf_size).max(1);
    let cap = u64::try_from(MAX_RAW_BYTES)
        .unwrap_or(u64::MAX)
        .checked_div(leaf_size)
        .unwrap_or(1)
        .max(1);
    target_bytes
        .saturating_sub(OVERHEAD_BYTES)
        .checked_div(leaf_size)
        .unwrap_or(0)
        .max(min_leaves)
        .min(cap)
}

/// Encodes a chunk: `leaves` must hold exactly `(end - start) * leaf_size` bytes.
pub fn encode(header: &Header, leaves: &[u8], proof: &[u8]) -> Result<Vec<u8>, String> {
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
    let packed = lz4_flex::block::compress(leaves);
    let mut out = Vec::with_capacity(packed.len().saturating_add(proof.len()).saturating_add(48));
    header.write(&mut out);
    out.extend_from_slice(&u32_len(leaves.len(), "leaves")?.to_le_bytes());
    write_with_len(&mut out, &packed, "packed leaves")?;
    write_with_len(&mut out, proof, "proof")?;
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
    let packed_len = r.len("packed length")?;
    let packed = r.take(packed_len, "packed leaves")?;
    let leaves = lz4_flex::block::decompress(packed, raw_len)
        .map_err(|e| format!("packed leaves do not decompress: {e}"))?;
    if leaves.len() != raw_len {
        return Err(format!(
            "packed leaves decompress to {} bytes, {raw_len} announced",
            leaves.len()
        ));
    }
    let proof_len = r.len("proof length")?;
    let proof = r.take(proof_len, "proof")?.to_vec();
    r.finish()?;
    Ok(Decoded {
        header,
        leaves,
        proof,
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

    #[test]
    fn chunks_target_bytes_within_their_bounds() {
        let per = leaves_per_chunk(1 << 20, 137, 16);
        assert_eq!(per, ((1u64 << 20) - OVERHEAD_BYTES) / 137);
        assert_eq!(leaves_per_chunk(0, 137, 16), 16);
        assert_eq!(
            leaves_per_chunk(u64::MAX, 137, 16),
            MAX_RAW_BYTES as u64 / 137
        );
    }

    #[test]
    fn encode_decode_roundtrip_compresses_and_rejects_damage() {
        let leaves: Vec<u8> = (0..64u32).flat_map(|i| [i as u8; 8]).collect();
        let header = Header {
            version: 2,
            start: 10,
            end: 18,
            leaf_size: 64,
        };
        let bytes = encode(&header, &leaves, b"proof").unwrap();
        assert!(bytes.len() < leaves.len());
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.leaves, leaves);
        assert_eq!(decoded.proof, b"proof");
        assert_eq!(decoded.header, header);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "truncated at {cut} decoded");
        }
        let mut wrong_raw = bytes.clone();
        wrong_raw[28] ^= 1;
        assert!(decode(&wrong_raw).is_err());
        let wider = Header { end: 19, ..header };
        assert!(encode(&wider, &leaves, b"").is_err());
    }
}

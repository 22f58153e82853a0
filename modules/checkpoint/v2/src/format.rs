//! The `MNCK/2` chunk encoding and the byte-targeted planner, free of bindings so they test
//! natively.
//!
//! Layout (integers little-endian):
//! `"MNCK" | version u32 | start u64 | end u64 | leaf-size u32 | raw-len u32 | packed-len u32 |
//! lz4 block of the concatenated leaves | proof-len u32 | proof`.
//! The proof is stored raw: it is hashes, which do not compress.

const MAGIC: &[u8; 4] = b"MNCK";

/// Largest decompressed leaf payload a chunk may announce: decoding never allocates more.
pub const MAX_RAW_BYTES: usize = 32 << 20;

/// Bytes a chunk spends besides its leaves: the header and the largest range proof
/// (13-byte proof header, two 32-byte siblings per level, 64 levels).
pub const OVERHEAD_BYTES: u64 = 40 + 4 + 13 + 2 * 64 * 32;

/// A decoded chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Format version.
    pub version: u32,
    /// First leaf.
    pub start: u64,
    /// One past the last leaf.
    pub end: u64,
    /// Bytes of each leaf.
    pub leaf_size: u32,
    /// Leaves in order, concatenated.
    pub leaves: Vec<u8>,
    /// Range proof bytes.
    pub proof: Vec<u8>,
}

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

/// Splits `[0, leaf_count)` into ranges of `per_chunk` leaves (the last may be shorter).
pub fn plan(leaf_count: u64, per_chunk: u64) -> Vec<(u64, u64)> {
    let per_chunk = per_chunk.max(1);
    let mut ranges = Vec::new();
    let mut start = 0u64;
    while start < leaf_count {
        let end = start.saturating_add(per_chunk).min(leaf_count);
        ranges.push((start, end));
        start = end;
    }
    ranges
}

fn u32_len(len: usize, what: &str) -> Result<u32, String> {
    u32::try_from(len).map_err(|_| format!("{what} longer than 4 GiB"))
}

/// Encodes a chunk: `leaves` must hold exactly `(end - start) * leaf_size` bytes.
pub fn encode(
    version: u32,
    start: u64,
    end: u64,
    leaf_size: u32,
    leaves: &[u8],
    proof: &[u8],
) -> Result<Vec<u8>, String> {
    let count = end.checked_sub(start).ok_or("range end before start")?;
    let expected = count
        .checked_mul(u64::from(leaf_size))
        .ok_or("leaf bytes overflow")?;
    if u64::try_from(leaves.len()).ok() != Some(expected) {
        return Err(format!(
            "{} leaf bytes for {count} leaves of {leaf_size} bytes",
            leaves.len()
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
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&start.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    out.extend_from_slice(&leaf_size.to_le_bytes());
    out.extend_from_slice(&u32_len(leaves.len(), "leaves")?.to_le_bytes());
    out.extend_from_slice(&u32_len(packed.len(), "packed leaves")?.to_le_bytes());
    out.extend_from_slice(&packed);
    out.extend_from_slice(&u32_len(proof.len(), "proof")?.to_le_bytes());
    out.extend_from_slice(proof);
    Ok(out)
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let (head, rest) = self
            .bytes
            .split_at_checked(n)
            .ok_or_else(|| format!("chunk truncated in {what}"))?;
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        self.take(N, what)?
            .try_into()
            .map_err(|_| format!("chunk truncated in {what}"))
    }

    fn len(&mut self, what: &str) -> Result<usize, String> {
        usize::try_from(u32::from_le_bytes(self.array(what)?))
            .map_err(|_| format!("{what} too large"))
    }
}

/// Decodes a chunk, checking every length before allocating.
pub fn decode(bytes: &[u8]) -> Result<Decoded, String> {
    let mut r = Reader { bytes };
    if r.take(4, "magic")? != MAGIC {
        return Err("not a modnode checkpoint chunk (bad magic)".into());
    }
    let version = u32::from_le_bytes(r.array("version")?);
    let start = u64::from_le_bytes(r.array("start")?);
    let end = u64::from_le_bytes(r.array("end")?);
    let leaf_size = u32::from_le_bytes(r.array("leaf size")?);
    let raw_len = r.len("raw length")?;
    let count = end.checked_sub(start).ok_or("range end before start")?;
    let expected = count
        .checked_mul(u64::from(leaf_size))
        .ok_or("leaf bytes overflow")?;
    if u64::try_from(raw_len).ok() != Some(expected) {
        return Err(format!(
            "raw length {raw_len} is not {count} leaves of {leaf_size} bytes"
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
    if !r.bytes.is_empty() {
        return Err(format!("{} trailing bytes after the proof", r.bytes.len()));
    }
    Ok(Decoded {
        version,
        start,
        end,
        leaf_size,
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
    fn plan_targets_bytes_and_covers_every_leaf_once() {
        let per = leaves_per_chunk(1 << 20, 137, 16);
        assert_eq!(per, ((1u64 << 20) - OVERHEAD_BYTES) / 137);
        assert_eq!(leaves_per_chunk(0, 137, 16), 16);
        assert_eq!(
            leaves_per_chunk(u64::MAX, 137, 16),
            MAX_RAW_BYTES as u64 / 137
        );
        let ranges = plan(1000, 64);
        assert_eq!(ranges.last(), Some(&(960, 1000)));
        assert!(ranges.windows(2).all(|w| w[0].1 == w[1].0));
    }

    #[test]
    fn encode_decode_roundtrip_compresses_and_rejects_damage() {
        let leaves: Vec<u8> = (0..64u32).flat_map(|i| [i as u8; 8]).collect();
        let bytes = encode(2, 10, 18, 64, &leaves, b"proof").unwrap();
        assert!(bytes.len() < leaves.len());
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.leaves, leaves);
        assert_eq!(decoded.proof, b"proof");
        assert_eq!(
            (decoded.start, decoded.end, decoded.leaf_size),
            (10, 18, 64)
        );
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "truncated at {cut} decoded");
        }
        let mut wrong_raw = bytes.clone();
        wrong_raw[28] ^= 1;
        assert!(decode(&wrong_raw).is_err());
        assert!(encode(2, 10, 19, 64, &leaves, b"").is_err());
    }
}

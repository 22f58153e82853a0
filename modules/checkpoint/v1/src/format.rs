//! The `MNCK/1` chunk encoding and the fixed-size planner, free of bindings so they test natively.

const MAGIC: &[u8; 4] = b"MNCK";

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
    /// Leaves in order.
    pub leaves: Vec<Vec<u8>>,
    /// Range proof bytes.
    pub proof: Vec<u8>,
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

/// Encodes a chunk; every leaf must be `leaf_size` bytes and there must be `end - start` leaves.
pub fn encode(
    version: u32,
    start: u64,
    end: u64,
    leaf_size: u32,
    leaves: &[Vec<u8>],
    proof: &[u8],
) -> Result<Vec<u8>, String> {
    let expected = end.checked_sub(start).ok_or("range end before start")?;
    if u64::try_from(leaves.len()).ok() != Some(expected) {
        return Err(format!("{} leaves for a range of {expected}", leaves.len()));
    }
    let proof_len = u32::try_from(proof.len()).map_err(|_| "proof longer than 4 GiB")?;
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&start.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    out.extend_from_slice(&leaf_size.to_le_bytes());
    for (i, leaf) in leaves.iter().enumerate() {
        if u32::try_from(leaf.len()).ok() != Some(leaf_size) {
            return Err(format!(
                "leaf {i} is {} bytes, expected {leaf_size}",
                leaf.len()
            ));
        }
        out.extend_from_slice(leaf);
    }
    out.extend_from_slice(&proof_len.to_le_bytes());
    out.extend_from_slice(proof);
    Ok(out)
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!("chunk truncated in {what}"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        self.take(N, what)?
            .try_into()
            .map_err(|_| format!("chunk truncated in {what}"))
    }
}

/// Decodes a chunk, checking every length.
pub fn decode(bytes: &[u8]) -> Result<Decoded, String> {
    let mut r = Reader { bytes };
    if r.take(4, "magic")? != MAGIC {
        return Err("not a modnode checkpoint chunk (bad magic)".into());
    }
    let version = u32::from_le_bytes(r.array("version")?);
    let start = u64::from_le_bytes(r.array("start")?);
    let end = u64::from_le_bytes(r.array("end")?);
    let leaf_size_field = u32::from_le_bytes(r.array("leaf size")?);
    let count = end.checked_sub(start).ok_or("range end before start")?;
    let leaf_size = usize::try_from(leaf_size_field).map_err(|_| "leaf size too large")?;
    let count = usize::try_from(count).map_err(|_| "too many leaves")?;
    let total = count.checked_mul(leaf_size).ok_or("leaf bytes overflow")?;
    if total > r.bytes.len() {
        return Err(format!(
            "chunk truncated: {count} leaves of {leaf_size} bytes announced"
        ));
    }
    let mut leaves = Vec::with_capacity(count);
    for _ in 0..count {
        leaves.push(r.take(leaf_size, "leaves")?.to_vec());
    }
    let proof_len = u32::from_le_bytes(r.array("proof length")?);
    let proof_len = usize::try_from(proof_len).map_err(|_| "proof too large")?;
    let proof = r.take(proof_len, "proof")?.to_vec();
    if !r.bytes.is_empty() {
        return Err(format!("{} trailing bytes after the proof", r.bytes.len()));
    }
    Ok(Decoded {
        version,
        start,
        end,
        leaf_size: leaf_size_field,
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
    fn plan_covers_every_leaf_once_in_order() {
        let ranges = plan(1000, 64);
        assert_eq!(ranges.first(), Some(&(0, 64)));
        assert_eq!(ranges.last(), Some(&(960, 1000)));
        assert!(ranges.windows(2).all(|w| w[0].1 == w[1].0));
        assert!(plan(0, 64).is_empty());
    }

    #[test]
    fn encode_decode_roundtrip_and_truncation() {
        let leaves = vec![vec![1u8; 8], vec![2u8; 8]];
        let bytes = encode(1, 10, 12, 8, &leaves, b"proof").unwrap();
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.leaves, leaves);
        assert_eq!(decoded.proof, b"proof");
        assert_eq!((decoded.start, decoded.end), (10, 12));
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "truncated at {cut} decoded");
        }
        assert!(encode(1, 10, 13, 8, &leaves, b"").is_err());
    }
}

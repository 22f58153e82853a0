//! The `MNCK/1` chunk encoding, free of bindings so it tests natively.
//!
//! Layout (integers little-endian): the common header (`checkpoint_common::wire`), then
//! `leaves (end - start) × leaf-size bytes | proof-len u32 | proof`.

use checkpoint_common::wire::{Decoded, Header, Reader, write_with_len};

/// Encodes a chunk; there must be `end - start` leaves of `leaf_size` bytes each.
pub fn encode(header: &Header, leaves: &[Vec<u8>], proof: &[u8]) -> Result<Vec<u8>, String> {
    let expected = header.count()?;
    if u64::try_from(leaves.len()).ok() != Some(expected) {
        return Err(format!("{} leaves for a range of {expected}", leaves.len()));
    }
    let mut out = Vec::new();
    header.write(&mut out);
    for (i, leaf) in leaves.iter().enumerate() {
        if u32::try_from(leaf.len()).ok() != Some(header.leaf_size) {
            return Err(format!(
                "leaf {i} is {} bytes, expected {}",
                leaf.len(),
                header.leaf_size
            ));
        }
        out.extend_from_slice(leaf);
    }
    write_with_len(&mut out, proof, "proof")?;
    Ok(out)
}

/// Decodes a chunk, checking every length before allocating.
pub fn decode(bytes: &[u8]) -> Result<Decoded, String> {
    let mut r = Reader::new(bytes);
    let header = Header::read(&mut r)?;
    let total = usize::try_from(header.leaf_bytes()?).map_err(|_| "too many leaves")?;
    if total > r.remaining() {
        return Err(format!(
            "chunk truncated: {} leaves of {} bytes announced",
            header.count()?,
            header.leaf_size
        ));
    }
    // Leaf by leaf, then joined, exactly as the released version 1 decodes: a refactor keeps
    // its costs, so upgrade-check comparisons against v1 keep meaning what they meant.
    let count = usize::try_from(header.count()?).map_err(|_| "too many leaves")?;
    let leaf_size = usize::try_from(header.leaf_size).map_err(|_| "leaf size too large")?;
    let mut leaves = Vec::with_capacity(count);
    for _ in 0..count {
        leaves.push(r.take(leaf_size, "leaves")?.to_vec());
    }
    let leaves = leaves.concat();
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
    fn encode_decode_roundtrip_and_truncation() {
        let leaves = vec![vec![1u8; 8], vec![2u8; 8]];
        let header = Header {
            version: 1,
            start: 10,
            end: 12,
            leaf_size: 8,
        };
        let bytes = encode(&header, &leaves, b"proof").unwrap();
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.leaves, leaves.concat());
        assert_eq!(decoded.proof, b"proof");
        assert_eq!(decoded.header, header);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "truncated at {cut} decoded");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(decode(&trailing).unwrap_err().contains("trailing"));
        let wider = Header { end: 13, ..header };
        assert!(encode(&wider, &leaves, b"").is_err());
        let short_leaf = vec![vec![1u8; 8], vec![2u8; 7]];
        assert!(
            encode(&header, &short_leaf, b"")
                .unwrap_err()
                .contains("leaf 1")
        );
    }
}

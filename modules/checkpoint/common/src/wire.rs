//! The parts of the `MNCK` chunk encoding every version shares, free of bindings so they test
//! natively: the header `"MNCK" | version u32 | start u64 | end u64 | leaf-size u32` (integers
//! little-endian), a reader that refuses to read past its input, and the range planner.

/// First bytes of every chunk.
pub const MAGIC: &[u8; 4] = b"MNCK";

/// The header every chunk starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// First leaf.
    pub start: u64,
    /// One past the last leaf.
    pub end: u64,
    /// Bytes of each leaf.
    pub leaf_size: u32,
}

impl Header {
    /// Leaves in the range (`end - start`); an error if `end` is before `start`.
    pub fn count(&self) -> Result<u64, String> {
        self.end
            .checked_sub(self.start)
            .ok_or_else(|| "range end before start".to_owned())
    }

    /// Bytes of all the range's leaves together.
    pub fn leaf_bytes(&self) -> Result<u64, String> {
        self.count()?
            .checked_mul(u64::from(self.leaf_size))
            .ok_or_else(|| "leaf bytes overflow".to_owned())
    }

    /// Appends the encoded header to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.end.to_le_bytes());
        out.extend_from_slice(&self.leaf_size.to_le_bytes());
    }

    /// Reads and checks the magic, then the header fields.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, String> {
        if r.take(4, "magic")? != MAGIC {
            return Err("not a modnode checkpoint chunk (bad magic)".into());
        }
        Ok(Self {
            version: u32::from_le_bytes(r.array("version")?),
            start: u64::from_le_bytes(r.array("start")?),
            end: u64::from_le_bytes(r.array("end")?),
            leaf_size: u32::from_le_bytes(r.array("leaf size")?),
        })
    }
}

/// A decoded chunk of any version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Its header.
    pub header: Header,
    /// The range's leaves in order, concatenated.
    pub leaves: Vec<u8>,
    /// Range proof bytes.
    pub proof: Vec<u8>,
}

/// Reads a chunk front to back; every read past the end is an error naming the field.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let (head, rest) = self
            .bytes
            .split_at_checked(n)
            .ok_or_else(|| format!("chunk truncated in {what}"))?;
        self.bytes = rest;
        Ok(head)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        self.take(N, what)?
            .try_into()
            .map_err(|_| format!("chunk truncated in {what}"))
    }

    /// A little-endian `u32` length.
    pub fn len(&mut self, what: &str) -> Result<usize, String> {
        usize::try_from(u32::from_le_bytes(self.array(what)?))
            .map_err(|_| format!("{what} too large"))
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// An error unless every byte was read.
    pub fn finish(&self) -> Result<(), String> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(format!("{n} trailing bytes after the proof")),
        }
    }
}

/// `len` as a `u32` length field.
pub fn u32_len(len: usize, what: &str) -> Result<u32, String> {
    u32::try_from(len).map_err(|_| format!("{what} longer than 4 GiB"))
}

/// Appends a `u32` length and then `bytes`.
pub fn write_with_len(out: &mut Vec<u8>, bytes: &[u8], what: &str) -> Result<(), String> {
    out.extend_from_slice(&u32_len(bytes.len(), what)?.to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
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
        assert_eq!(plan(3, 0), vec![(0, 1), (1, 2), (2, 3)]);
    }

    #[test]
    fn header_roundtrips_and_every_truncation_names_its_field() {
        let header = Header {
            version: 7,
            start: 10,
            end: 12,
            leaf_size: 8,
        };
        let mut out = Vec::new();
        header.write(&mut out);
        assert_eq!(out.len(), 28);
        assert_eq!(Header::read(&mut Reader::new(&out)).unwrap(), header);
        for (cut, field) in [
            (2, "magic"),
            (6, "version"),
            (14, "start"),
            (22, "end"),
            (26, "leaf size"),
        ] {
            let err = Header::read(&mut Reader::new(&out[..cut])).unwrap_err();
            assert!(err.contains(field), "cut at {cut}: {err}");
        }
        out[0] = b'X';
        assert!(
            Header::read(&mut Reader::new(&out))
                .unwrap_err()
                .contains("magic")
        );
        let backwards = Header {
            start: 5,
            end: 4,
            ..header
        };
        assert!(backwards.count().is_err());
        let huge = Header {
            start: 0,
            end: u64::MAX,
            leaf_size: 2,
            ..header
        };
        assert!(huge.leaf_bytes().is_err());
    }

    #[test]
    fn the_reader_refuses_trailing_bytes() {
        let mut r = Reader::new(&[1, 0, 0, 0, 9, 9]);
        assert_eq!(r.len("n").unwrap(), 1);
        assert_eq!(r.remaining(), 2);
        assert!(r.finish().unwrap_err().contains("2 trailing"));
        r.take(2, "rest").unwrap();
        r.finish().unwrap();
    }
}

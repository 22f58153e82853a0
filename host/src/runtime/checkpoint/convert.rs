//! The one place checkpoint chunking's own types ([`crate::chunk`]) are converted to and from
//! the checkpoint modules' WIT types: nothing outside the runtime names those.

use super::types;
use crate::chunk::{ChunkContents, ChunkError, LeafRange, PlanParams};

impl From<LeafRange> for types::LeafRange {
    fn from(r: LeafRange) -> Self {
        Self {
            start: r.start,
            end: r.end,
        }
    }
}

impl From<types::LeafRange> for LeafRange {
    fn from(r: types::LeafRange) -> Self {
        Self {
            start: r.start,
            end: r.end,
        }
    }
}

impl From<PlanParams> for types::PlanParams {
    fn from(p: PlanParams) -> Self {
        Self {
            target_chunk_bytes: p.target_chunk_bytes,
        }
    }
}

impl From<types::ChunkContents> for ChunkContents {
    fn from(c: types::ChunkContents) -> Self {
        Self {
            range: c.range.into(),
            leaf_size: c.leaf_size,
            leaves: c.leaves,
            proof: c.proof,
        }
    }
}

impl From<types::ChunkError> for ChunkError {
    fn from(e: types::ChunkError) -> Self {
        match e {
            types::ChunkError::Malformed(message) => Self::Malformed(message),
            types::ChunkError::WrongVersion(version) => Self::WrongVersion(version),
            types::ChunkError::OutOfRange(range) => Self::OutOfRange(range.into()),
        }
    }
}

/// An opened chunk (or why not) in the chunking's own types.
pub(super) fn opened(
    opened: Result<types::ChunkContents, types::ChunkError>,
) -> Result<ChunkContents, ChunkError> {
    opened.map(Into::into).map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunking_types_show_as_the_wit_types_did() {
        let wit_range = types::LeafRange { start: 3, end: 9 };
        let range = LeafRange::from(wit_range);
        assert_eq!(format!("{range:?}"), format!("{wit_range:?}"));
        assert_eq!(types::LeafRange::from(range), wit_range);

        let params = PlanParams {
            target_chunk_bytes: 512,
        };
        assert_eq!(
            format!("{params:?}"),
            format!("{:?}", types::PlanParams::from(params))
        );

        let contents = types::ChunkContents {
            range: wit_range,
            leaf_size: 32,
            leaves: vec![1, 2, 3],
            proof: vec![4],
        };
        assert_eq!(
            format!("{:?}", ChunkContents::from(contents.clone())),
            format!("{contents:?}")
        );

        for wit in [
            types::ChunkError::Malformed("not a chunk: \"x\"".into()),
            types::ChunkError::WrongVersion(7),
            types::ChunkError::OutOfRange(wit_range),
        ] {
            let ours = ChunkError::from(wit.clone());
            assert_eq!(format!("{ours:?}"), format!("{wit:?}"));
            assert_eq!(format!("{ours}"), format!("{wit}"));
            assert_eq!(format!("{:#?}", ours), format!("{:#?}", wit));
        }
    }
}

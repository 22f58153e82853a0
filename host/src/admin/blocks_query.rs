//! `GET /blocks?from=H&count=N`: the canonical blocks from height `H` (at most `N`, at most
//! [`MAX_BLOCKS`]) as `{"blocks":[{"height","hash","slot","state_root"}]}`, so a harness can
//! compare every node's chain height by height without reading whole blocks.

use serde_json::Value;

use crate::chain::block::Block;
use crate::chain::genesis::MAX_DEPOSITS_PER_BLOCK;

/// Most blocks one answer lists.
pub const MAX_BLOCKS: u64 = 256;

/// A parsed `/blocks` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlocksQuery {
    /// First height.
    pub from: u64,
    /// How many heights (clamped to [`MAX_BLOCKS`]).
    pub count: u64,
}

impl BlocksQuery {
    /// Parses `from=H&count=N` (both required, each once, nothing else). Err = what is wrong
    /// with the client's query.
    pub fn parse(query: Option<&str>) -> Result<Self, String> {
        let (mut from, mut count) = (None, None);
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("query parameter {pair:?} has no value"))?;
            let number: u64 = value
                .parse()
                .map_err(|_| format!("{key} {value:?} is not a non-negative integer"))?;
            let slot = match key {
                "from" => &mut from,
                "count" => &mut count,
                other => return Err(format!("unknown query parameter {other:?} (from, count)")),
            };
            if slot.replace(number).is_some() {
                return Err(format!("{key} given twice"));
            }
        }
        match (from, count) {
            (Some(from), Some(count)) => Ok(Self {
                from,
                count: count.min(MAX_BLOCKS),
            }),
            _ => Err("give both from=H and count=N".into()),
        }
    }
}

/// One block of a `/blocks` answer. (Fields in alphabetical order, as the hand-built object
/// it replaces was written, so the bytes on the wire are unchanged.)
#[derive(Debug, serde::Serialize)]
struct BlockLine {
    /// The block's hash, hex.
    hash: String,
    /// Its height.
    height: u64,
    /// Its slot.
    slot: u64,
    /// The state root its header commits to, hex.
    state_root: String,
}

/// A `/blocks` answer: `{"blocks": [...]}`, in height order.
#[derive(Debug, serde::Serialize)]
struct BlocksAnswer {
    /// The blocks.
    blocks: Vec<BlockLine>,
}

/// The JSON answer for the canonical blocks' encodings `encoded` (in height order). Err =
/// a stored block does not decode (ours: the store is damaged).
pub fn render(encoded: &[Vec<u8>]) -> Result<Value, String> {
    let mut blocks = Vec::with_capacity(encoded.len());
    for bytes in encoded {
        let block = Block::decode(bytes, MAX_DEPOSITS_PER_BLOCK)
            .map_err(|e| format!("a stored canonical block does not decode: {e}"))?;
        blocks.push(BlockLine {
            hash: hex::encode(block.hash()),
            height: block.header.height,
            slot: block.header.slot,
            state_root: hex::encode(block.header.state_root),
        });
    }
    serde_json::to_value(BlocksAnswer { blocks })
        .map_err(|e| format!("the blocks answer does not serialise: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_strictly_and_count_is_clamped() {
        assert_eq!(
            BlocksQuery::parse(Some("from=3&count=2")).unwrap(),
            BlocksQuery { from: 3, count: 2 }
        );
        assert_eq!(
            BlocksQuery::parse(Some("count=100000&from=0"))
                .unwrap()
                .count,
            MAX_BLOCKS
        );
        for bad in [
            "",
            "from=1",
            "count=1",
            "from=-1&count=1",
            "from=1&from=2&count=1",
            "to=3",
            "from",
        ] {
            assert!(BlocksQuery::parse(Some(bad)).is_err(), "{bad}");
        }
    }

    /// The typed answer serialises to the shape the testnet runner and the CLI read.
    #[test]
    fn the_answer_keeps_its_json_shape() {
        let answer = BlocksAnswer {
            blocks: vec![BlockLine {
                hash: "ab".into(),
                height: 3,
                slot: 4,
                state_root: "cd".into(),
            }],
        };
        assert_eq!(
            serde_json::to_string(&answer).unwrap(),
            serde_json::json!({"blocks": [{"height": 3, "hash": "ab", "slot": 4, "state_root": "cd"}]})
                .to_string()
        );
        assert_eq!(render(&[]).unwrap(), serde_json::json!({"blocks": []}));
    }
}

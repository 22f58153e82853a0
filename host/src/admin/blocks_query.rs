//! `GET /blocks?from=H&count=N[&raw=1]`: the canonical blocks from height `H` (at most `N`, at
//! most [`MAX_BLOCKS`]) as `{"blocks":[{"height","hash","slot","state_root"}]}`, so a harness
//! can compare every node's chain height by height without reading whole blocks; with `raw=1`
//! each also carries `"bytes"`, its canonical encoding in hex (at most [`MAX_RAW_BLOCKS`] per
//! answer), for `modnode upgrade-check --from-node` to replay the chain.

use serde_json::Value;

use crate::chain::block::Block;
use crate::chain::genesis::MAX_DEPOSITS_PER_BLOCK;

/// Most blocks one answer lists.
pub const MAX_BLOCKS: u64 = 256;
/// Most blocks one `raw=1` answer lists (a full block is ~17 KiB of hex).
pub const MAX_RAW_BLOCKS: u64 = 16;

/// A parsed `/blocks` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlocksQuery {
    /// First height.
    pub from: u64,
    /// How many heights (clamped to [`MAX_BLOCKS`], or [`MAX_RAW_BLOCKS`] with `raw`).
    pub count: u64,
    /// Include each block's canonical encoding.
    pub raw: bool,
}

impl BlocksQuery {
    /// Parses `from=H&count=N` (both required, each once) and `raw=0|1` (optional, once);
    /// nothing else. Err = what is wrong with the client's query.
    pub fn parse(query: Option<&str>) -> Result<Self, String> {
        let (mut from, mut count, mut raw) = (None, None, None);
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
                "raw" if number <= 1 => &mut raw,
                "raw" => return Err(format!("raw {value:?} is not 0 or 1")),
                other => {
                    return Err(format!(
                        "unknown query parameter {other:?} (from, count, raw)"
                    ));
                }
            };
            if slot.replace(number).is_some() {
                return Err(format!("{key} given twice"));
            }
        }
        let raw = raw == Some(1);
        let most = if raw { MAX_RAW_BLOCKS } else { MAX_BLOCKS };
        match (from, count) {
            (Some(from), Some(count)) => Ok(Self {
                from,
                count: count.min(most),
                raw,
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
    /// Its canonical encoding, hex (`raw=1` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<String>,
}

/// A `/blocks` answer: `{"blocks": [...]}`, in height order.
#[derive(Debug, serde::Serialize)]
struct BlocksAnswer {
    /// The blocks.
    blocks: Vec<BlockLine>,
}

/// The JSON answer for the canonical blocks' encodings `encoded` (in height order), with the
/// encodings themselves when `raw`. Err = a stored block does not decode (ours: the store is
/// damaged).
pub fn render(encoded: &[Vec<u8>], raw: bool) -> Result<Value, String> {
    let mut blocks = Vec::with_capacity(encoded.len());
    for bytes in encoded {
        let block = Block::decode(bytes, MAX_DEPOSITS_PER_BLOCK)
            .map_err(|e| format!("a stored canonical block does not decode: {e}"))?;
        blocks.push(BlockLine {
            hash: hex::encode(block.hash()),
            height: block.header.height,
            slot: block.header.slot,
            state_root: hex::encode(block.header.state_root),
            bytes: raw.then(|| hex::encode(bytes)),
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
            BlocksQuery {
                from: 3,
                count: 2,
                raw: false
            }
        );
        let raw = BlocksQuery::parse(Some("from=1&count=100&raw=1")).unwrap();
        assert!(raw.raw);
        assert_eq!(raw.count, MAX_RAW_BLOCKS);
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
            "from=1&count=1&raw=2",
            "from=1&count=1&raw=1&raw=1",
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
                bytes: None,
            }],
        };
        assert_eq!(
            serde_json::to_string(&answer).unwrap(),
            serde_json::json!({"blocks": [{"height": 3, "hash": "ab", "slot": 4, "state_root": "cd"}]})
                .to_string()
        );
        assert_eq!(
            render(&[], false).unwrap(),
            serde_json::json!({"blocks": []})
        );
    }
}

//! Polls one node's admin API at ~2 Hz into observations: head, finalized height, the
//! canonical blocks (hash and state root) from the lowest height not yet seen final up to the
//! head, the head state's deposit count and balance sum.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::admin::client::{self, Target};

/// Time between two polls of one node.
pub const POLL_EVERY: Duration = Duration::from_millis(500);
/// Time one poll may take (a paused node answers nothing).
const POLL_TIMEOUT: Duration = Duration::from_secs(2);
/// Most blocks one poll asks for.
const MAX_BLOCKS_PER_POLL: u64 = 64;

/// One canonical block a node reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenBlock {
    /// Height.
    pub height: u64,
    /// Block hash (hex).
    pub hash: String,
    /// State root after it (hex).
    pub state_root: String,
}

/// What one poll of one node saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The node.
    pub node: usize,
    /// Head height.
    pub head: u64,
    /// Head hash (hex).
    pub head_hash: String,
    /// Finalized height.
    pub finalized: u64,
    /// Canonical blocks, ascending, the head's included.
    pub blocks: Vec<SeenBlock>,
    /// Deposits applied by the head state.
    pub deposit_count: u64,
    /// Sum of validator balances in the head state, Gwei.
    pub balance_sum_gwei: u128,
    /// Connected peers.
    pub peers: u64,
    /// The peers the node bans now (hex node ids, `/status`'s `bans`).
    pub banned: Vec<String>,
}

/// Polls the node on `data_dir` until `stop` turns true, sending each observation.
pub async fn poll_node(
    node: usize,
    data_dir: PathBuf,
    out: mpsc::Sender<Observation>,
    mut stop: watch::Receiver<bool>,
) {
    // Lowest height not yet seen at or below the node's finalized height.
    let mut cursor = 1u64;
    let mut target: Option<Target> = None;
    let mut ticker = tokio::time::interval(POLL_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        if target.is_none() {
            // Not started yet, or restarted: its admin address is new.
            target = Target::data_dir(&data_dir).ok();
        }
        let Some(t) = &target else { continue };
        match tokio::time::timeout(POLL_TIMEOUT, poll_once(node, t, &mut cursor)).await {
            Ok(Some(observation)) => {
                if out.send(observation).await.is_err() {
                    return;
                }
            }
            // Down, restarting or paused: find it again next time.
            Ok(None) | Err(_) => target = None,
        }
    }
}

fn hex_field(value: &Value, key: &str) -> Option<String> {
    value.get(key)?.as_str().map(str::to_string)
}

/// The first height and count of blocks to ask a node for, given its head, finalized height
/// and serving floor: from the cursor (moved back to the finalized height when the node holds
/// less than it, e.g. after a wipe, and up to the floor), at least the last few blocks, never
/// below the floor, at most [`MAX_BLOCKS_PER_POLL`].
fn blocks_to_ask(cursor: &mut u64, head: u64, finalized: u64, floor: u64) -> (u64, u64) {
    if head < *cursor {
        // Wiped, or restored from a checkpoint: look again from what it holds.
        *cursor = finalized.max(1);
    }
    *cursor = (*cursor).max(floor);
    let from = (*cursor).min(head.saturating_sub(4)).max(floor).max(1);
    let count = head
        .saturating_sub(from)
        .saturating_add(1)
        .min(MAX_BLOCKS_PER_POLL);
    (from, count)
}

/// One poll; `None` if the node did not answer in full.
async fn poll_once(node: usize, target: &Target, cursor: &mut u64) -> Option<Observation> {
    let status = client::node_status(target).await.ok()?;
    let state = client::state(target, "").await.ok()?;
    let head = state.get("height")?.as_u64()?;
    let head_hash = hex_field(&state, "block_hash")?;
    let head_root = hex_field(&state, "state_root")?;
    let finalized = status.get("finalized_height")?.as_u64()?.min(head);
    // Blocks below this are pruned or lie below the checkpoint the node started from: it
    // answers "pruned" for them, so they are not asked for (an older node does not say: 1).
    let floor = status
        .get("served_from")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .max(1);
    let (from, count) = blocks_to_ask(cursor, head, finalized, floor);
    let mut blocks = Vec::new();
    if head >= 1 {
        let listed = client::blocks(target, from, count).await.ok()?;
        for b in listed.get("blocks")?.as_array()? {
            blocks.push(SeenBlock {
                height: b.get("height")?.as_u64()?,
                hash: hex_field(b, "hash")?,
                state_root: hex_field(b, "state_root")?,
            });
        }
    }
    // Heights below a restored checkpoint are not held: nothing to compare there.
    if let Some(last) = blocks.last() {
        *cursor = (*cursor).max(
            finalized
                .saturating_add(1)
                .min(last.height.saturating_add(1)),
        );
    }
    if blocks.last().is_none_or(|b| b.height < head) && head >= 1 {
        blocks.push(SeenBlock {
            height: head,
            hash: head_hash.clone(),
            state_root: head_root,
        });
    }
    blocks.retain(|b| b.height <= head);
    let balance_sum_gwei = hex_field(&state, "balance_sum_gwei")?.parse().ok()?;
    Some(Observation {
        node,
        head,
        head_hash,
        finalized,
        blocks,
        deposit_count: state.get("eth1_deposit_index")?.as_u64()?,
        balance_sum_gwei,
        peers: status.get("peers").and_then(Value::as_u64).unwrap_or(0),
        banned: status
            .get("bans")?
            .as_array()?
            .iter()
            .map(|b| b.get("node").and_then(Value::as_str).map(str::to_owned))
            .collect::<Option<Vec<_>>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_restored_from_a_checkpoint_is_asked_only_for_blocks_it_serves() {
        // Never polled yet (cursor 1); restored at 96, head 400: asking from 1 is answered
        // "pruned" and the node would never be observed.
        let mut cursor = 1;
        let (from, count) = blocks_to_ask(&mut cursor, 400, 364, 96);
        assert_eq!((from, count), (96, MAX_BLOCKS_PER_POLL));
        assert_eq!(cursor, 96);
        // A node that serves everything is read from the cursor on, in pages.
        let mut cursor = 1;
        assert_eq!(
            blocks_to_ask(&mut cursor, 400, 364, 1),
            (1, MAX_BLOCKS_PER_POLL)
        );
        // Near the head the last few blocks are asked for again (a reorg replaces them).
        let mut cursor = 399;
        assert_eq!(blocks_to_ask(&mut cursor, 400, 398, 1), (396, 5));
        // Wiped and resyncing (head below the cursor): back to its finalized height.
        let mut cursor = 300;
        assert_eq!(blocks_to_ask(&mut cursor, 20, 10, 1), (10, 11));
        assert_eq!(cursor, 10);
        // Restored just now: the head is the floor.
        let mut cursor = 1;
        assert_eq!(blocks_to_ask(&mut cursor, 96, 96, 96), (96, 1));
    }
}

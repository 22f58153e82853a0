//! What a checkpoint is made of: the state as position-indexed leaves (the registry, one leaf per
//! validator: its record and balance) plus the parts of the state that are not leaves (the eth1
//! state, the schedule) and deposits@3's pending-deposit queue when the state holds one, read
//! from an immutable [`State`] so creation never races import.

use crate::runtime::checkpoint::StateReader;
use crate::state::merkle::Hash32;
use crate::state::{LEAF_BYTES, PendingQueue, State};

/// An immutable state a checkpoint is created from. The leaf access comes from the checkpoint
/// world's [`StateReader`]; this adds what the manifest needs besides the leaves.
pub trait StateLeaves: StateReader {
    /// Root of the tree over the leaves (what the chunks' range proofs lead to).
    fn registry_root(&self) -> Hash32;
    /// Canonical encoding of the non-leaf state parts, carried in the manifest.
    fn extras(&self) -> Vec<u8>;
    /// The full state root: the registry root, the extras and the queue (if any) combined.
    fn state_root(&self) -> Hash32;
    /// deposits@3's pending-deposit queue, if the state holds one: the host adds its chunks
    /// to the module's (see [`super::queue`]).
    fn pending(&self) -> Option<&PendingQueue> {
        None
    }
    /// Node `index` at level `depth` of the registry tree (level 0: the leaf hashes), read,
    /// not hashed: a checkpoint-v3 chunk's subtree root.
    fn tree_node(&self, depth: usize, index: u64) -> Option<Hash32>;
}

/// Leaves `[start, end)` of `snapshot` as indices, or `None` when out of range.
fn leaf_range(snapshot: &State, start: u64, end: u64) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(start).ok()?;
    let end = usize::try_from(end).ok()?;
    let len = snapshot.registry().validators().len();
    (start <= end && end <= len).then_some(start..end)
}

/// Creation reads the structurally shared [`State`] directly: taking one is a
/// reference-count increment on the chain worker, and import never waits for a reader.
impl StateReader for State {
    fn leaf_count(&self) -> u64 {
        u64::from(self.validator_count())
    }

    fn leaf_size(&self) -> u32 {
        // 137 bytes; a constant far below u32::MAX.
        u32::try_from(LEAF_BYTES).unwrap_or(u32::MAX)
    }

    fn read_leaves(&self, start: u64, end: u64) -> Vec<Vec<u8>> {
        let Some(range) = leaf_range(self, start, end) else {
            return Vec::new();
        };
        let registry = self.registry();
        let validators = registry.validators().range(range.start, range.end);
        let balances = registry.balances().range(range.start, range.end);
        validators
            .zip(balances)
            .map(|(v, b)| v.leaf_bytes(*b).to_vec())
            .collect()
    }

    /// Walks the records and balances slice by slice (they are stored in chunks split at the
    /// same indices) instead of element by element: this runs for every leaf of every
    /// checkpoint, and the element-wise chained iterators cost about as much as the encoding.
    fn read_leaf_bytes(&self, start: u64, end: u64) -> Vec<u8> {
        let Some(range) = leaf_range(self, start, end) else {
            return Vec::new();
        };
        let expected = range.len().saturating_mul(LEAF_BYTES);
        let mut out = Vec::with_capacity(expected);
        let registry = self.registry();
        let validators = registry.validators().slices(range.start, range.end);
        let balances = registry.balances().slices(range.start, range.end);
        for (records, balances) in validators.zip(balances) {
            if records.len() != balances.len() {
                break;
            }
            for (v, b) in records.iter().zip(balances) {
                out.extend_from_slice(&v.leaf_bytes(*b));
            }
        }
        if out.len() != expected {
            // Records and balances chunked differently (never in a well-formed registry): the
            // element-wise walk is always right.
            return self.read_leaves(start, end).concat();
        }
        out
    }

    fn range_proof(&self, start: u64, end: u64) -> Vec<u8> {
        self.registry()
            .tree()
            .range_proof(start, end)
            .map(|p| p.to_bytes())
            .unwrap_or_default()
    }
}

impl StateLeaves for State {
    fn registry_root(&self) -> Hash32 {
        State::registry_root(self)
    }

    fn extras(&self) -> Vec<u8> {
        super::manifest::encode_extras(self.eth1(), self.schedule())
    }

    fn state_root(&self) -> Hash32 {
        self.root().to_bytes()
    }

    fn pending(&self) -> Option<&PendingQueue> {
        State::pending(self)
    }

    fn tree_node(&self, depth: usize, index: u64) -> Option<Hash32> {
        self.registry().tree().node(depth, index).ok()
    }
}

/// A deterministic synthetic state of `validators` validators (benchmarks and tests; with the
/// `test-utils` feature):
/// distinct pubkeys and withdrawal addresses derived from `seed`, balances around 32 ETH, a few
/// slashed or exited validators, and an eth1 state with some votes.
///
/// The snapshot is at height 0 under an all-zero block hash.
#[cfg(any(test, feature = "test-utils"))]
pub fn synthetic_state(validators: u32, seed: u64) -> Result<State, crate::state::StateError> {
    use crate::state::{
        Eth1Data, Eth1State, Eth1Vote, FAR_FUTURE_EPOCH, Registry, Schedule, Validator,
    };
    use sha2::{Digest, Sha256};

    let mut records = Vec::with_capacity(usize::try_from(validators).unwrap_or(0));
    let mut balances = Vec::with_capacity(records.capacity());
    for i in 0..validators {
        let a: [u8; 32] = Sha256::new()
            .chain_update(seed.to_le_bytes())
            .chain_update(i.to_le_bytes())
            .finalize()
            .into();
        let b: [u8; 32] = Sha256::digest(a).into();
        let mut pubkey = [0u8; 48];
        let (head, tail) = pubkey.split_at_mut(32);
        head.copy_from_slice(&a);
        tail.copy_from_slice(b.get(..16).unwrap_or(&[0; 16]));
        let mut withdrawal_credentials = [0u8; 32];
        withdrawal_credentials[0] = 1;
        if let (Some(dst), Some(src)) = (withdrawal_credentials.get_mut(12..), b.get(12..)) {
            dst.copy_from_slice(src);
        }
        let exited = i % 97 == 3;
        records.push(Validator {
            pubkey,
            withdrawal_credentials,
            effective_balance: 32_000_000_000,
            slashed: i % 251 == 7,
            activation_eligibility_epoch: u64::from(i / 64),
            activation_epoch: u64::from(i / 64).saturating_add(5),
            exit_epoch: if exited { 9_000 } else { FAR_FUTURE_EPOCH },
            withdrawable_epoch: if exited { 9_256 } else { FAR_FUTURE_EPOCH },
        });
        balances.push(32_000_000_000u64.saturating_add(u64::from(b[0]) * 1_000_003));
    }
    let registry = Registry::from_parts(records, balances)?;
    let data = |count: u64, tag: u8| Eth1Data {
        deposit_root: [tag; 32],
        deposit_count: count,
        block_hash: [tag ^ 0x5a; 32],
    };
    let eth1 = Eth1State {
        eth1_data: data(u64::from(validators), (seed & 0xff) as u8),
        deposit_index: u64::from(validators),
        vote_period: 3,
        votes: vec![Eth1Vote {
            proposer: 1,
            data: data(u64::from(validators).saturating_add(4), 9),
        }],
    };
    Ok(State::new(
        crate::hashes::BlockHash::default(),
        0,
        registry,
        eth1,
        Schedule::default(),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn chunk_wise_leaf_bytes_equal_the_leaf_by_leaf_read() {
        // Storage chunks hold 1024 validators: cover ranges inside one, across seams, at the
        // end, empty and out of range.
        let state = synthetic_state(2500, 5).unwrap();
        let ranges = [
            (0, 1),
            (0, 1024),
            (1000, 1100),
            (1023, 2049),
            (17, 2500),
            (2048, 2500),
            (2499, 2500),
            (700, 700),
            (2400, 2501),
            (3000, 4000),
        ];
        for (start, end) in ranges {
            let expected = state.read_leaves(start, end).concat();
            assert_eq!(
                state.read_leaf_bytes(start, end),
                expected,
                "leaves [{start}, {end})"
            );
        }
        assert_eq!(state.read_leaf_bytes(0, 2500).len(), 2500 * LEAF_BYTES);
    }
}

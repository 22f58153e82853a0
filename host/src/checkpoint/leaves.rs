//! What a checkpoint is made of: the state as position-indexed leaves (the registry, one leaf per
//! validator: its record and balance) plus the parts of the state that are not leaves (the eth1
//! state), read from an immutable view so creation never races import.

use crate::runtime::checkpoint::StateReader;
use crate::state::merkle::Hash32;
use crate::state::{Eth1State, LEAF_BYTES, Registry, Schedule, state_root};

/// An immutable state a checkpoint is created from. The leaf access comes from the checkpoint
/// world's [`StateReader`]; this adds what the manifest needs besides the leaves.
pub trait StateLeaves: StateReader {
    /// Root of the tree over the leaves (what the chunks' range proofs lead to).
    fn registry_root(&self) -> Hash32;
    /// Canonical encoding of the non-leaf state parts, carried in the manifest.
    fn extras(&self) -> Vec<u8>;
    /// The full state root: the registry root and the extras combined.
    fn state_root(&self) -> Hash32;
}

/// A frozen copy of the registry, the eth1 state and the module schedule at one block.
///
/// The copy is what lets creation run beside import; when the state becomes a structurally
/// shared snapshot this type is where it plugs in.
#[derive(Debug, Clone)]
pub struct RegistrySnapshot {
    registry: Registry,
    eth1: Eth1State,
    schedule: Schedule,
}

impl RegistrySnapshot {
    /// Freezes `registry`, `eth1` and `schedule`.
    pub fn new(registry: Registry, eth1: Eth1State, schedule: Schedule) -> Self {
        Self {
            registry,
            eth1,
            schedule,
        }
    }

    /// The module schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The eth1 state.
    pub fn eth1(&self) -> &Eth1State {
        &self.eth1
    }

    fn range(&self, start: u64, end: u64) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(start).ok()?;
        let end = usize::try_from(end).ok()?;
        (start <= end && end <= self.registry.validators().len()).then_some(start..end)
    }
}

impl StateReader for RegistrySnapshot {
    fn leaf_count(&self) -> u64 {
        u64::from(self.registry.len())
    }

    fn leaf_size(&self) -> u32 {
        // 137 bytes; a constant far below u32::MAX.
        u32::try_from(LEAF_BYTES).unwrap_or(u32::MAX)
    }

    fn read_leaves(&self, start: u64, end: u64) -> Vec<Vec<u8>> {
        let Some(range) = self.range(start, end) else {
            return Vec::new();
        };
        let validators = self.registry.validators().range(range.start, range.end);
        let balances = self.registry.balances().range(range.start, range.end);
        validators
            .zip(balances)
            .map(|(v, b)| v.leaf_bytes(*b).to_vec())
            .collect()
    }

    fn read_leaf_bytes(&self, start: u64, end: u64) -> Vec<u8> {
        let Some(range) = self.range(start, end) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(range.len().saturating_mul(LEAF_BYTES));
        let validators = self.registry.validators().range(range.start, range.end);
        let balances = self.registry.balances().range(range.start, range.end);
        for (v, b) in validators.zip(balances) {
            out.extend_from_slice(&v.leaf_bytes(*b));
        }
        out
    }

    fn range_proof(&self, start: u64, end: u64) -> Vec<u8> {
        self.registry
            .tree()
            .range_proof(start, end)
            .map(|p| p.to_bytes())
            .unwrap_or_default()
    }
}

impl StateLeaves for RegistrySnapshot {
    fn registry_root(&self) -> Hash32 {
        self.registry.root()
    }

    fn extras(&self) -> Vec<u8> {
        super::manifest::encode_extras(&self.eth1, &self.schedule)
    }

    fn state_root(&self) -> Hash32 {
        state_root(&self.registry.root(), &self.eth1, &self.schedule)
    }
}

/// A deterministic synthetic state of `validators` validators (benchmarks, tests, devnets):
/// distinct pubkeys and withdrawal addresses derived from `seed`, balances around 32 ETH, a few
/// slashed or exited validators, and an eth1 state with some votes.
pub fn synthetic_state(
    validators: u32,
    seed: u64,
) -> Result<RegistrySnapshot, crate::state::StateError> {
    use crate::state::{Eth1Data, Eth1Vote, FAR_FUTURE_EPOCH, Validator};
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
    Ok(RegistrySnapshot::new(registry, eth1, Schedule::default()))
}

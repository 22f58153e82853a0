//! The genesis configuration: chain identity, deposit domain, block limits, the eth1 voting
//! period, the initial validators and genesis deposits, from a JSON file or generated for
//! development and benchmarks.
//!
//! Genesis deposits are the deposit contract's first deposits, processed like phase0's
//! `initialize_beacon_state_from_eth1`: a new pubkey needs a valid proof of possession (else the
//! deposit is skipped), a known one is topped up; the genesis `eth1_data` is the contract after
//! them and `eth1_deposit_index` their count.

use std::path::Path;

use rand::{RngCore, SeedableRng};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::block::{Block, BlockBody, BlockHeader, DEFAULT_MAX_DEPOSITS, DepositData, Digest32};
use super::eth1::{Eth1Data, Eth1State};
use crate::hashes::{BlockHash, StateRoot};
use crate::state::{Registry, Schedule, StateError, Validator};

/// Why a genesis configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum GenesisError {
    /// The file could not be read.
    #[error("cannot read genesis file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The JSON is malformed or a field is invalid.
    #[error("genesis file {path}: {message}")]
    Invalid {
        /// The file (or "<embedded>").
        path: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// The validators do not form a valid registry (e.g. a duplicate pubkey).
    #[error("genesis validators: {0}")]
    State(#[from] StateError),
}

/// One validator at genesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenesisValidator {
    /// BLS public key.
    pub pubkey: [u8; 48],
    /// Withdrawal credentials.
    pub withdrawal_credentials: [u8; 32],
    /// Balance in Gwei.
    pub balance: u64,
}

/// The genesis configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Genesis {
    /// Human-readable chain identifier; peers must agree on it.
    pub chain_id: String,
    /// Fork version used in the deposit signing domain.
    pub genesis_fork_version: [u8; 4],
    /// Start of slot 0, in milliseconds since the Unix epoch; slot `s` starts at
    /// `genesis_time_ms + s * slot_ms`. 0 (the embedded dev genesis) counts slots from the epoch.
    pub genesis_time_ms: u64,
    /// Slot length in milliseconds.
    pub slot_ms: u64,
    /// Most deposits one block may carry.
    pub max_deposits_per_block: u16,
    /// Blocks this far below the head are final: no reorganisation reaches them.
    pub finality_depth: u64,
    /// Slots per epoch: a `modnode:deposits@3.0.0` module's `process-epoch` runs on the first
    /// block of each epoch (the first block whose slot is in a later epoch than its parent's).
    /// `None` (a file without the field, every chain before deposits@3): no epoch transitions,
    /// and the configuration hashes exactly as before the field existed.
    pub slots_per_epoch: Option<u64>,
    /// Node ids (ed25519 public keys) of the block producers; slot `s` belongs to
    /// `authorities[s % len]`, and its block must be signed by it. Empty: an unpermissioned
    /// single-node dev chain whose blocks are unsigned.
    pub authorities: Vec<[u8; 32]>,
    /// Slots per eth1 voting period: a vote adopted by a majority of the authorities within one
    /// period becomes the chain's `eth1_data`.
    pub eth1_voting_period_slots: u64,
    /// Initial validators, active from epoch 0.
    pub validators: Vec<GenesisValidator>,
    /// The engine profile (wasmtime major, determinism, fuel costs and budgets) every node of
    /// the chain runs; a file without one gets this build's.
    pub engine_profile: crate::runtime::EngineProfile,
    /// The deposit contract's first deposits, applied after `validators` (checked like any
    /// other deposit).
    pub deposits: Vec<DepositData>,
    /// sha256 of the deposits module that runs from genesis until the chain schedules another
    /// (`None`: whatever deposits engine the node opens the chain with — dev chains and tests).
    pub deposits_module: Option<[u8; 32]>,
    /// Upgrade votes count only when cast more than this many blocks before the operation's
    /// activation height, so nodes have time to fetch, precompile and warm the module; the
    /// readiness gate closes this many blocks before it.
    pub upgrade_lead_blocks: u64,
    /// Votes may name an activation height at most this many blocks after the voting block.
    pub upgrade_max_ahead_blocks: u64,
    /// A pending upgrade or cancel operation expires this many blocks after its first vote.
    pub upgrade_vote_ttl_blocks: u64,
    /// Most pending operations one authority may have voted for at once.
    pub upgrade_open_per_authority: u16,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GenesisFile {
    chain_id: String,
    #[serde(default = "default_fork")]
    genesis_fork_version: String,
    #[serde(default)]
    genesis_time_ms: u64,
    #[serde(default = "default_slot_ms")]
    slot_ms: u64,
    #[serde(default = "default_max_deposits")]
    max_deposits_per_block: u16,
    #[serde(default = "default_finality_depth")]
    finality_depth: u64,
    #[serde(default)]
    slots_per_epoch: Option<u64>,
    #[serde(default)]
    authorities: Vec<String>,
    #[serde(default = "default_eth1_voting_period_slots")]
    eth1_voting_period_slots: u64,
    #[serde(default)]
    validators: Vec<ValidatorEntry>,
    #[serde(default)]
    generated_validators: Option<Generated>,
    #[serde(default)]
    engine_profile: Option<crate::runtime::EngineProfile>,
    #[serde(default)]
    deposits: Vec<DepositEntry>,
    #[serde(default)]
    deposits_module: Option<String>,
    #[serde(default = "default_upgrade_lead_blocks")]
    upgrade_lead_blocks: u64,
    #[serde(default = "default_upgrade_max_ahead_blocks")]
    upgrade_max_ahead_blocks: u64,
    #[serde(default = "default_upgrade_vote_ttl_blocks")]
    upgrade_vote_ttl_blocks: u64,
    #[serde(default = "default_upgrade_open_per_authority")]
    upgrade_open_per_authority: u16,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DepositEntry {
    pubkey: String,
    withdrawal_credentials: String,
    amount: u64,
    signature: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidatorEntry {
    pubkey: String,
    withdrawal_credentials: String,
    balance: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Generated {
    count: u32,
    seed: u64,
}

fn default_fork() -> String {
    "0x00000000".into()
}
fn default_slot_ms() -> u64 {
    2_000
}
fn default_max_deposits() -> u16 {
    DEFAULT_MAX_DEPOSITS
}
/// Default [`Genesis::eth1_voting_period_slots`]: devnet-sized.
pub const DEFAULT_ETH1_VOTING_PERIOD_SLOTS: u64 = 8;
fn default_eth1_voting_period_slots() -> u64 {
    DEFAULT_ETH1_VOTING_PERIOD_SLOTS
}
pub use crate::state::schedule::{
    DEFAULT_UPGRADE_LEAD_BLOCKS, DEFAULT_UPGRADE_MAX_AHEAD_BLOCKS,
    DEFAULT_UPGRADE_OPEN_PER_AUTHORITY, DEFAULT_UPGRADE_VOTE_TTL_BLOCKS,
};
fn default_upgrade_lead_blocks() -> u64 {
    DEFAULT_UPGRADE_LEAD_BLOCKS
}
fn default_upgrade_max_ahead_blocks() -> u64 {
    DEFAULT_UPGRADE_MAX_AHEAD_BLOCKS
}
fn default_upgrade_vote_ttl_blocks() -> u64 {
    DEFAULT_UPGRADE_VOTE_TTL_BLOCKS
}
fn default_upgrade_open_per_authority() -> u16 {
    DEFAULT_UPGRADE_OPEN_PER_AUTHORITY
}
/// Largest [`Genesis::max_deposits_per_block`] a genesis may set. A block must carry every
/// due deposit up to that limit, so every node must be able to receive and process a full
/// block: 4,096 deposits with their 33-hash proofs are ~5 MB, within one 8 MiB network frame,
/// and the deposits call's fuel budget grows with the block
/// (`EngineProfile::deposits_budget_per_deposit`), so no engine in the tree runs out of fuel on
/// a full block, whatever its signatures.
pub const MAX_DEPOSITS_PER_BLOCK: u16 = 4_096;

/// Default [`Genesis::finality_depth`].
pub const DEFAULT_FINALITY_DEPTH: u64 = 32;
fn default_finality_depth() -> u64 {
    DEFAULT_FINALITY_DEPTH
}

/// The embedded development genesis used by `modnode run` without a genesis file.
pub const DEV_GENESIS_JSON: &str = r#"{
  "chain_id": "modnode-dev",
  "genesis_fork_version": "0x00000000",
  "slot_ms": 2000,
  "max_deposits_per_block": 16,
  "finality_depth": 32,
  "generated_validators": { "count": 64, "seed": 1 }
}"#;

fn hex_field<const N: usize>(value: &str, field: &str) -> Result<[u8; N], String> {
    let digits = value.strip_prefix("0x").unwrap_or(value);
    let bytes = hex::decode(digits).map_err(|e| format!("{field}: not hex ({e})"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("{field}: {} bytes, expected {N}", b.len()))
}

impl Genesis {
    /// Parses a genesis JSON document; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Self, GenesisError> {
        let invalid = |message: String| GenesisError::Invalid {
            path: origin.to_string(),
            message,
        };
        let file: GenesisFile = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if file.chain_id.is_empty() || file.chain_id.len() > 64 {
            return Err(invalid("chain_id must be 1 to 64 characters".into()));
        }
        if !(100..=3_600_000).contains(&file.slot_ms) {
            return Err(invalid(format!(
                "slot_ms {} is outside 100..=3600000",
                file.slot_ms
            )));
        }
        if file.max_deposits_per_block == 0 {
            return Err(invalid("max_deposits_per_block must be at least 1".into()));
        }
        if file.upgrade_lead_blocks == 0 {
            return Err(invalid(
                "upgrade_lead_blocks must be at least 1: the readiness gate closes that many \
                 blocks before an activation height"
                    .into(),
            ));
        }
        if file.upgrade_max_ahead_blocks <= file.upgrade_lead_blocks {
            return Err(invalid(format!(
                "upgrade_max_ahead_blocks ({}) must be greater than upgrade_lead_blocks ({}), or \
                 no upgrade could ever be voted",
                file.upgrade_max_ahead_blocks, file.upgrade_lead_blocks
            )));
        }
        if file.upgrade_vote_ttl_blocks == 0 || file.upgrade_open_per_authority == 0 {
            return Err(invalid(
                "upgrade_vote_ttl_blocks and upgrade_open_per_authority must be at least 1".into(),
            ));
        }
        if file.max_deposits_per_block > MAX_DEPOSITS_PER_BLOCK {
            return Err(invalid(format!(
                "max_deposits_per_block {} is above {MAX_DEPOSITS_PER_BLOCK}, the most a block \
                 may carry (a full block must fit one network frame); lower it",
                file.max_deposits_per_block
            )));
        }
        if file.finality_depth == 0 {
            return Err(invalid("finality_depth must be at least 1".into()));
        }
        if file.slots_per_epoch == Some(0) {
            return Err(invalid(
                "slots_per_epoch must be at least 1 (or absent: no epoch transitions)".into(),
            ));
        }
        if file.eth1_voting_period_slots == 0 {
            return Err(invalid(
                "eth1_voting_period_slots must be at least 1".into(),
            ));
        }
        let genesis_fork_version =
            hex_field::<4>(&file.genesis_fork_version, "genesis_fork_version").map_err(invalid)?;
        let mut authorities = Vec::with_capacity(file.authorities.len());
        for (i, a) in file.authorities.iter().enumerate() {
            let id: [u8; 32] = hex_field(a, &format!("authorities[{i}]")).map_err(invalid)?;
            if authorities.contains(&id) {
                return Err(invalid(format!("authorities[{i}]: {a} is listed twice")));
            }
            authorities.push(id);
        }
        let mut validators = Vec::with_capacity(file.validators.len());
        for (i, v) in file.validators.iter().enumerate() {
            validators.push(GenesisValidator {
                pubkey: hex_field(&v.pubkey, &format!("validators[{i}].pubkey"))
                    .map_err(invalid)?,
                withdrawal_credentials: hex_field(
                    &v.withdrawal_credentials,
                    &format!("validators[{i}].withdrawal_credentials"),
                )
                .map_err(invalid)?,
                balance: v.balance,
            });
        }
        if let Some(generated) = file.generated_validators {
            validators.extend(generated_validators(generated.count, generated.seed));
        }
        let mut deposits = Vec::with_capacity(file.deposits.len());
        for (i, d) in file.deposits.iter().enumerate() {
            let at = |field: &str| format!("deposits[{i}].{field}");
            deposits.push(DepositData {
                pubkey: hex_field(&d.pubkey, &at("pubkey")).map_err(invalid)?,
                withdrawal_credentials: hex_field(
                    &d.withdrawal_credentials,
                    &at("withdrawal_credentials"),
                )
                .map_err(invalid)?,
                amount: d.amount,
                signature: hex_field(&d.signature, &at("signature")).map_err(invalid)?,
            });
        }
        let deposits_module = file
            .deposits_module
            .as_deref()
            .map(|h| hex_field::<32>(h, "deposits_module"))
            .transpose()
            .map_err(invalid)?;
        let genesis = Self {
            chain_id: file.chain_id,
            genesis_fork_version,
            genesis_time_ms: file.genesis_time_ms,
            slot_ms: file.slot_ms,
            max_deposits_per_block: file.max_deposits_per_block,
            finality_depth: file.finality_depth,
            slots_per_epoch: file.slots_per_epoch,
            authorities,
            eth1_voting_period_slots: file.eth1_voting_period_slots,
            validators,
            engine_profile: file
                .engine_profile
                .unwrap_or_else(|| crate::runtime::EngineProfile::build().clone()),
            deposits,
            deposits_module,
            upgrade_lead_blocks: file.upgrade_lead_blocks,
            upgrade_max_ahead_blocks: file.upgrade_max_ahead_blocks,
            upgrade_vote_ttl_blocks: file.upgrade_vote_ttl_blocks,
            upgrade_open_per_authority: file.upgrade_open_per_authority,
        };
        genesis.registry()?;
        Ok(genesis)
    }

    /// Reads a genesis file.
    pub fn from_file(path: &Path) -> Result<Self, GenesisError> {
        let text = std::fs::read_to_string(path).map_err(|source| GenesisError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// The embedded development genesis.
    pub fn dev() -> Self {
        match Self::from_json(DEV_GENESIS_JSON, "<embedded dev genesis>") {
            Ok(g) => g,
            // The embedded document is fixed and covered by tests.
            Err(e) => unreachable!("embedded dev genesis is invalid: {e}"),
        }
    }

    /// A development genesis with `count` generated validators (random pubkeys — fine for
    /// validators that already exist; they never sign anything here).
    pub fn generated(chain_id: &str, count: u32, seed: u64) -> Self {
        Self {
            chain_id: chain_id.to_string(),
            genesis_fork_version: [0; 4],
            genesis_time_ms: 0,
            slot_ms: default_slot_ms(),
            max_deposits_per_block: DEFAULT_MAX_DEPOSITS,
            finality_depth: DEFAULT_FINALITY_DEPTH,
            slots_per_epoch: None,
            authorities: Vec::new(),
            eth1_voting_period_slots: DEFAULT_ETH1_VOTING_PERIOD_SLOTS,
            validators: generated_validators(count, seed).collect(),
            engine_profile: crate::runtime::EngineProfile::build().clone(),
            deposits: Vec::new(),
            deposits_module: None,
            upgrade_lead_blocks: DEFAULT_UPGRADE_LEAD_BLOCKS,
            upgrade_max_ahead_blocks: DEFAULT_UPGRADE_MAX_AHEAD_BLOCKS,
            upgrade_vote_ttl_blocks: DEFAULT_UPGRADE_VOTE_TTL_BLOCKS,
            upgrade_open_per_authority: DEFAULT_UPGRADE_OPEN_PER_AUTHORITY,
        }
    }

    /// Whether the block at `slot`, child of a block at `parent_slot`, is the first of an
    /// epoch (its slot's epoch is later than its parent's). Never, without `slots_per_epoch`.
    pub fn starts_epoch(&self, parent_slot: u64, slot: u64) -> bool {
        self.slots_per_epoch
            .and_then(|n| Some(slot.checked_div(n)? > parent_slot.checked_div(n)?))
            .unwrap_or(false)
    }

    /// The chain's governance rules for upgrade votes (see [`crate::state::schedule`]).
    /// [`Governance::defaults`](crate::state::schedule::Governance::defaults) are a genesis
    /// file's defaults.
    pub fn governance(&self) -> crate::state::schedule::Governance {
        crate::state::schedule::Governance {
            authorities: self.authorities.len(),
            lead: self.upgrade_lead_blocks,
            max_ahead: self.upgrade_max_ahead_blocks,
            vote_ttl: self.upgrade_vote_ttl_blocks,
            open_per_authority: usize::from(self.upgrade_open_per_authority),
        }
    }

    /// Index of the authority that proposes at `slot`, if the chain has authorities.
    pub fn proposer_for(&self, slot: u64) -> Option<u32> {
        let n = u64::try_from(self.authorities.len())
            .ok()
            .filter(|&n| n > 0)?;
        u32::try_from(slot.checked_rem(n)?).ok()
    }

    /// The slot in progress at `unix_ms` (0 before genesis).
    pub fn slot_at(&self, unix_ms: u64) -> u64 {
        unix_ms
            .saturating_sub(self.genesis_time_ms)
            .checked_div(self.slot_ms)
            .unwrap_or(0)
    }

    /// When `slot` starts, in milliseconds since the Unix epoch.
    pub fn slot_start_ms(&self, slot: u64) -> u64 {
        self.genesis_time_ms
            .saturating_add(slot.saturating_mul(self.slot_ms))
    }

    /// The genesis registry: the initial validators, then the genesis deposits.
    pub fn registry(&self) -> Result<Registry, StateError> {
        let mut records: Vec<Validator> = self
            .validators
            .iter()
            .map(|v| genesis_record(v.pubkey, v.withdrawal_credentials, v.balance))
            .collect();
        let mut balances: Vec<u64> = self.validators.iter().map(|v| v.balance).collect();
        if !self.deposits.is_empty() {
            let mut index: std::collections::HashMap<[u8; 48], usize> = records
                .iter()
                .enumerate()
                .map(|(i, v)| (v.pubkey, i))
                .collect();
            for d in &self.deposits {
                match index.get(&d.pubkey) {
                    Some(&i) => {
                        let name = u32::try_from(i).unwrap_or(u32::MAX);
                        let balance = balances.get_mut(i).ok_or(StateError::UnknownIndex(name))?;
                        *balance = balance
                            .checked_add(d.amount)
                            .ok_or(StateError::BalanceOverflow(name))?;
                    }
                    None => {
                        let root = d.signing_root(self.genesis_fork_version);
                        if crate::crypto::verify(&d.pubkey, &root, &d.signature) {
                            index.insert(d.pubkey, records.len());
                            records.push(genesis_record(
                                d.pubkey,
                                d.withdrawal_credentials,
                                d.amount,
                            ));
                            balances.push(d.amount);
                        }
                    }
                }
            }
        }
        Registry::from_parts(records, balances)
    }

    /// The genesis eth1 state: the deposit contract after the genesis deposits, all applied.
    pub fn eth1_state(&self) -> Eth1State {
        let mut tree = deposits_common::tree::reference::NaiveDepositTree::new();
        for d in &self.deposits {
            tree.push(d.leaf());
        }
        let data = Eth1Data {
            deposit_root: tree.root(),
            deposit_count: tree.len(),
            block_hash: [0; 32],
        };
        Eth1State::genesis(data, tree.len())
    }

    /// The genesis module schedule: the deposits module named by the genesis, if any.
    pub fn schedule(&self) -> Schedule {
        let initial: Vec<(crate::runtime::Kind, crate::hashes::ModuleHash)> = self
            .deposits_module
            .iter()
            .map(|&h| (crate::runtime::Kind::Deposits, crate::hashes::ModuleHash(h)))
            .collect();
        Schedule::genesis(&initial)
    }

    /// Hash of everything in the configuration that is not in the genesis state.
    pub fn config_hash(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"modnode-genesis-v2");
        h.update((self.chain_id.len() as u64).to_le_bytes());
        h.update(self.chain_id.as_bytes());
        h.update(self.genesis_fork_version);
        h.update(self.genesis_time_ms.to_le_bytes());
        h.update(self.slot_ms.to_le_bytes());
        h.update(self.max_deposits_per_block.to_le_bytes());
        h.update(self.finality_depth.to_le_bytes());
        h.update((self.authorities.len() as u64).to_le_bytes());
        for authority in &self.authorities {
            h.update(authority);
        }
        h.update(self.engine_profile.hash());
        h.update(self.eth1_voting_period_slots.to_le_bytes());
        h.update(self.upgrade_lead_blocks.to_le_bytes());
        h.update(self.upgrade_max_ahead_blocks.to_le_bytes());
        h.update(self.upgrade_vote_ttl_blocks.to_le_bytes());
        h.update(self.upgrade_open_per_authority.to_le_bytes());
        // Absent, it adds nothing: every genesis before the field hashes as it did.
        if let Some(slots) = self.slots_per_epoch {
            h.update(b"slots_per_epoch");
            h.update(slots.to_le_bytes());
        }
        h.finalize().into()
    }

    /// The genesis block for a registry built by [`Genesis::registry`] and the eth1 state of
    /// [`Genesis::eth1_state`].
    pub fn block(&self, registry: &Registry) -> Block {
        let eth1 = self.eth1_state();
        let body = BlockBody {
            eth1_vote: eth1.eth1_data,
            deposits: Vec::new(),
            ..BlockBody::default()
        };
        Block {
            header: BlockHeader {
                parent_hash: BlockHash::new(self.config_hash()),
                height: 0,
                slot: 0,
                proposer: 0,
                state_root: StateRoot::new(crate::state::state_root(
                    &registry.root(),
                    &eth1,
                    &self.schedule(),
                )),
                body_root: body.root(),
            },
            body,
            seal: super::block::Seal::Unsigned,
        }
    }
}

fn genesis_record(pubkey: [u8; 48], withdrawal_credentials: [u8; 32], balance: u64) -> Validator {
    Validator {
        pubkey,
        withdrawal_credentials,
        effective_balance: deposits_effective_balance(balance),
        slashed: false,
        activation_eligibility_epoch: 0,
        activation_epoch: 0,
        exit_epoch: crate::state::FAR_FUTURE_EPOCH,
        withdrawable_epoch: crate::state::FAR_FUTURE_EPOCH,
    }
}

fn deposits_effective_balance(amount: u64) -> u64 {
    const INCREMENT: u64 = 1_000_000_000;
    amount
        .saturating_sub(amount.checked_rem(INCREMENT).unwrap_or(0))
        .min(32 * INCREMENT)
}

fn generated_validators(count: u32, seed: u64) -> impl Iterator<Item = GenesisValidator> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count).map(move |_| {
        let mut pubkey = [0u8; 48];
        rng.fill_bytes(&mut pubkey);
        let mut withdrawal_credentials = [0u8; 32];
        rng.fill_bytes(&mut withdrawal_credentials);
        GenesisValidator {
            pubkey,
            withdrawal_credentials,
            balance: 32_000_000_000,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_per_epoch_is_optional_and_absent_keeps_the_config_hash() {
        let dev = Genesis::dev();
        assert_eq!(dev.slots_per_epoch, None);
        // The embedded dev genesis's hash as released: an absent field adds no bytes.
        assert_eq!(
            hex::encode(dev.config_hash()),
            "62b49cb759d1d23326f9bc18f85f7134f85367dd7c953d365cfca96597fa0f10"
        );
        let with = DEV_GENESIS_JSON.replace(
            r#""finality_depth": 32,"#,
            r#""finality_depth": 32, "slots_per_epoch": 8,"#,
        );
        let epochs = Genesis::from_json(&with, "t").unwrap();
        assert_eq!(epochs.slots_per_epoch, Some(8));
        assert_ne!(epochs.config_hash(), dev.config_hash());
        // The first block of an epoch is the first whose slot is in a later epoch than its
        // parent's, empty slots between them or not.
        assert!(epochs.starts_epoch(7, 8));
        assert!(!epochs.starts_epoch(8, 9));
        assert!(epochs.starts_epoch(5, 17));
        assert!(!dev.starts_epoch(7, 8));
        let zero = DEV_GENESIS_JSON.replace(
            r#""finality_depth": 32,"#,
            r#""finality_depth": 32, "slots_per_epoch": 0,"#,
        );
        let err = Genesis::from_json(&zero, "t").unwrap_err().to_string();
        assert!(err.contains("slots_per_epoch"), "{err}");
    }

    #[test]
    fn dev_genesis_parses_and_is_stable() {
        let a = Genesis::dev();
        assert_eq!(a.validators.len(), 64);
        assert_eq!(a, Genesis::dev());
        let reg = a.registry().unwrap();
        assert_eq!(
            a.block(&reg).hash(),
            Genesis::dev()
                .block(&Genesis::dev().registry().unwrap())
                .hash()
        );
    }

    #[test]
    fn genesis_deposits_are_checked_like_any_other() {
        use crate::chain::workload;
        let fork = [0; 4];
        let valid = workload::new_validator(1, 32_000_000_000, fork);
        let forged = workload::unsigned(workload::keypair(2).pubkey, 32_000_000_000);
        let top_up = workload::unsigned(valid.pubkey, 5);
        let entry = |d: &DepositData| {
            format!(
                r#"{{"pubkey": "{}", "withdrawal_credentials": "{}", "amount": {}, "signature": "{}"}}"#,
                hex::encode(d.pubkey),
                hex::encode(d.withdrawal_credentials),
                d.amount,
                hex::encode(d.signature)
            )
        };
        let json = format!(
            r#"{{"chain_id": "x", "generated_validators": {{"count": 2, "seed": 1}}, "deposits": [{}, {}, {}]}}"#,
            entry(&valid),
            entry(&forged),
            entry(&top_up)
        );
        let genesis = Genesis::from_json(&json, "g.json").unwrap();
        let registry = genesis.registry().unwrap();
        // The forged deposit is skipped; the top-up needs no signature.
        assert_eq!(registry.len(), 3);
        assert_eq!(registry.validator(2).unwrap().pubkey, valid.pubkey);
        assert_eq!(registry.balances().get(2), Some(&32_000_000_005));
        let eth1 = genesis.eth1_state();
        assert_eq!((eth1.eth1_data.deposit_count, eth1.deposit_index), (3, 3));
        let mut log = workload::DevDepositLog::new();
        for d in [valid, forged, top_up] {
            log.push(d);
        }
        assert_eq!(eth1.eth1_data.deposit_root, log.eth1_data().deposit_root);
        // Without deposits the contract is empty.
        let dev = Genesis::dev().eth1_state();
        assert_eq!(
            dev.eth1_data.deposit_root,
            crate::consensus::eth1::empty_deposit_root()
        );
        assert_eq!(dev.deposit_index, 0);
    }

    #[test]
    fn bad_files_name_the_field() {
        let err = Genesis::from_json(
            r#"{"chain_id": "x", "genesis_fork_version": "0x0000"}"#,
            "g.json",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("g.json: genesis_fork_version: 2 bytes, expected 4"),
            "{err}"
        );
        let err = Genesis::from_json(
            r#"{"chain_id": "x", "validators": [{"pubkey": "zz", "withdrawal_credentials": "00", "balance": 1}]}"#,
            "g.json",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("validators[0].pubkey: not hex"),
            "{err}"
        );
        let err = Genesis::from_json(r#"{"chain_id": "x", "bogus": 1}"#, "g.json").unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
        let dup = format!(
            r#"{{"chain_id": "x", "validators": [{0}, {0}]}}"#,
            format_args!(
                r#"{{"pubkey": "{}", "withdrawal_credentials": "{}", "balance": 1}}"#,
                "11".repeat(48),
                "00".repeat(32)
            )
        );
        assert!(matches!(
            Genesis::from_json(&dup, "g.json"),
            Err(GenesisError::State(_))
        ));
    }
}

//! The state roots of generated chains, pinned: seeded chains — new validators, top-ups,
//! deposits with bad signatures, lagging and fresh eth1 votes, and (one flavour) an upgrade
//! vote switching deposits-v2 to deposits-v3's queue — built and imported through
//! `Chain::import`, their per-height roots compared with `fixtures/transition_roots.txt`; and
//! `consensus::apply_block` folded over the same blocks from the genesis state gives the same
//! roots, on the recorded seeds and on generated ones.
//!
//! The fixture was recorded with the code before the transition became one function (commit
//! `95dd4c1`), so the roots stay what they were whatever path computes them now. To
//! regenerate it (only when a change of the roots is intended):
//! `MODNODE_RECORD_ROOTS=1 cargo test -p modnode --test it transition_roots::recorded`.

use std::collections::HashMap;
use std::sync::Arc;

use modnode::chain::block::{Block, StateRoot};
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::workload::{self, DevDepositLog};
use modnode::chain::{Chain, DepositEngine, DepositModules};
use modnode::consensus::{Rules, apply_block};
use modnode::hashes::ModuleHash;
use modnode::runtime::Kind;
use modnode::state::UpgradeOp;
use modnode::store::MemoryStore;
use proptest::prelude::*;

use super::{deposits_module, runtime};

const ETH: u64 = 1_000_000_000;
const FIXTURE: &str = "tests/fixtures/transition_roots.txt";

/// Which engines a generated chain runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavour {
    /// The native reference throughout.
    Native,
    /// deposits-v2, switched by an upgrade vote to deposits-v3 (the queue, epochs) at
    /// [`SWITCH_AT`].
    Switch,
}

/// The height a [`Flavour::Switch`] chain runs deposits-v3 from.
pub(super) const SWITCH_AT: u64 = 6;

/// The seeds and flavours the fixture holds.
pub(super) const RECORDED: &[(u64, Flavour, u64)] = &[
    (1, Flavour::Native, 24),
    (2, Flavour::Native, 24),
    (3, Flavour::Native, 24),
    (4, Flavour::Native, 24),
    (5, Flavour::Switch, 16),
];

/// A small deterministic generator (splitmix64).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Deposits modules by hash (the node's prepared modules).
pub(super) struct Engines(pub(super) HashMap<ModuleHash, DepositEngine>);

impl DepositModules for Engines {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.0.get(hash).cloned()
    }
}

/// A generated chain: its genesis, the engine it was opened with, the modules its schedule
/// may name, its blocks and the head's state root after each.
pub(super) struct Generated {
    pub(super) genesis: Genesis,
    pub(super) engine: DepositEngine,
    pub(super) modules: Option<Arc<Engines>>,
    pub(super) blocks: Vec<Block>,
    pub(super) roots: Vec<StateRoot>,
}

/// Builds and imports `blocks` seeded blocks through `Chain::import` (see the module docs).
pub(super) fn generate(seed: u64, flavour: Flavour, blocks: u64) -> Generated {
    let mut rng = Rng::new(seed);
    let mut genesis = Genesis::generated("transition-roots", 8, seed);
    let (engine, modules) = match flavour {
        Flavour::Native => {
            let verification = if rng.below(2) == 0 {
                Verification::OneByOne
            } else {
                Verification::Batched
            };
            (DepositEngine::Native(verification), None)
        }
        Flavour::Switch => {
            let rt = runtime(10_000_000_000);
            let v2 = deposits_module(&rt, "deposits-v2");
            let v3 = deposits_module(&rt, "deposits-v3");
            genesis.slots_per_epoch = Some(4);
            genesis.finality_depth = 2;
            genesis.upgrade_lead_blocks = 2;
            genesis.deposits_module = Some(v2.hash().0);
            let modules = Engines(HashMap::from([(
                v3.hash(),
                DepositEngine::Module(Box::new(v3)),
            )]));
            (DepositEngine::Module(Box::new(v2)), Some(Arc::new(modules)))
        }
    };
    let mut chain = Chain::open(
        Arc::new(MemoryStore::new()),
        genesis.clone(),
        engine.clone(),
    )
    .unwrap();
    if let Some(modules) = &modules {
        chain.set_deposit_modules(modules.clone());
        let v3 = *modules.0.keys().next().unwrap();
        chain
            .propose_upgrade(UpgradeOp {
                kind: Kind::Deposits,
                module: v3,
                height: SWITCH_AT,
            })
            .unwrap();
    }
    let mut pubkeys: Vec<[u8; 48]> = genesis.validators.iter().map(|v| v.pubkey).collect();
    let mut log = DevDepositLog::new();
    let mut next_key = seed.wrapping_mul(1_000_000);
    let mut out = Vec::new();
    let mut roots = Vec::new();
    for _ in 0..blocks {
        // New validators, top-ups of known ones and deposits whose signature is garbage.
        for _ in 0..rng.below(4) {
            next_key += 1;
            let amount = (16 + rng.below(24)) * ETH;
            let deposit = workload::new_validator(next_key, amount, genesis.genesis_fork_version);
            pubkeys.push(deposit.pubkey);
            log.push(deposit);
        }
        for _ in 0..rng.below(3) {
            let index = rng.below(pubkeys.len() as u64) as usize;
            log.push(workload::unsigned(pubkeys[index], (1 + rng.below(8)) * ETH));
        }
        if rng.below(5) == 0 {
            next_key += 1;
            let stranger = workload::keypair(next_key).pubkey;
            log.push(workload::unsigned(stranger, 32 * ETH));
        }
        // A vote that lags behind the log now and then: fewer deposits become due.
        let agreed = chain.eth1_data().deposit_count;
        let count = if rng.below(3) == 0 && log.len() > agreed {
            agreed + rng.below(log.len() - agreed + 1)
        } else {
            log.len()
        };
        let vote = log.eth1_data_at(count).unwrap();
        let slot = chain.head().slot + 1 + rng.below(2);
        let block = chain.build_block_from(slot, 0, vote, &log).unwrap();
        chain.import(&block).unwrap();
        roots.push(chain.head().state_root);
        out.push(block);
    }
    Generated {
        genesis,
        engine,
        modules,
        blocks: out,
        roots,
    }
}

fn line(seed: u64, height: usize, root: &StateRoot) -> String {
    format!("{seed} {height} {}", hex::encode(root))
}

fn fixture_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
}

/// The recorded roots: `(seed, height) → root`.
pub(super) fn recorded_roots() -> HashMap<(u64, u64), [u8; 32]> {
    let text = std::fs::read_to_string(fixture_path()).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.split_whitespace();
            let seed = parts.next().unwrap().parse().unwrap();
            let height = parts.next().unwrap().parse().unwrap();
            let root = hex::decode(parts.next().unwrap()).unwrap();
            ((seed, height), root.try_into().unwrap())
        })
        .collect()
}

#[test]
fn recorded() {
    let record = std::env::var_os("MODNODE_RECORD_ROOTS").is_some();
    let mut lines = vec![
        "# Per-height state roots of the chains `host/tests/it/transition_roots.rs` generates:"
            .to_string(),
        "# `seed height root`. Recorded through `Chain::import` at commit 95dd4c1 (before"
            .to_string(),
        "# `consensus::apply_block`); regenerate with".to_string(),
        "# MODNODE_RECORD_ROOTS=1 cargo test -p modnode --test it transition_roots::recorded"
            .to_string(),
    ];
    let recorded = if record {
        HashMap::new()
    } else {
        recorded_roots()
    };
    for &(seed, flavour, blocks) in RECORDED {
        let generated = generate(seed, flavour, blocks);
        for (i, root) in generated.roots.iter().enumerate() {
            let height = i + 1;
            if record {
                lines.push(line(seed, height, root));
            } else {
                assert_eq!(
                    recorded.get(&(seed, height as u64)).map(hex::encode),
                    Some(hex::encode(root)),
                    "seed {seed} ({flavour:?}) height {height}"
                );
            }
        }
    }
    if record {
        lines.push(String::new());
        std::fs::create_dir_all(fixture_path().parent().unwrap()).unwrap();
        std::fs::write(fixture_path(), lines.join("\n")).unwrap();
    }
}

/// The per-height roots of `consensus::apply_block` folded over `generated`'s blocks from the
/// genesis state (the state a fresh chain of its genesis opens at).
fn folded_roots(generated: &Generated) -> Vec<StateRoot> {
    let fresh = Chain::open(
        Arc::new(MemoryStore::new()),
        generated.genesis.clone(),
        generated.engine.clone(),
    )
    .unwrap();
    let mut state = fresh.snapshot();
    let mut parent_slot = fresh.head().slot;
    let modules: Option<Arc<dyn DepositModules>> = generated
        .modules
        .clone()
        .map(|m| m as Arc<dyn DepositModules>);
    let rules = Rules::new(&generated.genesis, &generated.engine, modules.as_ref());
    let mut roots = Vec::new();
    for block in &generated.blocks {
        let applied = apply_block(&rules, &state, parent_slot, block).unwrap();
        assert_eq!(applied.state.block_hash(), block.hash());
        state = applied.state;
        parent_slot = block.header.slot;
        roots.push(state.root());
    }
    if generated.modules.is_some() {
        // The switch happened: the last state carries deposits@3's queue.
        assert!(state.pending().is_some());
    }
    roots
}

#[test]
fn apply_block_gives_the_recorded_roots() {
    let recorded = recorded_roots();
    for &(seed, flavour, blocks) in RECORDED {
        let generated = generate(seed, flavour, blocks);
        for (i, root) in folded_roots(&generated).iter().enumerate() {
            let height = i as u64 + 1;
            assert_eq!(
                recorded.get(&(seed, height)).map(hex::encode),
                Some(hex::encode(root)),
                "seed {seed} ({flavour:?}) height {height}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn apply_block_gives_the_roots_import_gives(seed in 100u64..1_000_000, blocks in 1u64..20) {
        let generated = generate(seed, Flavour::Native, blocks);
        prop_assert_eq!(folded_roots(&generated), generated.roots.clone());
    }
}

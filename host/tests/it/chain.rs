//! Block import: the spec's traps, forced and proven deposits, invalid blocks leaving no trace,
//! restarts, corruption, seals.

use std::sync::Arc;

use modnode::chain::block::DepositData;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::workload::DevDepositLog;
use modnode::chain::{Chain, DepositEngine, ImportError, OpenError, workload};
use modnode::consensus::{DepositOutcome as Outcome, DepositRejection};
use modnode::state::RegistryRead;
use modnode::store::{KvStore, MemoryStore, SledStore, WriteBatch, keys};

use super::{deposits_module, runtime};

const ETH: u64 = 1_000_000_000;
const FORK: [u8; 4] = [0; 4];

fn engines() -> Vec<(&'static str, DepositEngine)> {
    let rt = runtime(1_000_000_000);
    vec![
        (
            "v1",
            DepositEngine::Module(Box::new(deposits_module(&rt, "deposits-v1"))),
        ),
        (
            "v2",
            DepositEngine::Module(Box::new(deposits_module(&rt, "deposits-v2"))),
        ),
        ("native", DepositEngine::Native(Verification::OneByOne)),
        (
            "native-batched",
            DepositEngine::Native(Verification::Batched),
        ),
    ]
}

fn genesis() -> Genesis {
    Genesis::generated("test", 8, 7)
}

fn chain(engine: DepositEngine) -> Chain {
    Chain::open(Arc::new(MemoryStore::new()), genesis(), engine).unwrap()
}

/// Opens (or reopens) the test chain on sled in `dir`, running deposits-v2.
fn open_sled(dir: &std::path::Path, rt: &modnode::runtime::Runtime) -> Chain {
    let engine = DepositEngine::Module(Box::new(deposits_module(rt, "deposits-v2")));
    Chain::open(Arc::new(SledStore::open(dir).unwrap()), genesis(), engine).unwrap()
}

/// Pubkeys of the genesis validators.
fn genesis_pubkeys() -> Vec<[u8; 48]> {
    genesis().validators.iter().map(|v| v.pubkey).collect()
}

/// Adds `deposits` to the contract `log`, then builds the next block voting the contract's
/// state (so they are due) and carrying them.
fn build(
    chain: &Chain,
    log: &mut DevDepositLog,
    slot: u64,
    deposits: Vec<DepositData>,
) -> Result<modnode::chain::block::Block, modnode::chain::BuildError> {
    for d in deposits {
        log.push(d);
    }
    chain.build_block_from(slot, 0, log.eth1_data(), log)
}

/// Builds and imports one block with `deposits`, returning the outcomes.
fn import(chain: &mut Chain, log: &mut DevDepositLog, deposits: Vec<DepositData>) -> Vec<Outcome> {
    let slot = chain.head().slot + 1;
    let block = build(chain, log, slot, deposits).unwrap();
    chain.import(&block).unwrap().outcomes
}

/// 48 bytes that decompress to a point on the curve that is not in the G1 subgroup: found by
/// trying x coordinates (about half are on the curve; almost none of those are in the subgroup).
fn non_subgroup_pubkey() -> [u8; 48] {
    for seed in 0u8..=255 {
        let mut bytes = [seed; 48];
        bytes[0] = 0x80 | (seed & 0x1f); // compressed, not infinity, x below the field modulus
        let on_curve = blst::min_pk::PublicKey::from_bytes(&bytes).is_ok();
        let in_subgroup = blst::min_pk::PublicKey::key_validate(&bytes).is_ok();
        if on_curve && !in_subgroup {
            return bytes;
        }
    }
    panic!("no on-curve, out-of-subgroup x found")
}

#[test]
fn spec_traps_hold_for_every_engine() {
    let existing = genesis().validators[3].pubkey;
    let outside_subgroup = non_subgroup_pubkey();
    let mut infinity = [0u8; 48];
    infinity[0] = 0xc0;
    let a = workload::new_validator(1, 40 * ETH + 123, FORK);
    let b = workload::new_validator(2, ETH / 2, FORK);
    let mut b_bad = b;
    b_bad.signature = a.signature;
    let mut wrong_fork = workload::new_validator(3, 32 * ETH, [1, 0, 0, 0]);
    wrong_fork.amount = 32 * ETH;
    let block = vec![
        a,                                        // new, capped effective balance
        workload::unsigned(a.pubkey, 7), // same pubkey later in the block: top-up, no signature check
        workload::unsigned(existing, 5 * ETH), // existing validator: top-up, no signature check
        b_bad,                           // invalid signature: skipped
        b,                               // invalid-then-valid: creates
        workload::unsigned([0x11; 48], 32 * ETH), // undecodable pubkey: invalid, no crash
        workload::unsigned(infinity, 32 * ETH), // point at infinity: invalid
        workload::unsigned(outside_subgroup, 1), // on the curve, outside the subgroup: invalid
        wrong_fork,                      // signed for another fork: invalid
        workload::new_validator(4, 0, FORK), // zero amount: created with zero balance
    ];
    let mut roots = Vec::new();
    for (name, engine) in engines() {
        let mut chain = chain(engine);
        let outcomes = import(&mut chain, &mut DevDepositLog::new(), block.clone());
        assert_eq!(
            outcomes,
            vec![
                Outcome::Created(8),
                Outcome::ToppedUp(8),
                Outcome::ToppedUp(3),
                Outcome::InvalidSignature,
                Outcome::Created(9),
                Outcome::InvalidSignature,
                Outcome::InvalidSignature,
                Outcome::InvalidSignature,
                Outcome::InvalidSignature,
                Outcome::Created(10),
            ],
            "{name}"
        );
        let registry = chain.registry();
        let registry = &*registry;
        assert_eq!(
            registry.validator(8).unwrap().effective_balance,
            32 * ETH,
            "{name}"
        );
        assert_eq!(registry.balance(8), Some(40 * ETH + 123 + 7), "{name}");
        assert_eq!(
            registry.validator(9).unwrap().effective_balance,
            0,
            "{name}: 0.5 ETH rounds down to 0"
        );
        assert_eq!(registry.balance(3), Some(37 * ETH), "{name}");
        assert_eq!(registry.index_of(&b.pubkey), Some(9), "{name}");
        assert_eq!(registry.balance(10), Some(0), "{name}");
        roots.push(chain.head().state_root);
    }
    assert!(
        roots.windows(2).all(|w| w[0] == w[1]),
        "engines disagree on the state root"
    );
}

#[test]
fn invalid_blocks_change_nothing() {
    for (name, engine) in engines() {
        let mut chain = chain(engine);
        let before = (chain.head(), chain.registry().as_ref().clone());
        let mut log = DevDepositLog::new();
        let good = build(
            &chain,
            &mut log,
            1,
            vec![workload::new_validator(9, 32 * ETH, FORK)],
        )
        .unwrap();

        let mut wrong_root = good.clone();
        wrong_root.header.state_root = modnode::hashes::StateRoot::new([7; 32]);
        assert!(
            matches!(
                chain.import(&wrong_root),
                Err(ImportError::StateRootMismatch { .. })
            ),
            "{name}"
        );

        let mut wrong_parent = good.clone();
        wrong_parent.header.parent_hash = modnode::hashes::BlockHash::new([1; 32]);
        assert!(
            matches!(
                chain.import(&wrong_parent),
                Err(ImportError::NotNext { .. })
            ),
            "{name}"
        );

        let mut wrong_body = good.clone();
        wrong_body.body.deposits[0].data.amount += 1;
        assert!(
            matches!(chain.import(&wrong_body), Err(ImportError::BadBody { .. })),
            "{name}"
        );

        let overflow = vec![workload::unsigned(genesis().validators[0].pubkey, u64::MAX)];
        assert!(
            matches!(
                build(&chain, &mut DevDepositLog::new(), 1, overflow),
                Err(modnode::chain::BuildError::Invalid(
                    ImportError::Rejected { .. }
                ))
            ),
            "{name}"
        );

        assert_eq!(chain.head(), before.0, "{name}");
        assert_eq!(*chain.registry(), before.1, "{name}");
        chain.import(&good).unwrap();
        assert_eq!(chain.head().height, 1);
    }
}

#[test]
fn state_and_index_survive_a_restart_on_sled() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(1_000_000_000);
    let open = || open_sled(dir.path(), &rt);
    let existing = genesis_pubkeys();
    let (head, registry, eth1) = {
        let mut chain = open();
        let mut log = DevDepositLog::new();
        for height in 1..=4 {
            import(
                &mut chain,
                &mut log,
                workload::dev_block(height, &existing, FORK),
            );
        }
        (
            chain.head(),
            chain.registry().as_ref().clone(),
            chain.eth1_state().clone(),
        )
    };
    let chain = open();
    assert_eq!(chain.head(), head);
    assert_eq!(*chain.eth1_state(), eth1);
    assert!(eth1.deposit_index > 0);
    assert_eq!(eth1.deposit_index, eth1.eth1_data.deposit_count);
    let reopened = chain.registry();
    let reopened = &*reopened;
    assert_eq!(*reopened, registry);
    assert_eq!(
        modnode::state::state_root(&reopened.root(), &chain.eth1_state(), &chain.schedule()),
        head.state_root.to_bytes()
    );
    // The index was rebuilt: every validator is found at its position, and unknown keys are not.
    for (i, v) in registry.validators().iter().enumerate() {
        assert_eq!(reopened.index_of(&v.pubkey), Some(i as u32));
    }
    assert_eq!(reopened.index_of(&[0x42; 48]), None);
    assert_eq!(chain.block_at(4).unwrap().unwrap().hash(), head.hash);
}

#[test]
fn corrupted_store_and_wrong_genesis_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(1_000_000_000);
    let engine = || DepositEngine::Module(Box::new(deposits_module(&rt, "deposits-v1")));
    {
        let store = Arc::new(SledStore::open(dir.path()).unwrap());
        let mut chain = Chain::open(store.clone(), genesis(), engine()).unwrap();
        import(
            &mut chain,
            &mut DevDepositLog::new(),
            vec![workload::new_validator(5, 32 * ETH, FORK)],
        );
    }
    let other = Genesis::generated("other", 8, 7);
    let err = Chain::open(
        Arc::new(SledStore::open(dir.path()).unwrap()),
        other,
        engine(),
    )
    .err()
    .unwrap();
    assert!(matches!(err, OpenError::GenesisMismatch { .. }), "{err}");

    // Flip one balance behind the node's back: validator 2's, in balance chunk 0.
    let store = SledStore::open(dir.path()).unwrap();
    let mut balances = store.get(&keys::balance_chunk(0)).unwrap().unwrap();
    balances[16..24].copy_from_slice(&1u64.to_le_bytes());
    let mut batch = WriteBatch::new();
    batch.put(keys::balance_chunk(0), balances);
    store.commit(&batch).unwrap();
    drop(store);
    let err = Chain::open(
        Arc::new(SledStore::open(dir.path()).unwrap()),
        genesis(),
        engine(),
    )
    .err()
    .unwrap();
    match &err {
        OpenError::Corrupt(msg) => assert!(
            msg.contains("state root") && msg.contains("height 1"),
            "{msg}"
        ),
        other => panic!("expected a corrupt-store error, got {other}"),
    }
}

#[test]
fn reverting_blocks_restores_earlier_state_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(1_000_000_000);
    let open = || open_sled(dir.path(), &rt);
    let existing = genesis_pubkeys();
    let mut chain = open();
    let snapshot = |chain: &Chain| {
        (
            chain.head(),
            chain.registry().as_ref().clone(),
            chain.eth1_state().clone(),
        )
    };
    let mut snapshots = vec![snapshot(&chain)];
    let mut blocks = vec![None];
    let mut log = DevDepositLog::new();
    let mut logs = vec![log.clone()];
    for height in 1..=5 {
        let block = build(
            &chain,
            &mut log,
            height,
            workload::dev_block(height, &existing, FORK),
        )
        .unwrap();
        chain.import(&block).unwrap();
        blocks.push(Some(block));
        snapshots.push(snapshot(&chain));
        logs.push(log.clone());
    }
    for height in (2..5).rev() {
        let head = chain.revert_head().unwrap();
        assert_eq!(head, snapshots[height].0);
        assert_eq!(*chain.registry(), snapshots[height].1);
        assert_eq!(*chain.eth1_state(), snapshots[height].2);
        assert_eq!(
            modnode::state::state_root(
                &chain.registry().root(),
                &chain.eth1_state(),
                &chain.schedule()
            ),
            head.state_root.to_bytes()
        );
    }
    assert!(
        chain.block_at(3).unwrap().is_none(),
        "reverted heights leave the canonical index"
    );
    drop(chain);

    // The reverted state is what a restart loads, and the index forgot the dropped validators.
    let mut chain = open();
    assert_eq!(chain.head(), snapshots[2].0);
    assert_eq!(*chain.registry(), snapshots[2].1);
    assert_eq!(*chain.eth1_state(), snapshots[2].2);
    let dropped = snapshots[5].1.validators().last().unwrap().pubkey;
    assert_eq!(chain.registry().index_of(&dropped), None);

    // A different block 3 imports on top, and the original block 3 can come back after it is
    // reverted too.
    let other = vec![workload::new_validator(777, 32 * ETH, FORK)];
    import(&mut chain, &mut logs[2].clone(), other);
    assert_ne!(chain.head().hash, snapshots[3].0.hash);
    chain.revert_head().unwrap();
    chain.import(blocks[3].as_ref().unwrap()).unwrap();
    assert_eq!(chain.head(), snapshots[3].0);
    assert_eq!(*chain.registry(), snapshots[3].1);

    while chain.head().height > 0 {
        chain.revert_head().unwrap();
    }
    assert_eq!(*chain.registry(), snapshots[0].1);
    assert!(matches!(
        chain.revert_head(),
        Err(modnode::chain::RevertError::Genesis)
    ));
}

/// Builds `n` blocks on `chain` with deposits seeded by `seed` (each branch follows its own
/// deposit contract).
fn branch(chain: &mut Chain, n: u64, seed: u64) -> Vec<modnode::chain::block::Block> {
    let mut log = DevDepositLog::new();
    (0..n)
        .map(|i| {
            let slot = chain.head().slot + 1;
            let deposits = vec![workload::new_validator(seed * 100 + i, 32 * ETH, FORK)];
            let block = build(chain, &mut log, slot, deposits).unwrap();
            chain.import(&block).unwrap();
            block
        })
        .collect()
}

#[test]
fn fork_choice_follows_the_longest_valid_chain() {
    use modnode::chain::{Added, ForkChoiceError};
    let native = || DepositEngine::Native(Verification::Batched);
    let fresh = || Chain::open(Arc::new(MemoryStore::new()), genesis(), native()).unwrap();
    let (mut a, mut b) = (fresh(), fresh());
    let a_blocks = branch(&mut a, 3, 1);
    let b_blocks = branch(&mut b, 4, 2);

    let mut node = fresh();
    for block in &a_blocks {
        assert!(matches!(node.add_block(block).unwrap(), Added::Extended(_)));
    }
    assert_eq!(node.add_block(&a_blocks[1]).unwrap(), Added::Known);
    assert_eq!(node.add_block(&b_blocks[0]).unwrap(), Added::Stored);
    assert_eq!(node.add_block(&b_blocks[1]).unwrap(), Added::Stored);
    // Equal length: the lower tip hash wins.
    let tie = node.add_block(&b_blocks[2]).unwrap();
    if b_blocks[2].hash() < a_blocks[2].hash() {
        assert!(
            matches!(tie, Added::Reorganised { reverted: 3, .. }),
            "{tie:?}"
        );
    } else {
        assert_eq!(tie, Added::Stored);
    }
    // Longer: b wins either way (a reorganisation now, or an extension if b won the tie).
    let longer = node.add_block(&b_blocks[3]).unwrap();
    assert!(
        matches!(longer, Added::Reorganised { .. } | Added::Extended(_)),
        "{longer:?}"
    );
    assert_eq!(node.head(), b.head());
    assert_eq!(*node.registry(), *b.registry());

    // A longer branch with an invalid block: refused from that block on; the node stays on b.
    let mut c = fresh();
    let mut c_blocks = branch(&mut c, 3, 3);
    c_blocks[2].header.state_root = modnode::hashes::StateRoot::new([0xee; 32]);
    let mut parent = c_blocks[2].header.hash();
    for height in 4..=5 {
        let body = modnode::chain::block::BlockBody::default();
        let header = modnode::chain::block::BlockHeader {
            parent_hash: parent,
            height,
            slot: height,
            proposer: 0,
            state_root: modnode::hashes::StateRoot::new([0; 32]),
            body_root: body.root(),
        };
        parent = header.hash();
        c_blocks.push(modnode::chain::block::Block {
            header,
            body,
            seal: modnode::chain::block::Seal::Unsigned,
        });
    }
    for block in &c_blocks[..2] {
        assert_eq!(node.add_block(block).unwrap(), Added::Stored);
    }
    // The tampered block is executed on its parent's state before it is stored: refused.
    let err = node.add_block(&c_blocks[2]).unwrap_err();
    assert!(
        matches!(
            err,
            ForkChoiceError::Invalid(ImportError::StateRootMismatch { .. })
        ),
        "{err}"
    );
    // Its descendants would make the longer branch, but the branch is invalid.
    for block in &c_blocks[3..] {
        let result = node.add_block(block);
        assert!(
            matches!(result, Err(ForkChoiceError::InvalidAncestor { .. })),
            "{result:?}"
        );
    }
    assert_eq!(node.head(), b.head());
    assert_eq!(*node.registry(), *b.registry());

    // A block whose parent nobody has seen.
    let mut orphan = b_blocks[3].clone();
    orphan.header.parent_hash = modnode::hashes::BlockHash::new([0x42; 32]);
    assert!(matches!(
        node.add_block(&orphan),
        Err(ForkChoiceError::UnknownParent { .. })
    ));
}

#[test]
fn finalized_blocks_are_never_reorganised() {
    use modnode::chain::ForkChoiceError;
    let mut shallow = genesis();
    shallow.finality_depth = 2;
    let native = || DepositEngine::Native(Verification::Batched);
    let fresh = || Chain::open(Arc::new(MemoryStore::new()), shallow.clone(), native()).unwrap();
    let (mut a, mut b) = (fresh(), fresh());
    let a_blocks = branch(&mut a, 4, 1);
    let b_blocks = branch(&mut b, 6, 2);
    let mut node = fresh();
    for block in &a_blocks {
        node.add_block(block).unwrap();
    }
    assert_eq!(node.finalized_height(), 2);
    for block in &b_blocks[..3] {
        assert_eq!(
            node.add_block(block).unwrap(),
            modnode::chain::Added::Stored
        );
    }
    // The first b block that would win (the tie at height 4, or height 5) is refused: b forks
    // at genesis, below the finalized height.
    let err = b_blocks[3..]
        .iter()
        .find_map(|block| node.add_block(block).err())
        .expect("a refusal");
    assert!(
        matches!(
            err,
            ForkChoiceError::BeyondFinality {
                ancestor: 0,
                finalized: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(node.head(), a.head());
}

#[test]
fn authority_chains_accept_only_the_slot_authoritys_signed_blocks() {
    use modnode::chain::block::Seal;
    use modnode::net::identity::NodeIdentity;
    let (a, b) = (
        NodeIdentity::generate().unwrap(),
        NodeIdentity::generate().unwrap(),
    );
    let mut g = genesis();
    g.authorities = vec![*a.node_id().as_bytes(), *b.node_id().as_bytes()];
    assert_eq!((g.proposer_for(1), g.proposer_for(2)), (Some(1), Some(0)));
    let mut chain = Chain::open(
        Arc::new(MemoryStore::new()),
        g,
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap();
    let seal = |chain: &Chain, block: &mut modnode::chain::block::Block, who: &NodeIdentity| {
        block.seal = Seal::Ed25519(who.sign(&chain.seal_message(&block.hash())).unwrap());
    };
    let vote = chain.eth1_data();

    // Slot 1 belongs to authority 1 (b).
    let mut block = chain.build_block(1, 1, vote, vec![]).unwrap();
    seal(&chain, &mut block, &b);
    chain.import(&block).unwrap();

    // Slot 2 belongs to authority 0 (a).
    let mut wrong_proposer = chain.build_block(2, 1, vote, vec![]).unwrap();
    seal(&chain, &mut wrong_proposer, &b);
    let unsigned = chain.build_block(2, 0, vote, vec![]).unwrap();
    // Signed by the right authority, but over the raw block hash (what its key also signs in
    // TLS handshakes) instead of the domain-separated seal message.
    let mut raw_hash_seal = unsigned.clone();
    raw_hash_seal.seal = Seal::Ed25519(a.sign(unsigned.hash().as_bytes()).unwrap());
    let mut signed_by_b = unsigned.clone();
    seal(&chain, &mut signed_by_b, &b);
    for (what, bad) in [
        ("wrong proposer", &wrong_proposer),
        ("unsigned", &unsigned),
        ("wrong signer", &signed_by_b),
        ("seal over the raw block hash", &raw_hash_seal),
    ] {
        let err = chain.import(bad).unwrap_err();
        assert!(matches!(err, ImportError::BadSeal { .. }), "{what}: {err}");
    }
    let mut good = unsigned;
    seal(&chain, &mut good, &a);
    chain.import(&good).unwrap();
    assert_eq!(chain.head().height, 2);
}

#[test]
fn forged_seals_are_refused_on_known_and_side_branch_blocks() {
    use modnode::chain::block::Seal;
    use modnode::chain::{Added, ForkChoiceError};
    use modnode::net::identity::NodeIdentity;
    let a = NodeIdentity::generate().unwrap();
    let forger = NodeIdentity::generate().unwrap();
    let mut g = genesis();
    g.authorities = vec![*a.node_id().as_bytes()];
    let open = |g: &Genesis| {
        Chain::open(
            Arc::new(MemoryStore::new()),
            g.clone(),
            DepositEngine::Native(Verification::Batched),
        )
        .unwrap()
    };
    let mut chain = open(&g);
    let mut side = open(&g);
    let sealed = |chain: &Chain, slot: u64, who: &NodeIdentity| {
        let mut block = chain
            .build_block(slot, 0, chain.eth1_data(), vec![])
            .unwrap();
        block.seal = Seal::Ed25519(who.sign(&chain.seal_message(&block.hash())).unwrap());
        block
    };
    let block = sealed(&chain, 1, &a);
    chain.add_block(&block).unwrap();
    // The same header with a forged seal: not "known", a forgery.
    let mut forged = block.clone();
    forged.seal = Seal::Ed25519(forger.sign(&chain.seal_message(&block.hash())).unwrap());
    assert!(matches!(
        chain.add_block(&forged),
        Err(ForkChoiceError::Invalid(ImportError::BadSeal { .. }))
    ));
    assert_eq!(chain.add_block(&block).unwrap(), Added::Known);

    // A competing branch (slot 2 instead of 1): its forged copy is refused before it is
    // stored, so the genuine block can still be stored and win later.
    let rival = sealed(&side, 2, &a);
    side.add_block(&rival).unwrap();
    let mut forged_rival = rival.clone();
    forged_rival.seal = Seal::Ed25519(forger.sign(&chain.seal_message(&rival.hash())).unwrap());
    assert!(matches!(
        chain.add_block(&forged_rival),
        Err(ForkChoiceError::Invalid(ImportError::BadSeal { .. }))
    ));
    assert!(matches!(
        chain.add_block(&rival).unwrap(),
        Added::Stored | Added::Reorganised { .. }
    ));
    // Which of the two height-1 blocks wins the tie depends on their hashes; the longer
    // branch wins either way.
    let next = sealed(&side, 3, &a);
    assert!(matches!(
        chain.add_block(&next).unwrap(),
        Added::Reorganised { .. } | Added::Extended(_)
    ));
    assert_eq!(chain.head().hash, next.hash());
}

#[test]
fn genesis_authorities_are_parsed_and_checked() {
    let id = "ab".repeat(32);
    let ok = Genesis::from_json(
        &format!(r#"{{"chain_id": "x", "authorities": ["{id}"]}}"#),
        "g.json",
    )
    .unwrap();
    assert_eq!(ok.authorities, vec![[0xab; 32]]);
    assert_ne!(
        ok.config_hash(),
        Genesis::from_json(r#"{"chain_id": "x"}"#, "g.json")
            .unwrap()
            .config_hash()
    );
    let dup = Genesis::from_json(
        &format!(r#"{{"chain_id": "x", "authorities": ["{id}", "{id}"]}}"#),
        "g.json",
    )
    .unwrap_err();
    assert!(
        dup.to_string().contains("authorities[1]") && dup.to_string().contains("twice"),
        "{dup}"
    );
    let short =
        Genesis::from_json(r#"{"chain_id": "x", "authorities": ["abcd"]}"#, "g.json").unwrap_err();
    assert!(
        short
            .to_string()
            .contains("authorities[0]: 2 bytes, expected 32"),
        "{short}"
    );
}

/// A context the chain cannot build — a 3-byte fork version; its `DepositContext` holds four,
/// so the native reference cannot be given one — is every module's `BadContext`, through the
/// runtime's WIT-level call.
#[test]
fn every_module_rejects_a_malformed_fork_version_the_same_way() {
    use modnode::chain::eth1::DepositProofs;
    use modnode::runtime::deposits::{BlockContext, ProcessError, WitEth1Data, convert};
    let registry = Arc::new(genesis().registry().unwrap());
    let mut log = DevDepositLog::new();
    log.push(workload::new_validator(1, 32 * ETH, FORK));
    let eth1 = log.eth1_data();
    let ctx = BlockContext {
        height: 1,
        slot: 1,
        genesis_fork_version: vec![0; 3],
        eth1_data: WitEth1Data {
            deposit_root: eth1.deposit_root.to_vec(),
            deposit_count: eth1.deposit_count,
            block_hash: eth1.block_hash.to_vec(),
        },
        eth1_deposit_index: 0,
    };
    let deposits = log.proven_deposits(0, 1, 1).unwrap();
    let rt = runtime(1_000_000_000);
    for name in ["deposits-v1", "deposits-v2"] {
        let module = deposits_module(&rt, name);
        let wit = deposits.iter().map(convert::deposit).collect();
        let result = module.process(registry.clone(), ctx.clone(), wit).unwrap();
        assert!(
            matches!(result, Err(ProcessError::BadContext(_))),
            "{name}: {result:?}"
        );
    }
}

#[test]
fn blocks_must_carry_exactly_the_due_deposits_in_order_with_valid_proofs() {
    use modnode::chain::eth1::DepositProofs;
    let existing = genesis().validators[2].pubkey;
    let deposits: Vec<DepositData> = (0..5)
        .map(|i| match i {
            2 => workload::unsigned(existing, ETH),
            _ => workload::new_validator(40 + i, 32 * ETH, FORK),
        })
        .collect();
    let mut log = DevDepositLog::new();
    for d in &deposits {
        log.push(*d);
    }
    let vote = log.eth1_data();
    let proven = log.proven_deposits(0, 5, 5).unwrap();
    // The same deposits proven against a contract that grew by one (a later root).
    let mut longer = log.clone();
    longer.push(workload::new_validator(99, 32 * ETH, FORK));
    let shifted = longer.proven_deposits(1, 5, 6).unwrap();

    for (name, engine) in engines() {
        let mut chain = chain(engine);
        let before = (chain.head(), chain.eth1_state().clone());
        let due = chain.deposits_due(1, 0, &vote).unwrap();
        assert_eq!((due.from, due.count), (0, 5), "{name}");
        let attempt = |deposits: Vec<_>| chain.build_block(1, 0, vote, deposits).unwrap_err();
        let count_err = |e: &ImportError, exp: u64, got: u64| matches!(e, ImportError::WrongDepositCount { expected, found, from: 0, .. } if *expected == exp && *found == got);
        let proof_err = |e: &ImportError, at: u64| matches!(e, ImportError::Rejected { error: DepositRejection::BadProof(i), .. } if *i == at);

        let censored = attempt(vec![]);
        assert!(
            count_err(&censored, 5, 0),
            "{name}: omitted all: {censored}"
        );
        let omitted = attempt(proven[..4].to_vec());
        assert!(count_err(&omitted, 5, 4), "{name}: omitted one: {omitted}");
        let extra = attempt([proven.clone(), vec![proven[0]]].concat());
        assert!(count_err(&extra, 5, 6), "{name}: one too many: {extra}");
        let mut reordered = proven.clone();
        reordered.swap(0, 1);
        let e = attempt(reordered);
        assert!(proof_err(&e, 0), "{name}: reordered: {e}");
        let mut duplicated = proven.clone();
        duplicated[1] = proven[0];
        let e = attempt(duplicated);
        assert!(proof_err(&e, 1), "{name}: duplicated: {e}");
        let e = attempt(shifted.clone());
        assert!(proof_err(&e, 0), "{name}: skipped the first: {e}");
        let mut forged = proven.clone();
        forged[3].proof[7][0] ^= 1;
        let e = attempt(forged);
        assert!(proof_err(&e, 3), "{name}: forged proof: {e}");
        let mut minted = proven.clone();
        minted[2].data.amount = u64::MAX / 2;
        let e = attempt(minted);
        assert!(proof_err(&e, 2), "{name}: inflated top-up: {e}");
        assert_eq!((chain.head(), chain.eth1_state().clone()), before, "{name}");

        // A peer's block with a tampered body is refused on import too (body root recomputed,
        // so only the deposit rules can catch it).
        let good = chain.build_block(1, 0, vote, proven.clone()).unwrap();
        let mut tampered = good.clone();
        tampered.body.deposits.pop();
        tampered.header.body_root = tampered.body.root();
        let e = chain.import(&tampered).unwrap_err();
        assert!(count_err(&e, 5, 4), "{name}: tampered import: {e}");

        let imported = chain.import(&good).unwrap();
        assert_eq!(imported.outcomes.len(), 5, "{name}");
        assert_eq!(chain.eth1_state().deposit_index, 5, "{name}");
        assert_eq!(chain.eth1_data(), vote, "{name}");

        // Nothing is due any more: replaying a deposit is refused, whatever its proof.
        let replay = chain.build_block(2, 0, vote, vec![proven[2]]).unwrap_err();
        assert!(
            matches!(
                replay,
                ImportError::WrongDepositCount {
                    expected: 0,
                    found: 1,
                    from: 5,
                    ..
                }
            ),
            "{name}: replay: {replay}"
        );
        // With one more deposit due, the old one cannot stand in for it.
        let next_vote = longer.eth1_data();
        let replay = chain
            .build_block(
                2,
                0,
                next_vote,
                vec![longer.proven_deposits(0, 1, 6).unwrap()[0]],
            )
            .unwrap_err();
        assert!(
            proof_err(&replay, 5),
            "{name}: replay at the next index: {replay}"
        );
        // Votes never move the count backwards.
        let stale = log.eth1_data_at(3).unwrap();
        let back = chain.build_block(2, 0, stale, vec![]).unwrap_err();
        assert!(
            matches!(back, ImportError::Eth1Vote { .. }),
            "{name}: {back}"
        );
        let block = chain.build_block_from(2, 0, next_vote, &longer).unwrap();
        chain.import(&block).unwrap();
        assert_eq!(chain.eth1_state().deposit_index, 6, "{name}");
    }
}

#[test]
fn eth1_data_changes_only_with_a_majority_of_the_authorities() {
    use modnode::chain::block::Seal;
    use modnode::net::identity::NodeIdentity;
    let ids: Vec<NodeIdentity> = (0..3).map(|_| NodeIdentity::generate().unwrap()).collect();
    let mut g = genesis();
    g.authorities = ids.iter().map(|i| *i.node_id().as_bytes()).collect();
    g.eth1_voting_period_slots = 4;
    let mut chain = Chain::open(
        Arc::new(MemoryStore::new()),
        g.clone(),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap();
    let mut log = DevDepositLog::new();
    log.push(workload::new_validator(61, 32 * ETH, FORK));
    log.push(workload::new_validator(62, 32 * ETH, FORK));
    let vote = log.eth1_data();
    let genesis_eth1 = chain.eth1_data();
    let produce = |chain: &mut Chain, slot: u64, vote| {
        let proposer = g.proposer_for(slot).unwrap();
        let mut block = chain.build_block_from(slot, proposer, vote, &log).unwrap();
        block.seal = Seal::Ed25519(
            ids[proposer as usize]
                .sign(&chain.seal_message(&block.hash()))
                .unwrap(),
        );
        chain.import(&block).unwrap();
        block
    };
    // Slot 1: one vote of three is no majority; nothing is due yet.
    let b1 = produce(&mut chain, 1, vote);
    assert!(b1.body.deposits.is_empty());
    assert_eq!(chain.eth1_data(), genesis_eth1);
    // Slot 2: a second authority agrees; the vote is adopted and its deposits are due at once.
    let b2 = produce(&mut chain, 2, vote);
    assert_eq!(chain.eth1_data(), vote);
    assert_eq!(b2.body.deposits.len(), 2);
    assert_eq!(chain.eth1_state().deposit_index, 2);

    // In a new period one vote is not enough again.
    let mut more = log.clone();
    more.push(workload::new_validator(63, 32 * ETH, FORK));
    let b4 = produce(&mut chain, 4, more.eth1_data());
    assert!(b4.body.deposits.is_empty());
    assert_eq!(chain.eth1_data(), vote);
    assert_eq!(chain.eth1_state().votes.len(), 1);
}

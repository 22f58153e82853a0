//! Block import: the spec's traps, invalid blocks leaving no trace, restarts, corruption.

use std::sync::Arc;

use modnode::chain::block::DepositData;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Chain, DepositEngine, ImportError, OpenError, workload};
use modnode::runtime::deposits::Outcome;
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

/// Builds and imports one block, returning the outcomes.
fn import(chain: &mut Chain, deposits: Vec<DepositData>) -> Vec<Outcome> {
    let slot = chain.head().slot + 1;
    let block = chain.build_block(slot, 0, deposits).unwrap();
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
        let outcomes = import(&mut chain, block.clone());
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
        let registry = registry.read().unwrap();
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
        let before = (chain.head(), chain.registry().read().unwrap().clone());
        let good = chain
            .build_block(1, 0, vec![workload::new_validator(9, 32 * ETH, FORK)])
            .unwrap();

        let mut wrong_root = good.clone();
        wrong_root.header.state_root = [7; 32];
        assert!(
            matches!(
                chain.import(&wrong_root),
                Err(ImportError::StateRootMismatch { .. })
            ),
            "{name}"
        );

        let mut wrong_parent = good.clone();
        wrong_parent.header.parent_hash = [1; 32];
        assert!(
            matches!(
                chain.import(&wrong_parent),
                Err(ImportError::NotNext { .. })
            ),
            "{name}"
        );

        let mut wrong_body = good.clone();
        wrong_body.body.deposits[0].amount += 1;
        assert!(
            matches!(chain.import(&wrong_body), Err(ImportError::BadBody { .. })),
            "{name}"
        );

        let overflow = vec![workload::unsigned(genesis().validators[0].pubkey, u64::MAX)];
        assert!(
            matches!(
                chain.build_block(1, 0, overflow),
                Err(ImportError::Rejected { .. })
            ),
            "{name}"
        );

        assert_eq!(chain.head(), before.0, "{name}");
        assert_eq!(*chain.registry().read().unwrap(), before.1, "{name}");
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
    let (head, registry) = {
        let mut chain = open();
        for height in 1..=4 {
            import(&mut chain, workload::dev_block(height, &existing, FORK));
        }
        (chain.head(), chain.registry().read().unwrap().clone())
    };
    let chain = open();
    assert_eq!(chain.head(), head);
    let reopened = chain.registry();
    let reopened = reopened.read().unwrap();
    assert_eq!(*reopened, registry);
    assert_eq!(reopened.root(), head.state_root);
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
        import(&mut chain, vec![workload::new_validator(5, 32 * ETH, FORK)]);
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

    // Flip one balance behind the node's back.
    let store = SledStore::open(dir.path()).unwrap();
    let mut batch = WriteBatch::new();
    batch.put(keys::balance(2), 1u64.to_le_bytes().to_vec());
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
    let mut snapshots = vec![(chain.head(), chain.registry().read().unwrap().clone())];
    let mut blocks = vec![None];
    for height in 1..=5 {
        let block = chain
            .build_block(height, 0, workload::dev_block(height, &existing, FORK))
            .unwrap();
        chain.import(&block).unwrap();
        blocks.push(Some(block));
        snapshots.push((chain.head(), chain.registry().read().unwrap().clone()));
    }
    for height in (2..5).rev() {
        let head = chain.revert_head().unwrap();
        assert_eq!(head, snapshots[height].0);
        assert_eq!(*chain.registry().read().unwrap(), snapshots[height].1);
        assert_eq!(chain.registry().read().unwrap().root(), head.state_root);
    }
    assert!(
        chain.block_at(3).unwrap().is_none(),
        "reverted heights leave the canonical index"
    );
    drop(chain);

    // The reverted state is what a restart loads, and the index forgot the dropped validators.
    let mut chain = open();
    assert_eq!(chain.head(), snapshots[2].0);
    assert_eq!(*chain.registry().read().unwrap(), snapshots[2].1);
    let dropped = snapshots[5].1.validators().last().unwrap().pubkey;
    assert_eq!(chain.registry().read().unwrap().index_of(&dropped), None);

    // A different block 3 imports on top, and the original block 3 can come back after it is
    // reverted too.
    let other = vec![workload::new_validator(777, 32 * ETH, FORK)];
    import(&mut chain, other);
    assert_ne!(chain.head().hash, snapshots[3].0.hash);
    chain.revert_head().unwrap();
    chain.import(blocks[3].as_ref().unwrap()).unwrap();
    assert_eq!(chain.head(), snapshots[3].0);
    assert_eq!(*chain.registry().read().unwrap(), snapshots[3].1);

    while chain.head().height > 0 {
        chain.revert_head().unwrap();
    }
    assert_eq!(*chain.registry().read().unwrap(), snapshots[0].1);
    assert!(matches!(
        chain.revert_head(),
        Err(modnode::chain::RevertError::Genesis)
    ));
}

/// Builds `n` blocks on `chain` with deposits seeded by `seed`.
fn branch(chain: &mut Chain, n: u64, seed: u64) -> Vec<modnode::chain::block::Block> {
    (0..n)
        .map(|i| {
            let slot = chain.head().slot + 1;
            let deposits = vec![workload::new_validator(seed * 100 + i, 32 * ETH, FORK)];
            let block = chain.build_block(slot, 0, deposits).unwrap();
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
    assert_eq!(
        *node.registry().read().unwrap(),
        *b.registry().read().unwrap()
    );

    // A longer branch with an invalid block: the node tries it, fails, and stays on b.
    let mut c = fresh();
    let mut c_blocks = branch(&mut c, 3, 3);
    c_blocks[2].header.state_root = [0xee; 32];
    let mut parent = c_blocks[2].header.hash();
    for height in 4..=5 {
        let body = modnode::chain::block::BlockBody::default();
        let header = modnode::chain::block::BlockHeader {
            parent_hash: parent,
            height,
            slot: height,
            proposer: 0,
            state_root: [0; 32],
            body_root: body.root(),
        };
        parent = header.hash();
        c_blocks.push(modnode::chain::block::Block {
            header,
            body,
            seal: modnode::chain::block::Seal::Unsigned,
        });
    }
    for block in &c_blocks[..3] {
        assert_eq!(node.add_block(block).unwrap(), Added::Stored);
    }
    // The first c block that would win (a tie at height 4 if its hash is lower, else height 5)
    // makes the node try the branch, which fails at the tampered block.
    let err = c_blocks[3..]
        .iter()
        .find_map(|block| node.add_block(block).err())
        .expect("the invalid branch is refused");
    assert!(
        matches!(
            err,
            ForkChoiceError::Invalid(ImportError::StateRootMismatch { .. })
        ),
        "{err}"
    );
    assert_eq!(node.head(), b.head());
    assert_eq!(
        *node.registry().read().unwrap(),
        *b.registry().read().unwrap()
    );

    // A block whose parent nobody has seen.
    let mut orphan = b_blocks[3].clone();
    orphan.header.parent_hash = [0x42; 32];
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
    let seal = |block: &mut modnode::chain::block::Block, who: &NodeIdentity| {
        block.seal = Seal::Ed25519(who.sign(&block.hash()).unwrap());
    };

    // Slot 1 belongs to authority 1 (b).
    let mut block = chain.build_block(1, 1, vec![]).unwrap();
    seal(&mut block, &b);
    chain.import(&block).unwrap();

    // Slot 2 belongs to authority 0 (a).
    let mut wrong_proposer = chain.build_block(2, 1, vec![]).unwrap();
    seal(&mut wrong_proposer, &b);
    let unsigned = chain.build_block(2, 0, vec![]).unwrap();
    let mut signed_by_b = unsigned.clone();
    seal(&mut signed_by_b, &b);
    for (what, bad) in [
        ("wrong proposer", &wrong_proposer),
        ("unsigned", &unsigned),
        ("wrong signer", &signed_by_b),
    ] {
        let err = chain.import(bad).unwrap_err();
        assert!(matches!(err, ImportError::BadSeal { .. }), "{what}: {err}");
    }
    let mut good = unsigned;
    seal(&mut good, &a);
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
        let mut block = chain.build_block(slot, 0, vec![]).unwrap();
        block.seal = Seal::Ed25519(who.sign(&block.hash()).unwrap());
        block
    };
    let block = sealed(&chain, 1, &a);
    chain.add_block(&block).unwrap();
    // The same header with a forged seal: not "known", a forgery.
    let mut forged = block.clone();
    forged.seal = Seal::Ed25519(forger.sign(&block.hash()).unwrap());
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
    forged_rival.seal = Seal::Ed25519(forger.sign(&rival.hash()).unwrap());
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

#[test]
fn every_engine_rejects_a_malformed_fork_version_the_same_way() {
    use modnode::runtime::deposits::{BlockContext, ProcessError};
    let registry = Arc::new(std::sync::RwLock::new(genesis().registry().unwrap()));
    let ctx = BlockContext {
        height: 1,
        slot: 1,
        genesis_fork_version: vec![0; 3],
    };
    let deposits = [workload::new_validator(1, 32 * ETH, FORK)];
    for (name, engine) in engines() {
        let result = engine.process(registry.clone(), &ctx, &deposits).unwrap();
        assert!(
            matches!(result, Err(ProcessError::BadContext(_))),
            "{name}: {result:?}"
        );
    }
}

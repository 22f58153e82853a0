//! deposits-v1, deposits-v2 and the native reference agree on every generated block — honest
//! ones, and ones with a wrong proof, wrong indices or a wrong deposit count: same outcomes,
//! same accept/reject decisions and reasons, same state roots.

use std::sync::Arc;

use modnode::chain::eth1::DepositProofs;
use modnode::chain::genesis::Genesis;
use modnode::chain::workload::DevDepositLog;
use modnode::chain::{Chain, ImportError};
use modnode::store::MemoryStore;
use modnode_tests::{DepositSpec, Signer, Tamper, all_engines, deposit_spec, runtime, tamper};
use proptest::prelude::*;

/// What one engine made of a block.
#[derive(Debug, PartialEq, Eq)]
enum Result {
    Imported {
        outcomes: Vec<modnode::consensus::DepositOutcome>,
        root: modnode::hashes::StateRoot,
    },
    /// The deposits module refused the block (the reason, engine-independent).
    Rejected(String),
    /// The chain refused the block before the module ran (wrong deposit count).
    WrongCount,
}

fn run_blocks(blocks: &[(Vec<DepositSpec>, Tamper)]) -> Vec<(&'static str, Vec<Result>)> {
    let rt = runtime();
    let genesis = Genesis::generated("equivalence", 16, 3);
    let existing: Vec<[u8; 48]> = genesis.validators.iter().map(|v| v.pubkey).collect();
    let fork = genesis.genesis_fork_version;
    let mut signer = Signer::default();
    let blocks: Vec<(Vec<_>, Tamper)> = blocks
        .iter()
        .map(|(b, t)| {
            let deposits = b
                .iter()
                .map(|s| signer.deposit(s, &existing, fork))
                .collect();
            (deposits, *t)
        })
        .collect();
    all_engines(&rt)
        .into_iter()
        .map(|(name, engine)| {
            let mut chain =
                Chain::open(Arc::new(MemoryStore::new()), genesis.clone(), engine).unwrap();
            // The deposit contract: a block's deposits enter it before the block is built, and
            // stay due (for the next block) if the block is refused.
            let mut contract = DevDepositLog::new();
            let results = blocks
                .iter()
                .map(|(deposits, tamper)| {
                    for d in deposits {
                        contract.push(*d);
                    }
                    let slot = chain.head().slot + 1;
                    let vote = contract.eth1_data();
                    let due = chain.deposits_due(slot, 0, &vote).unwrap();
                    let honest = contract
                        .proven_deposits(due.from, due.count, due.eth1_data.deposit_count)
                        .unwrap();
                    match chain.build_block(slot, 0, vote, tamper.apply(honest)) {
                        Ok(block) => {
                            let imported = chain.import(&block).unwrap();
                            Result::Imported {
                                outcomes: imported.outcomes,
                                root: imported.head.state_root,
                            }
                        }
                        Err(ImportError::Rejected { error, .. }) => {
                            Result::Rejected(format!("{error:?}"))
                        }
                        Err(ImportError::WrongDepositCount { .. }) => Result::WrongCount,
                        Err(e) => panic!("{name}: unexpected error {e}"),
                    }
                })
                .collect();
            (name, results)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn all_versions_agree(blocks in proptest::collection::vec((proptest::collection::vec(deposit_spec(), 0..=16), tamper()), 1..=3)) {
        let results = run_blocks(&blocks);
        let (reference_name, reference) = &results[2];
        for (name, result) in &results {
            prop_assert_eq!(result, reference, "{} disagrees with {}", name, reference_name);
        }
    }
}

#[test]
fn a_block_of_every_trap_is_handled_identically() {
    use modnode_tests::{Key, Sig};
    let spec = |key, amount, sig| DepositSpec { key, amount, sig };
    let block = vec![
        spec(Key::Fresh(0), 32_000_000_000, Sig::WrongMessage),
        spec(Key::Fresh(0), 33_000_000_000, Sig::Valid),
        spec(Key::Fresh(0), 5, Sig::Garbage),
        spec(Key::Existing(1), u64::MAX / 2, Sig::Garbage),
        spec(Key::Undecodable, 1, Sig::Valid),
        spec(Key::Infinity, 0, Sig::Valid),
        spec(Key::Fresh(1), 0, Sig::Valid),
    ];
    let honest = |b: Vec<DepositSpec>| (b, Tamper::Honest);
    let results = run_blocks(&[
        honest(block),
        honest(vec![spec(Key::Existing(1), u64::MAX, Sig::Garbage)]),
    ]);
    for (name, result) in &results {
        assert!(matches!(result[0], Result::Imported { .. }), "{name}");
        assert!(
            matches!(&result[1], Result::Rejected(reason) if reason.contains("BalanceOverflow")),
            "{name}: balance overflow must reject the block: {:?}",
            result[1]
        );
        assert_eq!(result, &results[0].1, "{name}");
    }
}

#[test]
fn tampered_blocks_are_refused_identically_and_their_deposits_stay_due() {
    use modnode_tests::{Key, Sig};
    let fresh = |i| DepositSpec {
        key: Key::Fresh(i),
        amount: 32_000_000_000,
        sig: Sig::Valid,
    };
    let block = || vec![fresh(0), fresh(1), fresh(2)];
    let results = run_blocks(&[
        (block(), Tamper::FlipProof(4)),
        (vec![], Tamper::Swap),
        (vec![], Tamper::Duplicate),
        (vec![], Tamper::DropLast),
        (vec![], Tamper::Extra),
        (vec![], Tamper::Honest),
    ]);
    for (name, result) in &results {
        let bad_proof = |r: &Result, at: &str| matches!(r, Result::Rejected(reason) if reason.ends_with(&format!("BadProof({at})")));
        assert!(bad_proof(&result[0], "1"), "{name}: {:?}", result[0]);
        assert!(bad_proof(&result[1], "0"), "{name}: {:?}", result[1]);
        assert!(bad_proof(&result[2], "1"), "{name}: {:?}", result[2]);
        assert_eq!(result[3], Result::WrongCount, "{name}");
        assert_eq!(result[4], Result::WrongCount, "{name}");
        // The honest block finally carries the three deposits refused five times.
        assert!(
            matches!(&result[5], Result::Imported { outcomes, .. } if outcomes.len() == 3),
            "{name}: {:?}",
            result[5]
        );
        assert_eq!(result, &results[0].1, "{name}");
    }
}

//! deposits-v1, deposits-v2 and the native reference agree on every generated block: same
//! outcomes, same accept/reject decisions, same state roots.

use std::sync::Arc;

use modnode::chain::Chain;
use modnode::chain::genesis::Genesis;
use modnode::store::MemoryStore;
use modnode_tests::{DepositSpec, Signer, all_engines, deposit_spec, runtime};
use proptest::prelude::*;

/// What one engine made of a block.
#[derive(Debug, PartialEq, Eq)]
enum Result {
    Imported {
        outcomes: Vec<modnode::runtime::deposits::Outcome>,
        root: [u8; 32],
    },
    Rejected,
}

fn run_blocks(blocks: &[Vec<DepositSpec>]) -> Vec<(&'static str, Vec<Result>)> {
    let rt = runtime();
    let genesis = Genesis::generated("equivalence", 16, 3);
    let existing: Vec<[u8; 48]> = genesis.validators.iter().map(|v| v.pubkey).collect();
    let fork = genesis.genesis_fork_version;
    let mut signer = Signer::default();
    let blocks: Vec<Vec<_>> = blocks
        .iter()
        .map(|b| {
            b.iter()
                .map(|s| signer.deposit(s, &existing, fork))
                .collect()
        })
        .collect();
    all_engines(&rt)
        .into_iter()
        .map(|(name, engine)| {
            let mut chain =
                Chain::open(Arc::new(MemoryStore::new()), genesis.clone(), engine).unwrap();
            let results = blocks
                .iter()
                .map(|deposits| {
                    let slot = chain.head().slot + 1;
                    match chain.build_block(slot, 0, deposits.clone()) {
                        Ok(block) => {
                            let imported = chain.import(&block).unwrap();
                            Result::Imported {
                                outcomes: imported.outcomes,
                                root: imported.head.state_root,
                            }
                        }
                        Err(modnode::chain::ImportError::Rejected { .. }) => Result::Rejected,
                        Err(e) => panic!("{name}: unexpected error {e}"),
                    }
                })
                .collect();
            (name, results)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn all_versions_agree(blocks in proptest::collection::vec(proptest::collection::vec(deposit_spec(), 0..=16), 1..=3)) {
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
    let results = run_blocks(&[block, vec![spec(Key::Existing(1), u64::MAX, Sig::Garbage)]]);
    for (name, result) in &results {
        assert!(matches!(result[0], Result::Imported { .. }), "{name}");
        assert_eq!(
            result[1],
            Result::Rejected,
            "{name}: balance overflow must reject the block"
        );
        assert_eq!(result, &results[0].1, "{name}");
    }
}

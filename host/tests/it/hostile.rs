//! A hostile peer against fork choice, the chain worker and the network driver: body-swapped
//! blocks, blocks from future slots, fake head heights, unknown gossip kinds, restarts.
//!
//! Chain-level attacks run on a chain in memory (sans-IO); the ones about sockets run whole
//! nodes over QUIC on loopback. Waits are liveness bounds (generous, polled), not performance
//! targets.

use std::sync::Arc;

use modnode::chain::block::{Block, Seal};
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Added, Chain, DepositEngine, ForkChoiceError, ImportError, workload};
use modnode::net::identity::NodeIdentity;
use modnode::store::MemoryStore;

/// A chain in memory whose only authority is `authority`.
fn authority_chain(authority: &NodeIdentity) -> Chain {
    let mut genesis = Genesis::generated("hostile", 8, 7);
    genesis.authorities = vec![*authority.node_id().as_bytes()];
    Chain::open(
        Arc::new(MemoryStore::new()),
        genesis,
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap()
}

/// The next block on `chain`'s head at `slot`, sealed by `who`.
fn sealed(chain: &Chain, slot: u64, who: &NodeIdentity) -> Block {
    let mut block = chain.build_block(slot, 0, vec![]).unwrap();
    block.seal = Seal::Ed25519(who.sign(&block.hash()).unwrap());
    block
}

/// `block` with its real header and seal but another body.
fn body_swapped(block: &Block) -> Block {
    let mut swapped = block.clone();
    swapped
        .body
        .deposits
        .push(workload::new_validator(77, 32_000_000_000, [0; 4]));
    assert_eq!(
        swapped.hash(),
        block.hash(),
        "the header hash covers no body"
    );
    swapped
}

fn is_bad_body(result: &Result<Added, ForkChoiceError>) -> bool {
    matches!(
        result,
        Err(ForkChoiceError::Invalid(ImportError::BadBody { .. }))
    )
}

#[test]
fn body_swapped_blocks_are_refused_on_every_fork_choice_path() {
    let a = NodeIdentity::generate().unwrap();
    let mut chain = authority_chain(&a);
    let mut side = authority_chain(&a);

    // Known path: a canonical block's header and seal with another body is not "known".
    let block = sealed(&chain, 1, &a);
    assert!(matches!(chain.add_block(&block), Ok(Added::Extended(_))));
    let swapped = body_swapped(&block);
    assert!(
        is_bad_body(&chain.add_block(&swapped)),
        "known block with a swapped body"
    );

    // Extending path (import) already checked the body; it still does.
    let next = sealed(&chain, 3, &a);
    assert!(is_bad_body(&chain.add_block(&body_swapped(&next))));

    // Side-branch path: a rival at height 1 (slot 2) with a swapped body is refused before it
    // is stored, so the real rival is stored afterwards and the branch can win.
    let rival = sealed(&side, 2, &a);
    side.add_block(&rival).unwrap();
    let rival_child = sealed(&side, 4, &a);
    side.add_block(&rival_child).unwrap();
    assert!(
        is_bad_body(&chain.add_block(&body_swapped(&rival))),
        "side-branch block with a swapped body"
    );
    assert!(matches!(
        chain.add_block(&rival).unwrap(),
        Added::Stored | Added::Reorganised { .. }
    ));
    // A second copy of the stored rival (same header, another body) never replaces it.
    assert!(is_bad_body(&chain.add_block(&body_swapped(&rival))));
    assert!(matches!(
        chain.add_block(&rival_child).unwrap(),
        Added::Reorganised { .. } | Added::Extended(_)
    ));
    assert_eq!(chain.head().hash, rival_child.hash());
    assert_eq!(chain.block_at(1).unwrap().unwrap(), rival);
}

//! Finality under a partition: a block is final once it is `finality_depth` below the head and
//! under a checkpoint a majority of the authorities finalized by their seals (`chain::finality`:
//! FFG with the seals as votes, epochs of one slot per authority). A minority cut off for longer than
//! `finality_depth` must not finalize its own branch — with depth alone it did, and the two
//! sides could never merge again.
//!
//! Chains in memory and in sled (sans-IO): the authorities' blocks are built and sealed here.

use std::sync::Arc;

use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Added, Chain, DepositEngine};
use modnode::net::identity::NodeIdentity;
use modnode::store::{KvStore, MemoryStore, SledStore};

use super::equivocation::sealed;

const DEPTH: u64 = 4;

/// Three authorities; slot `s` belongs to authority `s % 3`.
fn setup() -> (Vec<NodeIdentity>, Genesis) {
    let keys: Vec<NodeIdentity> = (0..3).map(|_| NodeIdentity::generate().unwrap()).collect();
    let mut genesis = Genesis::generated("finality", 8, 11);
    genesis.authorities = keys.iter().map(|k| *k.node_id().as_bytes()).collect();
    genesis.finality_depth = DEPTH;
    (keys, genesis)
}

fn open(genesis: &Genesis, store: Arc<dyn KvStore>) -> Chain {
    Chain::open(
        store,
        genesis.clone(),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap()
}

fn canonical(chain: &Chain, from: u64) -> Vec<Block> {
    (from..=chain.head().height)
        .map(|h| chain.block_at(h).unwrap().unwrap())
        .collect()
}

/// Authority 2 is cut off from authorities 0 and 1 for 36 slots (nine times the finality
/// depth). Each side keeps producing in its own slots; the minority's side must not finalize
/// anything it built alone, so at the heal it abandons its branch for the majority's. Before
/// the majority rule the minority had finalized its branch after `DEPTH` blocks and refused
/// the majority's chain for good ("forks below the finalized height").
#[test]
fn a_minority_cut_off_longer_than_the_finality_depth_rejoins_the_majority_at_the_heal() {
    let (keys, genesis) = setup();
    let dir = tempfile::TempDir::new().unwrap();
    let minority_store: Arc<dyn KvStore> = Arc::new(SledStore::open(dir.path()).unwrap());
    let mut minority = open(&genesis, minority_store.clone());
    let mut majority = open(&genesis, Arc::new(MemoryStore::new()));
    // Together for slots 1..=9.
    for slot in 1..=9 {
        let block = sealed(&minority, &keys, slot, 0);
        minority.import(&block).unwrap();
        majority.import(&block).unwrap();
    }
    let together = minority.head().height;
    // Epochs of 3 slots; epoch 2 (slots 6..=8) voted from epoch 1's justified checkpoint (the
    // block of slot 2): final.
    assert_eq!(minority.finalized_height(), 2);
    // Cut: slots 10..=45, each side builds in the slots of its own authorities.
    for slot in 10..=45 {
        let side = if genesis.proposer_for(slot) == Some(2) {
            &mut minority
        } else {
            &mut majority
        };
        let block = sealed(side, &keys, slot, 1);
        side.import(&block).unwrap();
    }
    assert_eq!(minority.head().height, together + 12);
    assert_eq!(majority.head().height, together + 24);
    // The majority finalizes by votes: epoch 14 (slots 42, 43) voted from epoch 13's
    // checkpoint (the block of slot 37, height 28). The minority only what a majority voted
    // over: epoch 3 (slots 9 by authority 0, before the cut, and 11 by 2) justified epoch 3's
    // checkpoint from epoch 2's (the block of slot 5), which is final; nothing it built alone.
    assert_eq!(majority.head().height, 33);
    assert_eq!(majority.finalized_height(), 28);
    let stuck = minority.finalized_height();
    assert_eq!(stuck, 5);

    // A restart during the cut finds the same finalized height in the stored chain.
    let minority_branch = canonical(&minority, together + 1);
    drop(minority);
    let mut minority = open(&genesis, minority_store);
    assert_eq!(minority.finalized_height(), stuck);

    // Heal: the minority hears the majority's blocks and moves onto its longer chain.
    let mut last = None;
    for block in canonical(&majority, together + 1) {
        last = Some(minority.add_block(&block).unwrap());
    }
    assert!(
        matches!(
            last,
            Some(Added::Reorganised { .. }) | Some(Added::Extended(_))
        ),
        "{last:?}"
    );
    assert_eq!(minority.head(), majority.head());
    assert_eq!(minority.finalized_height(), majority.finalized_height());
    // The majority keeps its chain when it hears the minority's shorter branch.
    let head = majority.head();
    for block in &minority_branch {
        assert_eq!(majority.add_block(block).unwrap(), Added::Stored);
    }
    assert_eq!(majority.head(), head);
}

/// While only one of two authorities produces, blocks are still made and imported but nothing
/// new becomes final; when the other one seals again, finality catches up two epochs later.
#[test]
fn finality_waits_for_a_majority_and_catches_up_when_it_is_back() {
    let (keys, mut genesis) = setup();
    genesis.authorities.truncate(2);
    let mut chain = open(&genesis, Arc::new(MemoryStore::new()));
    for slot in 1..=6 {
        let block = sealed(&chain, &keys, slot, 0);
        chain.import(&block).unwrap();
    }
    // Epochs of 2 slots: epoch 2 (slots 4, 5) voted from epoch 1's checkpoint (height 1).
    assert_eq!(chain.finalized_height(), 1);
    // Authority 1's slots go empty: only even slots produce.
    for slot in (8..=30).step_by(2) {
        let block = sealed(&chain, &keys, slot, 0);
        chain.import(&block).unwrap();
    }
    let stuck = chain.finalized_height();
    assert_eq!(stuck, 1, "nothing authority 0 built alone is final");
    assert_eq!(chain.head().height, 18);
    // Authority 1 seals again: epoch 15 (slots 30, 31) is justified, and once epoch 16 votes
    // from it everything up to the depth is final again.
    let block = sealed(&chain, &keys, 31, 0);
    chain.import(&block).unwrap();
    assert_eq!(chain.finalized_height(), stuck);
    for slot in [32, 33] {
        let block = sealed(&chain, &keys, slot, 0);
        chain.import(&block).unwrap();
    }
    assert_eq!(chain.finalized_height(), chain.head().height - DEPTH);
}

/// A chain with authorities persists its finalized root with every block, and a restart
/// starts counting votes there (not from the bottom of what it stores): after a close and a
/// reopen on sled the finalized height is the same, and the next blocks finalize as on a
/// chain that never closed.
#[test]
fn a_reopened_chain_counts_votes_from_its_persisted_root_and_finalizes_as_before() {
    let (keys, genesis) = setup();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain");
    let mut memory = open(&genesis, Arc::new(MemoryStore::new()));
    let finalized_at_close;
    {
        let mut chain = open(&genesis, Arc::new(SledStore::open(&path).unwrap()));
        for slot in 1..=60 {
            let block = sealed(&chain, &keys, slot, 0);
            chain.import(&block).unwrap();
            memory.import(&block).unwrap();
        }
        finalized_at_close = chain.finalized_height();
        assert!(finalized_at_close > 40, "{finalized_at_close}");
        assert_eq!(finalized_at_close, memory.finalized_height());
    }
    modnode::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap();
    let mut reopened = open(&genesis, Arc::new(SledStore::open(&path).unwrap()));
    assert_eq!(reopened.finalized_height(), finalized_at_close);
    for slot in 61..=70 {
        let block = sealed(&reopened, &keys, slot, 0);
        reopened.import(&block).unwrap();
        memory.import(&block).unwrap();
        assert_eq!(
            reopened.finalized_height(),
            memory.finalized_height(),
            "slot {slot}"
        );
    }
    assert!(reopened.finalized_height() > finalized_at_close);
}

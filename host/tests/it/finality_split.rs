//! Can two honest nodes finalize conflicting blocks? Three authorities, every one following the
//! producer's rules (it builds on its own head in its own slot and moves its head only by fork
//! choice), blocks delivered in an order a slow or partitioned network can produce.
//!
//! Chains in memory (sans-IO): each authority and each follower is a [`Chain`] over a
//! [`MemoryStore`]; "delivering" a block is [`Chain::add_block`], producing one is what the
//! producer does (`ChainWorker::produce`: build on the head, seal, import).
//!
//! The safety property is checked after every step, not only at the end: no two nodes hold
//! different blocks at a height at or below both their finalized heights.

use std::sync::Arc;

use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Chain, DepositEngine, SealLock};
use modnode::net::identity::NodeIdentity;
use modnode::store::MemoryStore;

use super::equivocation::sealed;

/// Small, so a few blocks are enough to finalize.
const DEPTH: u64 = 2;

/// Authorities A, B and C: slot `s` belongs to authority `s % 3` (A: 0, 3, 6, …; B: 1, 4, 7,
/// …; C: 2, 5, 8, …).
const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// A node of the simulated network: a name for the messages, its chain, and (authorities)
/// the votes it cast by sealing, as the producer keeps them.
struct Node {
    name: &'static str,
    chain: Chain,
    lock: SealLock,
}

/// Three authority nodes (indexed like the authorities) and two followers, on one genesis.
struct Net {
    keys: Vec<NodeIdentity>,
    authorities: Vec<Node>,
    followers: Vec<Node>,
}

impl Net {
    fn new() -> Self {
        let keys: Vec<NodeIdentity> = (0..3).map(|_| NodeIdentity::generate().unwrap()).collect();
        let mut genesis = Genesis::generated("finality-split", 8, 13);
        genesis.authorities = keys.iter().map(|k| *k.node_id().as_bytes()).collect();
        genesis.finality_depth = DEPTH;
        let node = |name| Node {
            name,
            chain: Chain::open(
                Arc::new(MemoryStore::new()),
                genesis.clone(),
                DepositEngine::Native(Verification::Batched),
            )
            .unwrap(),
            lock: SealLock::default(),
        };
        Self {
            keys,
            authorities: vec![node("A"), node("B"), node("C")],
            followers: vec![node("F1"), node("F2")],
        }
    }

    /// The authority of `slot` does what the producer does in its slot (`ChainWorker::produce`):
    /// unless its lock forbids the vote, builds on its own head, seals, imports and records the
    /// vote. Returns the block (to deliver to others), `None` if it did not seal.
    fn produce(&mut self, slot: u64) -> Option<Block> {
        let me = (slot % 3) as usize;
        let node = &mut self.authorities[me];
        if !node.chain.may_seal(slot, &node.lock) {
            return None;
        }
        let vote = node.chain.vote_at(slot).unwrap();
        let block = sealed(&node.chain, &self.keys, slot, 0);
        node.chain.import(&block).unwrap();
        node.lock.sealed(vote.0, vote.1);
        self.check_safety();
        Some(block)
    }

    /// Every node hears every block it lacks (a healed network; range sync): parents first.
    fn heal(&mut self, blocks: &[Block]) {
        for to in 0..3 {
            self.deliver_to_authority(to, &blocks.iter().collect::<Vec<_>>());
        }
        for to in 0..2 {
            self.deliver_to_follower(to, &blocks.iter().collect::<Vec<_>>());
        }
    }

    /// Delivers `blocks` (parents first) to authority `to` (an index) — as gossip or range
    /// sync would; fork choice decides what the node does with them.
    fn deliver_to_authority(&mut self, to: usize, blocks: &[&Block]) {
        for block in blocks {
            // Refusals (a branch below the node's finalized height) are the node's rules too.
            let _ = self.authorities[to].chain.add_block(block);
            self.check_safety();
        }
    }

    /// Delivers `blocks` (parents first) to follower `to` (0: F1, 1: F2).
    fn deliver_to_follower(&mut self, to: usize, blocks: &[&Block]) {
        for block in blocks {
            let _ = self.followers[to].chain.add_block(block);
            self.check_safety();
        }
    }

    /// Safety: no two nodes hold different blocks at a height at or below both their
    /// finalized heights.
    fn check_safety(&self) {
        let nodes: Vec<&Node> = self.authorities.iter().chain(&self.followers).collect();
        for (i, one) in nodes.iter().enumerate() {
            for other in nodes.iter().skip(i + 1) {
                let common = one
                    .chain
                    .finalized_height()
                    .min(other.chain.finalized_height());
                for height in 1..=common {
                    let mine = one.chain.block_at(height).unwrap().map(|b| b.hash());
                    let theirs = other.chain.block_at(height).unwrap().map(|b| b.hash());
                    assert_eq!(
                        mine,
                        theirs,
                        "chain split: {} (finalized {}) and {} (finalized {}) finalized different \
                         blocks at height {height}",
                        one.name,
                        one.chain.finalized_height(),
                        other.name,
                        other.chain.finalized_height(),
                    );
                }
            }
        }
    }
}

/// The chain split seen once in a starved 4-node devnet, rebuilt step by step with honest
/// authorities only. A network cut puts {A, B, F1} on one side and {C, F2} on the other, and A
/// is slow: it misses B's block on its own side and later hears C's side.
///
/// - slot 2: C builds Y1 on genesis; only F2 hears it.
/// - slot 3: A builds X1 on genesis (it never saw Y1); B and F1 hear it.
/// - slot 4: B builds X2 on X1; F1 hears it; A does not (starved).
/// - slot 5: C builds Y2 on Y1. A hears Y1 and Y2: a longer chain than its X1, so fork choice
///   moves A to Y (nothing is final on A yet: that is allowed and needed for liveness).
/// - slot 6: A builds Y3 on Y2 in its slot, as the producer does; C and F2 hear it.
/// - slot 7: B builds X3 on X2 (its side, it never heard Y); F1 hears it. F1's X1 is sealed by
///   A and built on by B — a majority of 3 — and `DEPTH` below F1's head: final.
/// - slot 8: C builds Y4 on Y3; F2 hears it. F2's Y1 is sealed by C and built on by A — a
///   majority of 3 — and `DEPTH` below F2's head: final.
///
/// Under rolling finality (every seal a vote for every block under it) F1 finalized X1 and F2
/// Y1, both at height 1 (already A and B, at slot 7): two honest nodes with conflicting final
/// blocks that no fork choice could ever bring together. Every authority obeyed the producer's
/// rules; A "sealed on both sides" at different slots without equivocating. With FFG finality
/// (`chain::finality`) X1 is only justified, nothing is final, and after the heal every node
/// moves to Y (justified at a later epoch), every authority seals there and finality resumes.
#[test]
fn honest_authorities_never_let_two_nodes_finalize_conflicting_blocks() {
    let mut net = Net::new();
    let y1 = net.produce(2).expect("the producer sealed");
    net.deliver_to_follower(1, &[&y1]);

    let x1 = net.produce(3).expect("the producer sealed");
    net.deliver_to_authority(B, &[&x1]);
    net.deliver_to_follower(0, &[&x1]);

    let x2 = net.produce(4).expect("the producer sealed");
    net.deliver_to_follower(0, &[&x2]);

    let y2 = net.produce(5).expect("the producer sealed");
    net.deliver_to_follower(1, &[&y2]);
    net.deliver_to_authority(A, &[&y1, &y2]);
    assert_eq!(
        net.authorities[A].chain.head().hash,
        y2.hash(),
        "fork choice moved A to the longer branch"
    );

    let y3 = net.produce(6).expect("the producer sealed");
    assert_eq!(y3.header.parent_hash, y2.hash());
    net.deliver_to_authority(C, &[&y3]);
    net.deliver_to_follower(1, &[&y3]);

    let x3 = net.produce(7).expect("the producer sealed");
    net.deliver_to_follower(0, &[&x3]);

    let y4 = net.produce(8).expect("the producer sealed");
    net.deliver_to_follower(1, &[&y4]);

    // Before the fix F1 had finalized X1 and F2 Y1 here (the check above failed at slot 7).
    // Now X1 is only justified (epoch 1's votes by A and B) and nothing voted from it.
    assert_eq!(net.followers[0].chain.finalized_height(), 0);
    assert_eq!(net.followers[1].chain.finalized_height(), 0);

    // Heal: everyone hears everything and fork choice picks Y, justified at epoch 2 (A and C
    // voted in slots 6 and 8); X is justified at epoch 1 only.
    let mut all = vec![y1, x1, x2, y2, y3, x3, y4];
    net.heal(&all);
    let head = net.authorities[C].chain.head();
    assert_eq!(head.hash, all[6].hash());
    for node in net.authorities.iter().chain(&net.followers) {
        assert_eq!(node.chain.head(), head, "{} did not move to Y", node.name);
    }
    // And the chain is live again: every authority seals on Y, and finality moves on.
    for slot in 9..=30 {
        let block = net
            .produce(slot)
            .unwrap_or_else(|| panic!("authority {} did not seal at slot {slot}", slot % 3));
        net.heal(std::slice::from_ref(&block));
        all.push(block);
    }
    let head = net.authorities[A].chain.head();
    for node in net.authorities.iter().chain(&net.followers) {
        assert_eq!(node.chain.head(), head, "{}", node.name);
        assert!(
            node.chain.finalized_height() >= head.height - 7,
            "{}: finalized {} of {}",
            node.name,
            node.chain.finalized_height(),
            head.height
        );
    }
}

//! On-chain governance at the chain level: no upgrade reaches its height unless a majority of
//! the authorities attested it ready, a majority can revoke one before the gate, one authority
//! cannot clog the schedule, and a module of the wrong kind is never scheduled by this node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use modnode::chain::block::{Block, Seal};
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Chain, DepositEngine, DepositModules, ImportError, ProposeError};
use modnode::hashes::ModuleHash;
use modnode::net::identity::NodeIdentity;
use modnode::runtime::Kind;
use modnode::state::UpgradeOp;
use modnode::state::schedule::{Action, DropReason, ScheduleError};
use modnode::store::MemoryStore;

const V1: ModuleHash = ModuleHash([1; 32]);
const V2: ModuleHash = ModuleHash([2; 32]);

/// Deposits engines by hash: what a node holds compiled and warmed.
#[derive(Default)]
struct Held(Mutex<HashMap<ModuleHash, DepositEngine>>);

impl Held {
    fn with(hashes: &[ModuleHash]) -> Arc<Self> {
        let held = Self::default();
        for (i, h) in hashes.iter().enumerate() {
            let v = if i % 2 == 0 {
                Verification::OneByOne
            } else {
                Verification::Batched
            };
            held.0.lock().unwrap().insert(*h, DepositEngine::Native(v));
        }
        Arc::new(held)
    }
}

impl DepositModules for Held {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.0.lock().unwrap().get(hash).cloned()
    }
}

fn genesis(authorities: &[&NodeIdentity]) -> Genesis {
    let mut g = Genesis::generated("governance", 8, 5);
    g.deposits_module = Some(V1.0);
    g.upgrade_lead_blocks = 3;
    g.upgrade_max_ahead_blocks = 1_000;
    g.authorities = authorities
        .iter()
        .map(|a| *a.node_id().as_bytes())
        .collect();
    g
}

fn chain(genesis: &Genesis, held: Arc<Held>) -> Chain {
    let mut chain = Chain::open(
        Arc::new(MemoryStore::new()),
        genesis.clone(),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap();
    chain.set_deposit_modules(held);
    chain
}

fn op(module: ModuleHash, height: u64) -> UpgradeOp {
    UpgradeOp {
        kind: Kind::Deposits,
        module,
        height,
    }
}

/// A solo chain holding V1 and V2 whose operator proposed V2 at `h`, two blocks on: the
/// upgrade is scheduled.
fn with_v2_scheduled_at(genesis: &Genesis, h: u64) -> Chain {
    let mut a = chain(genesis, Held::with(&[V1, V2]));
    a.propose_upgrade(op(V2, h)).unwrap();
    extend_solo(&mut a, 2).unwrap();
    assert_eq!(a.schedule().module_at(Kind::Deposits, h), Some(V2));
    a
}

/// The solo producer of an unpermissioned chain builds and imports `n` blocks.
fn extend_solo(chain: &mut Chain, n: u64) -> Result<(), ImportError> {
    for _ in 0..n {
        let slot = chain.head().slot + 1;
        let block = chain.build_block(slot, 0, chain.eth1_data(), Vec::new())?;
        chain.import(&block)?;
    }
    Ok(())
}

#[test]
fn an_upgrade_the_producer_does_not_hold_ready_is_dropped_at_the_gate_and_the_chain_goes_on() {
    // Before the readiness gate this chain scheduled V2, which no producer holds, and every
    // node stopped at its height for good (ModuleMissing with nobody able to produce).
    let g = genesis(&[]);
    let mut a = chain(&g, Held::with(&[V1]));
    let h = 10;
    a.propose_upgrade(op(V2, h)).unwrap();
    extend_solo(&mut a, 1).unwrap();
    assert_eq!(a.schedule().module_at(Kind::Deposits, h), Some(V2));
    extend_solo(&mut a, h + 2).expect("the chain goes on past the dropped upgrade's height");
    assert_eq!(a.head().height, h + 3);
    assert_eq!(a.schedule().module_at(Kind::Deposits, h), Some(V1));
    let dropped = &a.schedule().dropped;
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0].op, op(V2, h));
    assert_eq!(dropped[0].reason, DropReason::NotReady);
    assert_eq!(dropped[0].at, h - g.upgrade_lead_blocks);
}

#[test]
fn an_upgrade_the_producer_holds_is_attested_in_its_blocks_and_activates() {
    let g = genesis(&[]);
    let mut a = chain(&g, Held::with(&[V1, V2]));
    let h = 10;
    a.propose_upgrade(op(V2, h)).unwrap();
    let slot = a.head().slot + 1;
    let block = a.build_block(slot, 0, a.eth1_data(), Vec::new()).unwrap();
    assert_eq!(block.body.upgrade_votes, vec![op(V2, h)]);
    assert_eq!(block.body.ready, vec![op(V2, h)]);
    a.import(&block).unwrap();
    extend_solo(&mut a, h).unwrap();
    assert_eq!(a.schedule().module_at(Kind::Deposits, h), Some(V2));
    assert!(a.schedule().dropped.is_empty());
    // A follower replays the attestations from the blocks alone, holding nothing but V1 and V2.
    let mut b = chain(&g, Held::with(&[V1, V2]));
    for height in 1..=a.head().height {
        b.import(&a.block_at(height).unwrap().unwrap()).unwrap();
    }
    assert_eq!(b.head(), a.head());
}

#[test]
fn a_revocation_works_before_the_gate_and_is_refused_after() {
    let g = genesis(&[]);
    let h = 12;
    let mut a = with_v2_scheduled_at(&g, h);
    // Revoking something that is not scheduled is refused at once.
    assert!(matches!(
        a.propose_cancel(op(V1, h)),
        Err(ProposeError::Schedule(
            ScheduleError::NothingToCancel { .. }
        ))
    ));
    a.propose_cancel(op(V2, h)).unwrap();
    extend_solo(&mut a, 1).unwrap();
    let s = a.schedule();
    assert_eq!(s.module_at(Kind::Deposits, h), Some(V1));
    assert_eq!(s.dropped.len(), 1);
    assert_eq!(s.dropped[0].reason, DropReason::Cancelled);
    extend_solo(&mut a, h).unwrap();
    assert!(a.head().height > h);

    // Scheduled again; past h − lead a revocation comes too late and the upgrade activates.
    let h = a.head().height + 8;
    a.propose_upgrade(op(V2, h)).unwrap();
    extend_solo(&mut a, 1).unwrap();
    let to_gate = h - g.upgrade_lead_blocks - a.head().height;
    extend_solo(&mut a, to_gate).unwrap();
    assert!(matches!(
        a.propose_cancel(op(V2, h)),
        Err(ProposeError::Schedule(ScheduleError::TooLate { .. }))
    ));
    extend_solo(&mut a, g.upgrade_lead_blocks + 1).unwrap();
    assert_eq!(a.schedule().module_at(Kind::Deposits, h), Some(V2));
}

#[test]
fn a_revoked_upgrade_stays_revoked_although_this_node_proposed_it() {
    // The operator proposed V2 at h and then revoked it. The node's own standing proposal
    // voted it back into the schedule in the next block, and V2 activated at h anyway.
    let g = genesis(&[]);
    let h = 12;
    let mut a = with_v2_scheduled_at(&g, h);
    a.propose_cancel(op(V2, h)).unwrap();
    assert!(
        !a.proposals()
            .iter()
            .any(|(action, p)| *action == Action::Upgrade && *p == op(V2, h)),
        "the revoke withdraws this node's own vote for the upgrade: {:?}",
        a.proposals()
    );
    extend_solo(&mut a, 1).unwrap();
    assert_eq!(a.schedule().module_at(Kind::Deposits, h), Some(V1));
    // Proposing the revoked upgrade again is refused, naming why; another height is not.
    let err = a.propose_upgrade(op(V2, h)).unwrap_err();
    assert!(
        matches!(err, ProposeError::Revoked { height, .. } if height == h),
        "{err}"
    );
    assert!(err.to_string().contains("revoked on chain"), "{err}");
    // No later block votes for it again, and h runs V1.
    let cancelled_at = a.head().height;
    extend_solo(&mut a, h + 1 - cancelled_at).unwrap();
    for height in cancelled_at + 1..=a.head().height {
        let block = a.block_at(height).unwrap().unwrap();
        assert!(
            !block.body.upgrade_votes.contains(&op(V2, h)),
            "block {height} votes for the revoked upgrade again"
        );
    }
    assert!(a.head().height > h);
    assert_eq!(a.schedule().module_at(Kind::Deposits, h), Some(V1));
    let s = a.schedule();
    assert!(
        s.dropped
            .iter()
            .any(|d| d.op == op(V2, h) && d.reason == DropReason::Cancelled),
        "{:?}",
        s.dropped
    );
    // Proposing it again is up to the schedule's rules: here, too late for h.
    assert!(matches!(
        a.propose_upgrade(op(V2, h)),
        Err(ProposeError::Schedule(ScheduleError::TooLate { .. }))
    ));
}

/// Three authorities, each its own node (chain) importing the others' blocks.
struct Net {
    keys: Vec<NodeIdentity>,
    nodes: Vec<Chain>,
    slot: u64,
}

impl Net {
    fn new(held: &[ModuleHash]) -> Self {
        let keys: Vec<NodeIdentity> = (0..3).map(|_| NodeIdentity::generate().unwrap()).collect();
        let g = genesis(&keys.iter().collect::<Vec<_>>());
        let nodes = (0..3).map(|_| chain(&g, Held::with(held))).collect();
        Self {
            keys,
            nodes,
            slot: 0,
        }
    }

    /// The next slot's authority builds, seals and publishes a block; every node imports it.
    fn step(&mut self) -> Block {
        self.slot += 1;
        let who = usize::try_from(self.slot % 3).unwrap();
        let proposer = u32::try_from(who).unwrap();
        let node = &self.nodes[who];
        let mut block = node
            .build_block(self.slot, proposer, node.eth1_data(), Vec::new())
            .unwrap();
        block.seal = Seal::Ed25519(
            self.keys[who]
                .sign(&node.seal_message(&block.hash()))
                .unwrap(),
        );
        for node in &mut self.nodes {
            node.import(&block).unwrap();
        }
        block
    }
}

#[test]
fn junk_votes_from_one_authority_do_not_block_a_majority_upgrade() {
    let mut net = Net::new(&[V1, V2]);
    // Authority 2 proposes 16 junk upgrades; parking them near u64::MAX is refused outright.
    assert!(matches!(
        net.nodes[2].propose_upgrade(op(ModuleHash([0xee; 32]), u64::MAX - 1)),
        Err(ProposeError::Schedule(ScheduleError::TooFar { .. }))
    ));
    for i in 0..16u8 {
        net.nodes[2]
            .propose_upgrade(op(ModuleHash([0x80 + i; 32]), 900))
            .unwrap();
    }
    // Its blocks carry at most its quota of pending operations.
    for _ in 0..12 {
        net.step();
    }
    let s = net.nodes[0].schedule();
    let own = s.pending.iter().filter(|p| p.voters == vec![2]).count();
    assert_eq!(
        own,
        usize::from(net.nodes[0].genesis().upgrade_open_per_authority)
    );
    // Two of three authorities still schedule their upgrade, and it activates.
    let h = net.slot + 20;
    for node in &mut net.nodes[..2] {
        node.propose_upgrade(op(V2, h)).unwrap();
    }
    while net.nodes[0].head().height < h {
        net.step();
    }
    for node in &net.nodes {
        assert_eq!(node.schedule().module_at(Kind::Deposits, h), Some(V2));
        assert!(node.schedule().dropped.is_empty());
        assert_eq!(node.head(), net.nodes[0].head());
    }
}

#[test]
fn an_upgrade_only_a_minority_of_authorities_holds_is_dropped_on_every_node() {
    // Authorities 0 and 1 vote for V2 (their operator typed a hash that only node 0 holds, say),
    // but only node 0 can attest it: the gate drops it and nobody stops at its height.
    let mut net = Net::new(&[V1]);
    net.nodes[0] = {
        let g = net.nodes[0].genesis().clone();
        chain(&g, Held::with(&[V1, V2]))
    };
    let h = 15;
    for node in &mut net.nodes[..2] {
        node.propose_upgrade(op(V2, h)).unwrap();
    }
    while net.nodes[0].head().height < h + 2 {
        net.step();
    }
    for node in &net.nodes {
        let s = node.schedule();
        assert_eq!(s.module_at(Kind::Deposits, h), Some(V1));
        assert_eq!(s.dropped.len(), 1, "{:?}", s.dropped);
        assert_eq!(s.dropped[0].reason, DropReason::NotReady);
        assert_eq!(s.dropped[0].ready, 1);
    }
}

#[test]
fn the_operators_proposals_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let g = genesis(&[]);
    let open = || {
        let store = Arc::new(modnode::store::SledStore::open(dir.path()).unwrap());
        let mut chain = Chain::open(
            store,
            g.clone(),
            DepositEngine::Native(Verification::Batched),
        )
        .unwrap();
        chain.set_deposit_modules(Held::with(&[V1, V2]));
        chain
    };
    let mut a = open();
    a.propose_upgrade(op(V2, 40)).unwrap();
    a.propose_cancel(op(V1, 0)).unwrap_err();
    drop(a);
    modnode::store::wait_released(dir.path(), std::time::Duration::from_secs(10)).unwrap();
    let mut a = open();
    assert_eq!(
        a.proposals(),
        &[(modnode::state::schedule::Action::Upgrade, op(V2, 40))]
    );
    // And its blocks go on voting for it.
    extend_solo(&mut a, 1).unwrap();
    assert_eq!(a.schedule().module_at(Kind::Deposits, 40), Some(V2));
}

#[test]
fn a_module_of_another_kind_is_refused_at_propose_and_never_attested_so_never_activated() {
    use sha2::{Digest, Sha256};

    use super::artifact;
    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(super::node_agent(dir.path()));
    // The node holds the bytes (embedded): the operator's typo is refused, naming both kinds.
    let policy = ModuleHash(Sha256::digest(artifact("gossip-policy-v2")).into());
    let err = agent.prepare_as(Kind::Deposits, &policy).unwrap_err();
    assert!(
        err.contains("is a gossip-policy module, not a deposits module"),
        "{err}"
    );
    assert!(agent.prepare_local(&policy).unwrap());
    assert!(!DepositModules::is_ready(agent.as_ref(), &policy));

    // Even scheduled by a majority that bypassed the check (a modified node), no node attests
    // it: the gate drops it and the chain goes on past its height.
    let mut g = Genesis::generated("governance-kind", 8, 5);
    g.upgrade_lead_blocks = 3;
    let mut a = Chain::open(
        Arc::new(MemoryStore::new()),
        g,
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap();
    a.set_deposit_modules(agent);
    let h = 8;
    a.propose_upgrade(op(policy, h)).unwrap();
    extend_solo(&mut a, h + 2).expect("no halt at the height of a wrong-kind upgrade");
    assert_eq!(a.schedule().module_at(Kind::Deposits, h), None);
    assert_eq!(a.schedule().dropped[0].reason, DropReason::NotReady);
}

#[test]
fn a_deposits_module_that_cannot_finish_a_full_block_is_refused_at_propose() {
    use sha2::{Digest, Sha256};

    use super::artifact;
    let dir = tempfile::tempdir().unwrap();
    // The chain's budgets: the engine profile's, growing with the block.
    let runtime = modnode::runtime::Runtime::new(Default::default()).unwrap();
    let agent = super::node_agent_on(dir.path(), runtime).with_max_deposits(4_096);
    // The modules in the tree fit a block of the largest maximum a genesis may set.
    for name in ["deposits-v1", "deposits-v2"] {
        let hash = ModuleHash(Sha256::digest(artifact(name)).into());
        assert!(agent.prepare_as(Kind::Deposits, &hash).unwrap(), "{name}");
        agent
            .check_deposit_cost(&hash, 1)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // A module verifying each deposit once per slot (1M fuel each): at slot 12 it needs 12M
    // fuel per deposit, 4x the per-deposit budget. Such a module would run out of fuel on the
    // first full block and halt the chain there.
    let fixture = artifact("fixture-bls-loop");
    let hash = ModuleHash(Sha256::digest(&fixture).into());
    agent
        .accept_fetched(&hash, &fixture, "test")
        .expect("prepared");
    let err = agent.check_deposit_cost(&hash, 12).unwrap_err();
    assert!(err.contains("fuel per deposit"), "{err}");
    assert!(err.contains("4096 deposits"), "{err}");
}

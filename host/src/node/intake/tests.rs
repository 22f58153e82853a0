//! The block intake in virtual time, no sockets: the hostile-peer block cases of
//! `tests/it/hostile.rs` and `tests/it/network.rs` (which keep their socket versions), and
//! 10^5 hostile blocks against the bounds.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use modnode_gossip::MessageId;
use modnode_gossip::policy::MessageKind;
use modnode_peers::NodeId;

use super::*;
use crate::chain::block::{Seal, StateRoot};
use crate::chain::native_deposits::Verification;
use crate::chain::{Chain, DepositEngine, ForkChoiceError, ImportError, workload};
use crate::net::identity::NodeIdentity;
use crate::store::MemoryStore;

const GENESIS_MS: u64 = 1_000_000;
const SLOT_MS: u64 = 1_000;

/// An authority's chain in memory (slots of 1 s from `GENESIS_MS`) and an intake for it.
struct Fixture {
    authority: NodeIdentity,
    chain: Chain,
    intake: BlockIntake,
}

impl Fixture {
    fn new() -> Self {
        Self::with_limits(IntakeLimits::default())
    }

    fn with_limits(limits: IntakeLimits) -> Self {
        let authority = NodeIdentity::generate().unwrap();
        let mut genesis = Genesis::generated("intake", 8, 7);
        genesis.authorities = vec![*authority.node_id().as_bytes()];
        genesis.genesis_time_ms = GENESIS_MS;
        genesis.slot_ms = SLOT_MS;
        let chain = Chain::open(
            Arc::new(MemoryStore::new()),
            genesis.clone(),
            DepositEngine::Native(Verification::Batched),
        )
        .unwrap();
        let intake = BlockIntake::new(genesis, chain.genesis_hash(), limits);
        Self {
            authority,
            chain,
            intake,
        }
    }

    /// The next block on the head at `slot`, sealed by `who`.
    fn sealed_by(&self, slot: u64, who: &NodeIdentity) -> Block {
        let mut block = self
            .chain
            .build_block(slot, 0, self.chain.eth1_data(), vec![])
            .unwrap();
        reseal(&self.chain, &mut block, who);
        block
    }

    fn sealed(&self, slot: u64) -> Block {
        self.sealed_by(slot, &self.authority)
    }

    fn drain(&mut self) -> Vec<IntakeAction> {
        std::iter::from_fn(|| self.intake.poll_action()).collect()
    }
}

fn reseal(chain: &Chain, block: &mut Block, who: &NodeIdentity) {
    block.seal = Seal::Ed25519(who.sign(&chain.seal_message(&block.hash())).unwrap());
}

/// The start of `slot` (Unix ms).
fn at(slot: u64) -> u64 {
    GENESIS_MS + slot * SLOT_MS
}

fn id_of(payload: &[u8]) -> MessageId {
    crate::net::gossip::message_id(MessageKind::Block, payload)
}

fn peer(n: u32) -> NodeId {
    let mut id = [0; 32];
    id[..4].copy_from_slice(&n.to_le_bytes());
    id
}

/// `block` with its real header and seal but another body.
fn body_swapped(block: &Block) -> Block {
    let mut swapped = block.clone();
    swapped
        .body
        .deposits
        .push(crate::chain::eth1::ProvenDeposit {
            data: workload::new_validator(77, 32_000_000_000, [0; 4]),
            proof: [[0; 32]; 33],
        });
    assert_eq!(swapped.hash(), block.hash());
    swapped
}

fn penalised(actions: &[IntakeAction]) -> Vec<NodeId> {
    actions
        .iter()
        .filter_map(|a| match a {
            IntakeAction::Penalise { peer, .. } => Some(*peer),
            _ => None,
        })
        .collect()
}

fn imports(actions: &[IntakeAction]) -> Vec<Block> {
    actions
        .iter()
        .filter_map(|a| match a {
            IntakeAction::Import { block, .. } => Some((**block).clone()),
            _ => None,
        })
        .collect()
}

fn verdicts(actions: &[IntakeAction]) -> Vec<(MessageId, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            IntakeAction::Verdict { id, relay } => Some((*id, *relay)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_body_swapped_block_is_refused_before_import_and_only_its_sender_penalised() {
    let mut f = Fixture::new();
    let real = f.sealed(2);
    let forged = body_swapped(&real);
    let (honest, attacker) = (peer(1), peer(2));

    let payload = real.encode();
    f.intake
        .handle_block(id_of(&payload), honest, &payload, at(2));
    let actions = f.drain();
    assert_eq!(imports(&actions), vec![real.clone()]);
    assert!(penalised(&actions).is_empty());

    let payload = forged.encode();
    assert_eq!(id_of(&payload), id_of(&real.encode()), "one id for both");
    f.intake
        .handle_block(id_of(&payload), attacker, &payload, at(2));
    let actions = f.drain();
    assert!(imports(&actions).is_empty(), "the forgery went to import");
    assert_eq!(penalised(&actions), vec![attacker]);
    assert_eq!(verdicts(&actions), vec![(id_of(&payload), false)]);
    assert!(actions.contains(&IntakeAction::Count(IntakeCount::Rejected)));
}

#[test]
fn a_block_sealed_by_another_key_is_refused_and_its_sender_penalised() {
    let mut f = Fixture::new();
    let forger = NodeIdentity::generate().unwrap();
    let block = f.sealed_by(1, &forger);
    let payload = block.encode();
    f.intake
        .handle_block(id_of(&payload), peer(3), &payload, at(1));
    let actions = f.drain();
    assert!(imports(&actions).is_empty());
    assert_eq!(penalised(&actions), vec![peer(3)]);
    assert!(
        actions.iter().any(|a| matches!(a,
            IntakeAction::Penalise { reason, .. } if reason.contains("not properly sealed"))),
        "{actions:?}"
    );
    // Unsigned on a chain with an authority: the same.
    let mut unsigned = block;
    unsigned.seal = Seal::Unsigned;
    let payload = unsigned.encode();
    f.intake
        .handle_block(id_of(&payload), peer(4), &payload, at(1));
    assert_eq!(penalised(&f.drain()), vec![peer(4)]);
}

#[test]
fn a_block_60_slots_ahead_is_refused_and_its_sender_penalised() {
    let mut f = Fixture::new();
    let now = at(5);
    let early = f.sealed(5 + 60);
    let payload = early.encode();
    f.intake
        .handle_block(id_of(&payload), peer(5), &payload, now);
    let actions = f.drain();
    assert!(imports(&actions).is_empty());
    assert_eq!(penalised(&actions), vec![peer(5)]);
    assert!(actions.contains(&IntakeAction::Count(IntakeCount::PeerFutureBlock)));
    assert_eq!(f.intake.sizes().held, 0, "a far-future block was held");
}

#[test]
fn an_early_block_is_held_until_its_slot_starts_then_imported_unpenalised() {
    let mut f = Fixture::new();
    let block = f.sealed(8);
    let payload = block.encode();
    let id = id_of(&payload);
    // Its slot starts 3 s from now: only early (our clock may be the one behind).
    let now = at(5);
    f.intake.handle_block(id, peer(6), &payload, now);
    assert!(f.drain().is_empty(), "no verdict, import or penalty yet");
    let release = at(8) - crate::clock::CLOCK_SKEW_MS;
    assert_eq!(f.intake.poll_timeout(), Some(release));
    f.intake.handle_time(release - 1);
    assert!(f.drain().is_empty(), "released before its slot");
    f.intake.handle_time(release);
    let actions = f.drain();
    assert_eq!(imports(&actions), vec![block.clone()]);
    assert_eq!(f.intake.poll_timeout(), None);
    f.intake
        .handle_added(id, peer(6), &block, &Ok(Added::Stored));
    let actions = f.drain();
    assert_eq!(verdicts(&actions), vec![(id, true)]);
    assert!(penalised(&actions).is_empty());
}

#[test]
fn undecodable_bytes_are_refused_and_their_sender_penalised() {
    let mut f = Fixture::new();
    let mut payload = f.sealed(1).encode();
    payload.push(0);
    f.intake
        .handle_block(id_of(&payload), peer(7), &payload, at(1));
    let actions = f.drain();
    assert_eq!(penalised(&actions), vec![peer(7)]);
    assert_eq!(f.intake.stats().shell_checked, 0);
}

/// The chain worker's answer decides: the sans-IO form of `local_failures_do_not_penalise_the_sender`.
#[test]
fn the_workers_answer_decides_relay_sync_and_penalty() {
    let mut f = Fixture::new();
    let block = f.sealed(1);
    let payload = block.encode();
    let id = id_of(&payload);
    let hash = || BlockHash::new([0xab; 32]);
    // (what, the worker's answer, relayed, sender penalised, synced from)
    type Case = (&'static str, Result<Added, WorkerError>, bool, bool, bool);
    let cases: Vec<Case> = vec![
        ("known", Ok(Added::Known), true, false, false),
        ("side branch", Ok(Added::Stored), true, false, false),
        (
            "unknown parent",
            Err(WorkerError::Block(ForkChoiceError::UnknownParent {
                hash: hash(),
                height: 1,
                parent: hash(),
            })),
            false,
            false,
            true,
        ),
        (
            "stopped worker",
            Err(WorkerError::Stopped),
            false,
            false,
            false,
        ),
        ("busy worker", Err(WorkerError::Busy), false, false, false),
        (
            "invalid",
            Err(WorkerError::Block(ForkChoiceError::Invalid(
                ImportError::BadBody {
                    hash: hash(),
                    reason: "swapped".into(),
                },
            ))),
            false,
            true,
            false,
        ),
    ];
    for (what, result, relay, penalty, sync) in cases {
        f.intake.handle_block(id, peer(8), &payload, at(1));
        assert_eq!(imports(&f.drain()).len(), 1, "{what}");
        f.intake.handle_added(id, peer(8), &block, &result);
        let actions = f.drain();
        assert_eq!(verdicts(&actions), vec![(id, relay)], "{what}");
        assert_eq!(!penalised(&actions).is_empty(), penalty, "{what}");
        assert_eq!(
            actions.contains(&IntakeAction::SyncFrom {
                peer: peer(8),
                height: 1,
                hash: block.hash(),
            }),
            sync,
            "{what}"
        );
        assert_eq!(f.intake.sizes(), IntakeSizes::default(), "{what}");
    }
}

#[test]
fn one_peer_flooding_blocks_cannot_take_the_import_slots_of_another() {
    let mut f = Fixture::new();
    let (flooder, honest) = (peer(9), peer(10));
    let mut sent = 0;
    // Distinct valid blocks (one per slot, all due) the worker has not answered yet.
    for slot in 1..=(MAX_IMPORTING_PER_PEER as u64 + 4) {
        let payload = f.sealed(slot).encode();
        f.intake
            .handle_block(id_of(&payload), flooder, &payload, at(30));
        sent += 1;
    }
    let actions = f.drain();
    assert_eq!(imports(&actions).len(), MAX_IMPORTING_PER_PEER);
    assert_eq!(verdicts(&actions).len(), sent - MAX_IMPORTING_PER_PEER);
    assert!(
        penalised(&actions).is_empty(),
        "a busy intake blamed the sender"
    );
    let payload = f.sealed(29).encode();
    f.intake
        .handle_block(id_of(&payload), honest, &payload, at(30));
    assert_eq!(
        imports(&f.drain()).len(),
        1,
        "the honest peer was crowded out"
    );
}

#[test]
fn a_peer_that_leaves_has_its_held_blocks_dropped_unrelayed() {
    let mut f = Fixture::new();
    let payload = f.sealed(8).encode();
    let id = id_of(&payload);
    f.intake.handle_block(id, peer(11), &payload, at(5));
    assert_eq!(f.intake.sizes().held, 1);
    f.intake.handle_peer_left(&peer(11));
    assert_eq!(verdicts(&f.drain()), vec![(id, false)]);
    assert_eq!(f.intake.sizes(), IntakeSizes::default());
    f.intake.handle_time(at(9));
    assert!(f.drain().is_empty());
}

/// What a hostile block of the big test is, and who sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hostile {
    Undecodable,
    BadSeal,
    BodySwap,
    FarFuture,
    UnknownParent,
    Early,
    Replay,
}

/// 10^5 blocks from 50 hostile and 10 honest peers: bad seals, body swaps, far-future
/// slots and garbage from the hostile ones; unknown parents, early blocks and replays of a
/// valid block from the honest ones (all legal). Virtual time advances 1 ms per block; a fake
/// chain worker answers one import per four blocks, so imports pile up against their bounds.
/// Checked after every block: state within its bounds; at the end: every penalty names a
/// hostile sender (one per hostile block), every block got exactly one verdict, and the work
/// per block is bounded (one decode, at most one shell check).
#[test]
fn hostile_blocks_at_scale_keep_state_bounded_and_blame_their_senders() {
    const BLOCKS: u64 = 100_000;
    let mut f = Fixture::new();
    let limits = IntakeLimits::default();
    let start = at(10);
    let other = NodeIdentity::generate().unwrap();

    let valid = f.sealed(1);
    let bad_seal = f.sealed_by(2, &other).encode();
    let body_swap = body_swapped(&f.sealed(3)).encode();
    let mut far = f.sealed(4);
    far.header.slot = 10_000_000;
    let far = far.encode();
    let mut garbage = valid.encode();
    garbage.truncate(100);
    // Sealed blocks with parents nobody has: slots already started all along.
    let orphans: Vec<Vec<u8>> = (0..32u8)
        .map(|n| {
            let mut b = f.sealed(5);
            b.header.parent_hash = BlockHash::new([n; 32]);
            reseal(&f.chain, &mut b, &f.authority);
            b.encode()
        })
        .collect();
    let orphan_hashes: BTreeSet<BlockHash> = orphans
        .iter()
        .map(|p| Block::decode(p, 16).unwrap().hash())
        .collect();
    // Early blocks: a slot 2 to 9 s ahead of the time they are sent; re-made every second.
    let early_at = |f: &Fixture, now: u64, n: u64| {
        let slot = (now - GENESIS_MS) / SLOT_MS + 2 + n % 8;
        let mut b = f.sealed(slot);
        b.header.state_root = StateRoot::new([n as u8; 32]);
        reseal(&f.chain, &mut b, &f.authority);
        b.encode()
    };
    let mut early_pool: Vec<Vec<u8>> = Vec::new();

    let hostile_peer = |i: u64| peer(1_000 + (i % 50) as u32);
    let honest_peer = |i: u64| peer(2_000 + (i % 10) as u32);
    let mut sent: HashMap<MessageId, u64> = HashMap::new();
    let mut verdicts_seen: HashMap<MessageId, u64> = HashMap::new();
    let mut hostile_sent = 0u64;
    let mut penalties: Vec<NodeId> = Vec::new();
    let mut worker: VecDeque<(MessageId, NodeId, Box<Block>)> = VecDeque::new();
    let mut peak = IntakeSizes::default();
    let honest: BTreeSet<NodeId> = (0..10).map(honest_peer).collect();

    let mut step = |f: &mut Fixture,
                    worker: &mut VecDeque<(MessageId, NodeId, Box<Block>)>,
                    verdicts_seen: &mut HashMap<MessageId, u64>,
                    penalties: &mut Vec<NodeId>| {
        while let Some(action) = f.intake.poll_action() {
            match action {
                IntakeAction::Import { id, from, block } => worker.push_back((id, from, block)),
                IntakeAction::Verdict { id, .. } => *verdicts_seen.entry(id).or_default() += 1,
                IntakeAction::Penalise { peer, .. } => {
                    penalties.push(peer);
                    // The driver bans the peer: it leaves.
                    f.intake.handle_peer_left(&peer);
                }
                IntakeAction::SyncFrom { .. } | IntakeAction::Count(_) => {}
            }
        }
        let sizes = f.intake.sizes();
        assert!(sizes.held <= limits.max_held, "{sizes:?}");
        assert!(
            sizes.held_by_one_peer <= limits.max_held_per_peer,
            "{sizes:?}"
        );
        assert!(sizes.importing <= limits.max_importing, "{sizes:?}");
        assert!(
            sizes.importing_for_one_peer <= limits.max_importing_per_peer,
            "{sizes:?}"
        );
        assert!(sizes.peer_entries <= 60, "{sizes:?}");
        peak = IntakeSizes {
            held: peak.held.max(sizes.held),
            importing: peak.importing.max(sizes.importing),
            ..peak
        };
    };

    for i in 0..BLOCKS {
        let now = start + i;
        if i % 1_000 == 0 {
            early_pool = (0..8).map(|n| early_at(&f, now, i + n)).collect();
        }
        let kind = [
            Hostile::Undecodable,
            Hostile::BadSeal,
            Hostile::BodySwap,
            Hostile::FarFuture,
            Hostile::UnknownParent,
            Hostile::Early,
            Hostile::Replay,
        ][(i % 7) as usize];
        let (payload, from) = match kind {
            Hostile::Undecodable => (garbage.clone(), hostile_peer(i)),
            Hostile::BadSeal => (bad_seal.clone(), hostile_peer(i)),
            Hostile::BodySwap => (body_swap.clone(), hostile_peer(i)),
            Hostile::FarFuture => (far.clone(), hostile_peer(i)),
            Hostile::UnknownParent => (orphans[(i % 32) as usize].clone(), honest_peer(i)),
            Hostile::Early => (early_pool[(i % 8) as usize].clone(), honest_peer(i)),
            Hostile::Replay => (valid.encode(), honest_peer(i)),
        };
        if !honest.contains(&from) {
            hostile_sent += 1;
        }
        // A unique id per delivery: the gossip engine delivers each message once.
        let id = MessageId::of(&i.to_le_bytes());
        sent.insert(id, i);
        f.intake.handle_block(id, from, &payload, now);
        f.intake.handle_time(now);
        // The worker answers one import every fourth block.
        if i % 4 == 0
            && let Some((id, from, block)) = worker.pop_front()
        {
            let result = if orphan_hashes.contains(&block.hash()) {
                Err(WorkerError::Block(ForkChoiceError::UnknownParent {
                    hash: block.hash(),
                    height: block.header.height,
                    parent: block.header.parent_hash,
                }))
            } else {
                Ok(Added::Known)
            };
            f.intake.handle_added(id, from, &block, &result);
        }
        step(&mut f, &mut worker, &mut verdicts_seen, &mut penalties);
    }
    // Time runs on past every held block's slot; the worker answers everything.
    let end = start + BLOCKS + 20 * SLOT_MS;
    f.intake.handle_time(end);
    loop {
        step(&mut f, &mut worker, &mut verdicts_seen, &mut penalties);
        let Some((id, from, block)) = worker.pop_front() else {
            break;
        };
        f.intake.handle_added(id, from, &block, &Ok(Added::Known));
    }

    assert_eq!(
        penalties.len() as u64,
        hostile_sent,
        "one penalty per hostile block"
    );
    assert!(
        penalties.iter().all(|p| !honest.contains(p)),
        "an honest peer was penalised"
    );
    assert_eq!(verdicts_seen.len(), sent.len(), "a block got no verdict");
    assert!(
        verdicts_seen.values().all(|n| *n == 1),
        "a block got two verdicts"
    );
    assert_eq!(
        f.intake.sizes(),
        IntakeSizes::default(),
        "state left behind"
    );
    let stats = f.intake.stats();
    assert_eq!(stats.decoded, BLOCKS);
    assert!(stats.shell_checked <= BLOCKS);
    // One signature check per distinct (block, seal): the bad seal, the valid block, 32
    // orphans and 8 early blocks per 1,000 sent.
    assert!(
        stats.seals_verified <= 2 + 32 + 8 * (BLOCKS / 1_000),
        "{stats:?}"
    );
    assert_eq!(stats.penalties, hostile_sent);
    assert!(stats.imports <= BLOCKS - hostile_sent, "{stats:?}");
    // The bounds were reached (the test exercises them) and never passed (checked above).
    assert_eq!(peak.importing, limits.max_importing, "{peak:?} {stats:?}");
    assert!(
        peak.held > 0 && stats.dropped_over_bound > 0,
        "{peak:?} {stats:?}"
    );
}

/// `check_shell`, the pure check the intake applies (without its seal memory): due, early
/// with its release time, far future, swapped body, forged seal.
#[test]
fn check_shell_tells_due_early_and_each_fault_apart() {
    let f = Fixture::new();
    let genesis = f.chain.genesis().clone();
    let hash = f.chain.genesis_hash();
    let block = f.sealed(8);
    let check = |b: &Block, now| check_shell(&genesis, &hash, b, now);
    assert_eq!(check(&block, at(8)).unwrap(), Timing::Due);
    assert_eq!(
        check(&block, at(8) - crate::clock::CLOCK_SKEW_MS).unwrap(),
        Timing::Due
    );
    assert_eq!(
        check(&block, at(5)).unwrap(),
        Timing::Early {
            release_ms: at(8) - crate::clock::CLOCK_SKEW_MS
        }
    );
    assert!(matches!(
        check(&block, at(8) - crate::clock::FAR_FUTURE_MS - 1),
        Err(ShellError::FarFuture { slot: 8, .. })
    ));
    assert!(matches!(
        check(&body_swapped(&block), at(8)),
        Err(ShellError::Invalid {
            source: ImportError::BadBody { .. },
            ..
        })
    ));
    let forged = f.sealed_by(8, &NodeIdentity::generate().unwrap());
    assert!(matches!(
        check(&forged, at(8)),
        Err(ShellError::Invalid {
            source: ImportError::BadSeal { .. },
            ..
        })
    ));
}

//! Gossip policy: two phases.
//!
//! - Plans: generated (message, peers) inputs; the new version's plan must satisfy the policy
//!   contract (targets are known peers, each at most once, never the origin, quorum ≤ targets)
//!   and be deterministic (same input, same plan). A stateful (`@2.0.0`) new version is also
//!   asked on the state it reaches by hearing the case's events (duplicates from the peers
//!   that hold the message, missing messages from the failing ones, a tick): every state within
//!   the kind's bound, the plan within the contract, and the same inputs on the same state give
//!   the same plan. Plans may differ between versions; that is what an upgrade is for.
//! - Network: a small simulated network ([`modnode_gossip::sim`]) runs each version on every
//!   node (a stateful version keeping its state per node and hearing its engine's events); the
//!   new version must not deliver to fewer (message, node) pairs than the old, nor more than
//!   double the duplicate block copies. Then the same network with parent links cut while
//!   messages spread (the link a node got its latest message over breaks, both ends stay up):
//!   a spreading tree must repair itself, so the new version must still deliver every message
//!   to every node (unless the old one misses as many there too: then the network is at fault).

use std::collections::HashSet;

use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use super::runner::{CaseRun, Phase};
use super::versions::{Version, is_host_failure};
use super::{CaseInput, CheckError, Kind};
use crate::runtime::CallError;
use crate::runtime::gossip_policy::PlanShown;
use modnode_gossip::policy::{MessageKind, MessageMeta, PeerStats, PolicyEvent, SendPlan};

/// Peers of one generated plan input (at most).
const MAX_PEERS: usize = 48;

/// One generated peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerCase {
    /// Round-trip time, microseconds.
    pub rtt_us: u32,
    /// Frames queued to the peer.
    pub queue_depth: u32,
    /// Recent failed sends.
    pub recent_failures: u32,
    /// Whether the peer is known to have the message.
    pub has_message: bool,
}

/// One generated `plan` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanCase {
    /// Message kind: 0 block, 1 consensus, 2 deposit, 3 peer exchange.
    pub kind: u8,
    /// Payload size, bytes.
    pub size: u32,
    /// Published by this node.
    pub local_origin: bool,
    /// Hops so far.
    pub hops: u32,
    /// Estimated network size.
    pub network_size: u32,
    /// Id of the first peer; peer `i` has id `first_peer + i * peer_stride`.
    pub first_peer: u32,
    /// Distance between peer ids.
    pub peer_stride: u32,
    /// The peers.
    pub peers: Vec<PeerCase>,
    /// Position of the peer the message came from (ignored for local messages).
    pub origin: Option<usize>,
}

impl PlanCase {
    fn inputs(&self) -> (MessageMeta, Vec<PeerStats>) {
        let kind = match self.kind % 4 {
            0 => MessageKind::Block,
            1 => MessageKind::Consensus,
            2 => MessageKind::Deposit,
            _ => MessageKind::PeerExchange,
        };
        let meta = MessageMeta {
            kind,
            size: self.size,
            local_origin: self.local_origin,
            hops: self.hops,
            network_size: self.network_size,
        };
        let peers = (0u32..)
            .zip(&self.peers)
            .map(|(i, p)| PeerStats {
                peer: self
                    .first_peer
                    .wrapping_add(i.wrapping_mul(self.peer_stride.max(1))),
                rtt_us: p.rtt_us,
                queue_depth: p.queue_depth,
                recent_failures: p.recent_failures,
                has_message: p.has_message,
                is_origin: !self.local_origin && self.origin == usize::try_from(i).ok(),
            })
            .collect();
        (meta, peers)
    }
}

/// What a stateful policy hears before the case's plan: a tick at `hops` seconds, then a
/// duplicate from every peer that holds the message and a missing message from every peer with
/// recent failures.
fn events_of(meta: &MessageMeta, peers: &[PeerStats]) -> Vec<PolicyEvent> {
    let mut events = vec![PolicyEvent::Tick(
        u64::from(meta.hops).saturating_mul(1_000),
    )];
    for (message, p) in (0u64..).zip(peers) {
        if p.has_message {
            events.push(PolicyEvent::Duplicate {
                peer: p.peer,
                message,
                kind: meta.kind,
            });
        }
        if p.recent_failures > 0 {
            events.push(PolicyEvent::Missing {
                peer: p.peer,
                message,
                kind: meta.kind,
            });
        }
    }
    events
}

fn plan_case() -> impl Strategy<Value = PlanCase> {
    let peer = (
        prop_oneof![100u32..200_000, Just(0u32), Just(u32::MAX)],
        prop_oneof![0u32..64, Just(u32::MAX)],
        prop_oneof![4 => Just(0u32), 1 => 0u32..10, 1 => Just(u32::MAX)],
        any::<bool>(),
    )
        .prop_map(
            |(rtt_us, queue_depth, recent_failures, has_message)| PeerCase {
                rtt_us,
                queue_depth,
                recent_failures,
                has_message,
            },
        );
    (
        (
            0u8..4,
            prop_oneof![0u32..2048, 2048u32..4_000_000, Just(u32::MAX)],
            any::<bool>(),
            prop_oneof![0u32..16, Just(u32::MAX)],
            prop_oneof![0u32..10_000, Just(u32::MAX)],
        ),
        (0u32..1000, 1u32..4),
        proptest::collection::vec(peer, 0..=MAX_PEERS),
        proptest::option::of(0usize..MAX_PEERS),
    )
        .prop_map(
            |(
                (kind, size, local_origin, hops, network_size),
                (first_peer, peer_stride),
                peers,
                origin,
            )| {
                PlanCase {
                    kind,
                    size,
                    local_origin,
                    hops,
                    network_size,
                    first_peer,
                    peer_stride,
                    origin: origin.filter(|&o| o < peers.len()),
                    peers,
                }
            },
        )
}

/// Contract violations of `plan` for `peers`, in words.
fn violations(plan: &SendPlan, peers: &[PeerStats]) -> Vec<String> {
    let known: HashSet<u32> = peers.iter().map(|p| p.peer).collect();
    let origin: HashSet<u32> = peers
        .iter()
        .filter(|p| p.is_origin)
        .map(|p| p.peer)
        .collect();
    let mut seen = HashSet::new();
    let mut problems = Vec::new();
    for target in &plan.targets {
        if !known.contains(&target.peer) {
            problems.push(format!(
                "targets peer {}, which is not a known peer",
                target.peer
            ));
        }
        if origin.contains(&target.peer) {
            problems.push(format!(
                "sends back to peer {}, where the message came from",
                target.peer
            ));
        }
        if !seen.insert(target.peer) {
            problems.push(format!("targets peer {} twice", target.peer));
        }
    }
    let targets = plan.targets.len();
    if usize::try_from(plan.quorum).map_or(true, |q| q > targets) {
        problems.push(format!(
            "quorum {} exceeds its {targets} targets",
            plan.quorum
        ));
    }
    problems
}

/// Plan call result, failing on host failures (ours).
fn plan(
    version: &Version,
    meta: &MessageMeta,
    peers: &[PeerStats],
) -> Result<Result<(SendPlan, u64), CallError>, CheckError> {
    match version.plan_gossip(meta, peers) {
        Err(e) if is_host_failure(&e) => Err(CheckError::Host {
            reason: e.to_string(),
        }),
        other => Ok(other),
    }
}

/// The plan phase.
pub(crate) struct PlanCheck<'a> {
    from: &'a Version,
    to: &'a Version,
}

impl<'a> PlanCheck<'a> {
    pub(crate) fn new(from: &'a Version, to: &'a Version) -> Self {
        Self { from, to }
    }
}

impl Phase for PlanCheck<'_> {
    type Input = PlanCase;

    fn kind(&self) -> Kind {
        Kind::GossipPolicy
    }

    fn strategy(&self) -> BoxedStrategy<PlanCase> {
        plan_case().boxed()
    }

    fn wrap(input: PlanCase) -> CaseInput {
        CaseInput::GossipPlan(input)
    }

    fn run_case(&self, input: &PlanCase) -> Result<CaseRun, CheckError> {
        let (meta, peers) = input.inputs();
        let old = plan(self.from, &meta, &peers)?;
        let new = plan(self.to, &meta, &peers)?;
        let (new_plan, fuel_new) = match (&old, new) {
            (_, Ok(new)) => new,
            (Ok(_), Err(e)) => {
                return Ok(CaseRun {
                    fuel_old: 0,
                    fuel_new: 0,
                    divergence: Some(format!(
                        "the old version plans this message, the new one fails: {e}"
                    )),
                });
            }
            // Both fail: nothing to compare (the node floods instead in both cases).
            (Err(_), Err(_)) => {
                return Ok(CaseRun {
                    fuel_old: 0,
                    fuel_new: 0,
                    divergence: None,
                });
            }
        };
        let fuel_old = old.as_ref().map_or(0, |(_, fuel)| *fuel);
        let mut problems = violations(&new_plan, &peers);
        match plan(self.to, &meta, &peers)? {
            Ok((again, _)) if again == new_plan => {}
            Ok((again, _)) => problems.push(format!(
                "not deterministic: the same input gave {:?}, then {:?}",
                PlanShown(&new_plan),
                PlanShown(&again)
            )),
            Err(e) => problems.push(format!(
                "not deterministic: the same input planned once, then failed: {e}"
            )),
        }
        let events = events_of(&meta, &peers);
        match self.to.plan_gossip_on_state(&events, &meta, &peers) {
            Err(e) if is_host_failure(&e) => {
                return Err(CheckError::Host {
                    reason: e.to_string(),
                });
            }
            Err(e) => problems.push(format!(
                "fails on the state it reached by hearing {} events: {e}",
                events.len()
            )),
            Ok(None) => {}
            Ok(Some((first, again))) => {
                problems.extend(
                    violations(&first, &peers)
                        .into_iter()
                        .map(|p| format!("on its kept state {p}")),
                );
                if first != again {
                    problems.push(format!(
                        "not deterministic on its kept state: the same input and state gave \
                         {:?}, then {:?}",
                        PlanShown(&first),
                        PlanShown(&again)
                    ));
                }
            }
        }
        Ok(CaseRun {
            fuel_old,
            fuel_new,
            divergence: (!problems.is_empty())
                .then(|| format!("the new version's plan {}", problems.join("; "))),
        })
    }
}

/// A small simulated network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkCase {
    /// Topology, latency and traffic seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: u8,
    /// Neighbours per node (at most).
    pub degree: u8,
    /// Deposit-sized messages published.
    pub deposits: u8,
    /// Block-sized messages published.
    pub blocks: u8,
}

/// Network cases for a run of `cases` plan cases: each simulation is far costlier than a plan.
pub(crate) fn network_cases(cases: u32) -> u32 {
    cases.div_ceil(32).clamp(1, 8)
}

/// The network phase.
pub(crate) struct NetworkCheck {
    from: crate::runtime::gossip_policy::GossipPolicyModule,
    to: crate::runtime::gossip_policy::GossipPolicyModule,
}

impl NetworkCheck {
    pub(crate) fn new(from: &Version, to: &Version) -> Result<Self, CheckError> {
        let policy = |v: &Version| {
            v.gossip_policy().ok_or_else(|| CheckError::Host {
                reason: format!("{} is not loaded as a gossip policy", v.name),
            })
        };
        Ok(Self {
            from: policy(from)?,
            to: policy(to)?,
        })
    }

    fn simulate(
        &self,
        policy: &crate::runtime::gossip_policy::GossipPolicyModule,
        case: &NetworkCase,
        parent_cuts: usize,
    ) -> Result<modnode_gossip::sim::SimReport, CheckError> {
        let cfg = modnode_gossip::sim::SimConfig {
            nodes: usize::from(case.nodes.max(2)),
            degree: usize::from(case.degree.max(1)),
            seed: case.seed,
            parent_cuts,
            ..modnode_gossip::sim::SimConfig::default()
        };
        let scenario = modnode_gossip::sim::Scenario {
            deposits: usize::from(case.deposits),
            deposit_size: 1024,
            blocks: usize::from(case.blocks),
            block_size: 32 * 1024,
            duration: 1_000_000,
        };
        // Each node keeps its own state of a stateful policy and hears its engine's events
        // (duplicates, missing messages, peers, ticks), with the tree mechanics it declares.
        modnode_gossip::sim::run(&cfg, &scenario, |_| {
            crate::runtime::gossip_policy::KeptPolicy::new(policy)
        })
        .map_err(|e| CheckError::Host {
            reason: format!("gossip simulator: {e}"),
        })
    }
}

/// Parent links cut in the tree-repair run of a network case: one per message published, at
/// most four.
fn parent_cuts(case: &NetworkCase) -> usize {
    usize::from(case.deposits.saturating_add(case.blocks)).clamp(1, 4)
}

impl Phase for NetworkCheck {
    type Input = NetworkCase;

    fn kind(&self) -> Kind {
        Kind::GossipPolicy
    }

    fn strategy(&self) -> BoxedStrategy<NetworkCase> {
        (any::<u64>(), 4u8..=16, 2u8..=6, 0u8..=24, 1u8..=4)
            .prop_map(|(seed, nodes, degree, deposits, blocks)| NetworkCase {
                seed,
                nodes,
                degree,
                deposits,
                blocks,
            })
            .boxed()
    }

    fn wrap(input: NetworkCase) -> CaseInput {
        CaseInput::GossipNetwork(input)
    }

    fn run_case(&self, input: &NetworkCase) -> Result<CaseRun, CheckError> {
        let old = self.simulate(&self.from, input, 0)?;
        let new = self.simulate(&self.to, input, 0)?;
        let mut problems = Vec::new();
        if new.missed > old.missed {
            problems.push(format!(
                "coverage: the new version misses {} of {} (message, node) pairs, the old {}",
                new.missed, new.pairs, old.missed
            ));
        }
        if new.rmr > old.rmr + old.rmr.max(1.0) {
            problems.push(format!(
                "duplicates: {:.2} redundant block copies per node with the new version, {:.2} \
                 with the old",
                new.rmr, old.rmr
            ));
        }
        let cuts = parent_cuts(input);
        let repaired = self.simulate(&self.to, input, cuts)?;
        if repaired.missed > 0 {
            let old_cut = self.simulate(&self.from, input, cuts)?;
            if repaired.missed > old_cut.missed {
                problems.push(format!(
                    "tree repair: with {} parent links cut while messages spread, the new \
                     version misses {} of {} (message, node) pairs, the old {}",
                    repaired.cuts, repaired.missed, repaired.pairs, old_cut.missed
                ));
            }
        }
        Ok(CaseRun {
            fuel_old: 0,
            fuel_new: 0,
            divergence: (!problems.is_empty()).then(|| problems.join("; ")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use modnode_gossip::policy::{Priority, SendMode, Target};

    fn peer(peer: u32, is_origin: bool) -> PeerStats {
        PeerStats {
            peer,
            rtt_us: 1000,
            queue_depth: 0,
            recent_failures: 0,
            has_message: false,
            is_origin,
        }
    }

    fn send_plan(targets: &[u32], quorum: u32) -> SendPlan {
        SendPlan {
            targets: targets
                .iter()
                .map(|&peer| Target {
                    peer,
                    mode: SendMode::Push,
                })
                .collect(),
            quorum,
            timeout_ms: 100,
            priority: Priority::Normal,
        }
    }

    #[test]
    fn the_events_prune_holders_and_graft_failing_peers() {
        let meta = MessageMeta {
            kind: MessageKind::Block,
            size: 10,
            local_origin: false,
            hops: 2,
            network_size: 10,
        };
        let mut holder = peer(4, false);
        holder.has_message = true;
        let mut failing = peer(9, false);
        failing.recent_failures = 3;
        let events = events_of(&meta, &[holder, peer(5, true), failing]);
        assert_eq!(
            events,
            vec![
                PolicyEvent::Tick(2_000),
                PolicyEvent::Duplicate {
                    peer: 4,
                    message: 0,
                    kind: MessageKind::Block
                },
                PolicyEvent::Missing {
                    peer: 9,
                    message: 2,
                    kind: MessageKind::Block
                },
            ]
        );
    }

    #[test]
    fn every_contract_violation_is_named() {
        let peers = [peer(1, true), peer(2, false), peer(3, false)];
        assert!(violations(&send_plan(&[2, 3], 2), &peers).is_empty());
        let problems = violations(&send_plan(&[1, 2, 2, 9], 5), &peers);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("peer 1, where the message came from"));
        assert!(problems[1].contains("peer 2 twice"));
        assert!(problems[2].contains("peer 9, which is not a known peer"));
        assert!(problems[3].contains("quorum 5 exceeds its 4 targets"));
    }

    #[test]
    fn generated_plan_inputs_have_distinct_peers_and_at_most_one_origin() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        for _ in 0..200 {
            let case = plan_case().new_tree(&mut runner).unwrap().current();
            let (meta, peers) = case.inputs();
            let ids: HashSet<u32> = peers.iter().map(|p| p.peer).collect();
            assert_eq!(ids.len(), peers.len());
            let origins = peers.iter().filter(|p| p.is_origin).count();
            assert!(origins <= usize::from(!meta.local_origin));
        }
    }
}

//! Every default module does its job through the runtime.

use std::sync::Arc;

use modnode::chunk::{LeafRange, PlanParams};
use modnode::runtime::LinkedModule;
use modnode::runtime::checkpoint::StateReader;
use modnode::runtime::gossip_policy::{MessageKind, MessageMeta, PeerStats, Priority, SendMode};

use super::{artifact, runtime};

struct Leaves(Vec<Vec<u8>>);

impl StateReader for Leaves {
    fn leaf_count(&self) -> u64 {
        self.0.len() as u64
    }
    fn leaf_size(&self) -> u32 {
        8
    }
    fn read_leaves(&self, start: u64, end: u64) -> Vec<Vec<u8>> {
        self.0
            .get(start as usize..end as usize)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }
    fn range_proof(&self, start: u64, end: u64) -> Vec<u8> {
        [start.to_le_bytes(), end.to_le_bytes()].concat()
    }
}

#[test]
fn checkpoint_v1_plans_builds_and_opens_chunks() {
    let rt = runtime(1_000_000_000);
    let LinkedModule::Checkpoint(module) = rt.load(&artifact("checkpoint-v1")).unwrap() else {
        panic!()
    };
    assert_eq!(module.meta().info.version, 1);
    let leaves: Vec<Vec<u8>> = (0..1000u64).map(|i| i.to_le_bytes().to_vec()).collect();
    let reader: Arc<dyn StateReader> = Arc::new(Leaves(leaves.clone()));
    let plan = module
        .plan(
            reader.clone(),
            PlanParams {
                target_chunk_bytes: 128 * 8,
            },
        )
        .unwrap();
    assert_eq!(plan.first(), Some(&LeafRange { start: 0, end: 128 }));
    assert_eq!(plan.last().map(|r| r.end), Some(1000));
    let mut rebuilt = Vec::new();
    for range in &plan {
        let chunk = module.build_chunk(reader.clone(), *range).unwrap().unwrap();
        let opened = module.open_chunk(chunk).unwrap().unwrap();
        assert_eq!(opened.range, *range);
        assert_eq!(
            opened.proof,
            [range.start.to_le_bytes(), range.end.to_le_bytes()].concat()
        );
        assert_eq!(opened.leaf_size, 8);
        rebuilt.extend(opened.leaves);
    }
    assert_eq!(rebuilt, leaves.concat());
    let out_of_range = module
        .build_chunk(
            reader,
            LeafRange {
                start: 990,
                end: 1001,
            },
        )
        .unwrap();
    assert!(out_of_range.is_err());
    assert!(module.open_chunk(b"garbage".to_vec()).unwrap().is_err());
}

#[test]
fn gossip_policy_v1_floods_to_peers_lacking_the_message() {
    let rt = runtime(100_000_000);
    let LinkedModule::GossipPolicy(module) = rt.load(&artifact("gossip-policy-v1")).unwrap() else {
        panic!()
    };
    let peers: Vec<PeerStats> = (0..6)
        .map(|i| PeerStats {
            peer: i,
            rtt_us: 1000,
            queue_depth: 0,
            recent_failures: 0,
            has_message: i == 2,
            is_origin: i == 0,
        })
        .collect();
    let meta = MessageMeta {
        kind: MessageKind::Block,
        size: 128 << 10,
        local_origin: false,
        hops: 1,
        network_size: 32,
    };
    let plan = module.plan(meta, peers).unwrap();
    let targets: Vec<u32> = plan.targets.iter().map(|t| t.peer).collect();
    assert_eq!(targets, vec![1, 3, 4, 5]);
    assert!(plan.targets.iter().all(|t| t.mode == SendMode::Push));
    assert_eq!(plan.priority, Priority::High);
}

#[test]
fn module_template_builds_validates_and_plans() {
    let bytes = artifact("example-nearest-peers");
    let info = modnode::runtime::inspect::validate(&bytes).unwrap();
    assert_eq!(info.kind, modnode::runtime::Kind::GossipPolicy);
    assert!(
        modnode::artifacts::embedded("example-nearest-peers").is_none(),
        "examples are not embedded"
    );
    let rt = runtime(100_000_000);
    let LinkedModule::GossipPolicy(module) = rt.load(&bytes).unwrap() else {
        panic!()
    };
    let peers: Vec<PeerStats> = [(0, 900), (1, 100), (2, 300), (3, 200), (4, 50)]
        .into_iter()
        .map(|(peer, rtt_us)| PeerStats {
            peer,
            rtt_us,
            queue_depth: 0,
            recent_failures: 0,
            has_message: false,
            is_origin: false,
        })
        .collect();
    let meta = MessageMeta {
        kind: MessageKind::Deposit,
        size: 100,
        local_origin: true,
        hops: 0,
        network_size: 8,
    };
    let plan = module.plan(meta, peers).unwrap();
    let pushed: Vec<u32> = plan
        .targets
        .iter()
        .filter(|t| t.mode == SendMode::Push)
        .map(|t| t.peer)
        .collect();
    assert_eq!(pushed, vec![1, 3, 4]);
    assert_eq!(plan.targets.len(), 5);
    assert_eq!(plan.priority, Priority::Normal);
}

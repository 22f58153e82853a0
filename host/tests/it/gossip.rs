//! The gossip-policy modules drive the host's gossip engine exactly like their native twins.

use modnode::runtime::LinkedModule;
use modnode_gossip::policy::Flood;
use modnode_gossip::policy_v2::PolicyV2;
use modnode_gossip::sim::{self, Scenario, SimConfig};

use super::{artifact, runtime};

fn scenario() -> (SimConfig, Scenario) {
    let config = SimConfig {
        nodes: 16,
        degree: 6,
        seed: 11,
        ..SimConfig::default()
    };
    let scenario = Scenario {
        deposits: 40,
        blocks: 6,
        ..Scenario::default()
    };
    (config, scenario)
}

fn policy_module(name: &str) -> modnode::runtime::gossip_policy::GossipPolicyModule {
    match runtime(100_000_000).load(&artifact(name)).unwrap() {
        LinkedModule::GossipPolicy(m) => m,
        _ => panic!("{name} is not a gossip policy"),
    }
}

#[test]
fn wasm_policies_match_their_native_twins_in_simulation() {
    let (config, scenario) = scenario();
    let v2 = policy_module("gossip-policy-v2");
    assert_eq!(v2.meta().info.version, 2);
    let wasm = sim::run(&config, &scenario, |_| v2.clone()).unwrap();
    let native = sim::run(&config, &scenario, |_| PolicyV2::default()).unwrap();
    assert_eq!(wasm, native);
    assert_eq!(wasm.missed, 0);

    let v1 = policy_module("gossip-policy-v1");
    let wasm_flood = sim::run(&config, &scenario, |_| v1.clone()).unwrap();
    let native_flood = sim::run(&config, &scenario, |_| Flood).unwrap();
    assert_eq!(wasm_flood, native_flood);
    // v2 cuts duplicate block payloads relative to flooding.
    assert!(
        wasm.rmr < wasm_flood.rmr / 2.0,
        "v2 rmr {} vs flood {}",
        wasm.rmr,
        wasm_flood.rmr
    );
}

mod loopback {
    //! The QUIC driver with real endpoints on 127.0.0.1.

    use std::time::Duration;

    use modnode::net::endpoint::{self, TransportLimits};
    use modnode::net::gossip::{self, GossipConfig, GossipEvent};
    use modnode::net::identity::NodeIdentity;
    use modnode_gossip::policy::MessageKind;
    use modnode_gossip::policy_v2::PolicyV2;

    async fn line_of(
        n: usize,
    ) -> Vec<(
        quinn::Endpoint,
        gossip::GossipHandle,
        tokio::sync::mpsc::Receiver<GossipEvent>,
        NodeIdentity,
    )> {
        let limits = TransportLimits::default();
        let mut nodes = Vec::new();
        for _ in 0..n {
            let identity = NodeIdentity::generate().unwrap();
            let endpoint =
                endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &identity, &limits)
                    .unwrap();
            let (handle, events) = gossip::spawn(GossipConfig::default(), PolicyV2::default());
            nodes.push((endpoint, handle, events, identity));
        }
        // A line 0 - 1 - 2 - …: every message needs several hops.
        for i in 1..n {
            let (left, right) = nodes.split_at_mut(i);
            let (a, b) = (&left[i - 1], &right[0]);
            let accept = {
                let endpoint = b.0.clone();
                let limits = limits.clone();
                tokio::spawn(async move {
                    endpoint::accept(endpoint.accept().await.unwrap(), &limits, 0)
                        .await
                        .unwrap()
                })
            };
            let (conn, peer) = endpoint::connect(
                &a.0,
                b.0.local_addr().unwrap(),
                Some(b.3.node_id()),
                &limits,
            )
            .await
            .unwrap();
            a.1.add_peer(peer, conn).unwrap();
            let (conn, peer) = accept.await.unwrap();
            b.1.add_peer(peer, conn).unwrap();
        }
        nodes
    }

    async fn next_delivery(
        events: &mut tokio::sync::mpsc::Receiver<GossipEvent>,
    ) -> (MessageKind, usize) {
        loop {
            // A liveness bound, not a speed target: under `.ci/stress` (a busy loop on each of
            // two cores) a 200 KB message crossing four nodes once missed a 10 s bound.
            match tokio::time::timeout(Duration::from_secs(60), events.recv())
                .await
                .expect("no delivery within 60 s")
            {
                Some(GossipEvent::Delivered { kind, payload, .. }) => return (kind, payload.len()),
                Some(_) => continue,
                None => panic!("driver stopped"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_cross_a_line_of_four_nodes() {
        let mut nodes = line_of(4).await;
        nodes[0]
            .1
            .publish(MessageKind::Deposit, vec![1; 1000])
            .await
            .unwrap();
        nodes[3]
            .1
            .publish(MessageKind::Block, vec![2; 200_000])
            .await
            .unwrap();
        for (i, node) in nodes.iter_mut().enumerate().take(3).skip(1) {
            let mut got = vec![
                next_delivery(&mut node.2).await,
                next_delivery(&mut node.2).await,
            ];
            got.sort_by_key(|(_, len)| *len);
            assert_eq!(
                got,
                vec![(MessageKind::Deposit, 1000), (MessageKind::Block, 200_000)],
                "node {i}"
            );
        }
        assert_eq!(
            next_delivery(&mut nodes[3].2).await,
            (MessageKind::Deposit, 1000)
        );
        assert_eq!(
            next_delivery(&mut nodes[0].2).await,
            (MessageKind::Block, 200_000)
        );
        // The origin does not get its own message back, and nobody gets one twice.
        assert!(nodes[0].2.try_recv().is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn garbage_on_a_stream_disconnects_that_peer_only() {
        let limits = TransportLimits::default();
        let mut nodes = line_of(2).await;
        // An attacker with a valid identity connects to node 1 and writes garbage.
        let attacker = NodeIdentity::generate().unwrap();
        let attacker_ep =
            endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &attacker, &limits).unwrap();
        let target = nodes[1].0.clone();
        let accept = tokio::spawn({
            let limits = limits.clone();
            async move {
                endpoint::accept(target.accept().await.unwrap(), &limits, 1)
                    .await
                    .unwrap()
            }
        });
        let (conn, _) = endpoint::connect(
            &attacker_ep,
            nodes[1].0.local_addr().unwrap(),
            Some(nodes[1].3.node_id()),
            &limits,
        )
        .await
        .unwrap();
        let (server_side, attacker_id) = accept.await.unwrap();
        nodes[1].1.add_peer(attacker_id, server_side).unwrap();
        let mut stream = conn.open_uni().await.unwrap();
        stream
            .write_all(&[0, 0, 0, 9, 1, 1, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0])
            .await
            .unwrap();
        stream.finish().unwrap();
        // Node 1 reports the violation and closes the attacker's connection …
        match tokio::time::timeout(Duration::from_secs(10), nodes[1].2.recv())
            .await
            .unwrap()
            .unwrap()
        {
            GossipEvent::Violation { peer, .. } => assert_eq!(peer, attacker_id),
            other => panic!("unexpected {other:?}"),
        }
        let closed = tokio::time::timeout(Duration::from_secs(10), conn.closed())
            .await
            .unwrap();
        assert!(
            matches!(closed, quinn::ConnectionError::ApplicationClosed(ref c) if c.error_code == quinn::VarInt::from_u32(endpoint::CLOSE_PROTOCOL_VIOLATION)),
            "{closed:?}"
        );
        // … and keeps gossiping with its honest peer.
        nodes[0]
            .1
            .publish(MessageKind::Deposit, vec![7; 500])
            .await
            .unwrap();
        assert_eq!(
            next_delivery(&mut nodes[1].2).await,
            (MessageKind::Deposit, 500)
        );
    }
}

mod policy_events {
    //! What the driver tells a stateful policy, over real QUIC on 127.0.0.1.

    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use modnode::net::codec;
    use modnode::net::endpoint::{self, TransportLimits};
    use modnode::net::gossip::{self, GOSSIP_MESSAGE, GossipConfig};
    use modnode::net::identity::NodeIdentity;
    use modnode::runtime::gossip_policy::PolicyEvent;
    use modnode_gossip::policy::MessageKind;
    use modnode_gossip::policy_v2::PolicyV2;
    use modnode_gossip::{Frame, MessageId};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_driver_reports_a_peer_joining_its_duplicate_push_and_the_clock() {
        let limits = TransportLimits::default();
        let node = NodeIdentity::generate().unwrap();
        let node_ep =
            endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &node, &limits).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (handle, _events) = gossip::spawn_with_policy_events(
            GossipConfig::default(),
            PolicyV2::default(),
            Some(Box::new(move |e| {
                let _ = tx.send(e);
            })),
        );
        let (conn, server_side, peer_id) =
            crate::gossip_hostile::raw_peer_of(&node_ep, &node, &limits).await;
        handle.add_peer(peer_id, server_side).unwrap();

        // The peer pushes one message twice: the second copy is a duplicate.
        let payload = vec![5u8; 300];
        let id = MessageId::of(&payload);
        let frame = Frame::Push {
            id,
            kind: MessageKind::Deposit,
            hops: 0,
            origin: None,
            payload: Arc::from(&payload[..]),
        }
        .encode()
        .unwrap();
        for _ in 0..2 {
            let mut stream = conn.open_uni().await.unwrap();
            codec::write_frame(
                &mut stream,
                GOSSIP_MESSAGE,
                &frame,
                codec::MAX_MESSAGE_BYTES,
            )
            .await
            .unwrap();
            stream.finish().unwrap();
        }

        let head = u64::from_le_bytes(id.as_bytes()[..8].try_into().unwrap());
        let expected_duplicate = PolicyEvent::Duplicate {
            peer: 0,
            message: head,
            kind: MessageKind::Deposit,
        };
        let (mut joined, mut duplicates, mut ticked) = (false, 0, false);
        // A liveness bound, not a speed target.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(joined && duplicates == 1 && ticked) {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = rx.recv_timeout(left).unwrap_or_else(|_| {
                panic!("joined {joined}, duplicates {duplicates}, ticked {ticked}")
            });
            match event {
                PolicyEvent::PeerJoined(0) => joined = true,
                PolicyEvent::Tick(_) => ticked = true,
                e if e == expected_duplicate => duplicates += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        // Only the second copy was a duplicate.
        assert!(
            rx.try_iter().all(|e| e != expected_duplicate),
            "more than one duplicate reported"
        );
        drop(handle);
    }

    /// v2's plans, asking for the tree mechanics (a graft timer of 50 ms).
    struct Tree(PolicyV2);

    impl modnode_gossip::Policy for Tree {
        fn plan(
            &mut self,
            msg: &modnode_gossip::MessageMeta,
            peers: &[modnode_gossip::PeerStats],
        ) -> modnode_gossip::SendPlan {
            self.0.plan(msg, peers)
        }

        fn link_control(&self) -> Option<modnode_gossip::LinkControl> {
            Some(modnode_gossip::LinkControl {
                graft_min_ms: 50,
                graft_max_ms: 50,
                announce_first_above: 1024,
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_driver_reports_an_announced_message_that_does_not_arrive_as_missing() {
        let limits = TransportLimits::default();
        let node = NodeIdentity::generate().unwrap();
        let node_ep =
            endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &node, &limits).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (handle, _events) = gossip::spawn_with_policy_events(
            GossipConfig::default(),
            Tree(PolicyV2::default()),
            Some(Box::new(move |e| {
                let _ = tx.send(e);
            })),
        );
        let (conn, server_side, peer_id) =
            crate::gossip_hostile::raw_peer_of(&node_ep, &node, &limits).await;
        handle.add_peer(peer_id, server_side).unwrap();

        // The peer announces a small message and never sends it.
        let id = MessageId::of(b"never sent");
        let frame = Frame::Announce {
            items: vec![modnode_gossip::AnnounceItem {
                id,
                kind: MessageKind::Deposit,
                size: 300,
            }],
        }
        .encode()
        .unwrap();
        let mut stream = conn.open_uni().await.unwrap();
        codec::write_frame(
            &mut stream,
            GOSSIP_MESSAGE,
            &frame,
            codec::MAX_MESSAGE_BYTES,
        )
        .await
        .unwrap();
        stream.finish().unwrap();

        let head = u64::from_le_bytes(id.as_bytes()[..8].try_into().unwrap());
        let expected = PolicyEvent::Missing {
            peer: 0,
            message: head,
            kind: MessageKind::Deposit,
        };
        // A liveness bound, not a speed target.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no missing reported"));
            if event == expected {
                break;
            }
            assert!(
                !matches!(
                    event,
                    PolicyEvent::Missing { .. } | PolicyEvent::Duplicate { .. }
                ),
                "unexpected {event:?}"
            );
        }
        drop(handle);
    }
}

mod handshake {
    //! The hello exchange over real connections.

    use std::time::Duration;

    use modnode::net::endpoint::{self, TransportLimits};
    use modnode::net::handshake::{self, CLOSE_WRONG_CHAIN, HandshakeError, Hello, Role};
    use modnode::net::identity::NodeIdentity;

    fn hello(genesis: u8) -> Hello {
        Hello {
            protocol_version: handshake::PROTOCOL_VERSION,
            chain_id: "modnode-test".into(),
            genesis_hash: modnode::hashes::BlockHash([genesis; 32]),
            head_height: 3,
            head_hash: modnode::hashes::BlockHash([4; 32]),
            listen_port: 0,
        }
    }

    async fn pair(
        dialer_genesis: u8,
        acceptor_genesis: u8,
    ) -> (
        Result<Hello, HandshakeError>,
        Result<Hello, HandshakeError>,
        quinn::Connection,
    ) {
        let limits = TransportLimits::default();
        let (a, b) = (
            NodeIdentity::generate().unwrap(),
            NodeIdentity::generate().unwrap(),
        );
        let ea = endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &a, &limits).unwrap();
        let eb = endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &b, &limits).unwrap();
        let acceptor = tokio::spawn({
            let eb = eb.clone();
            let limits = limits.clone();
            async move {
                let (conn, peer) = endpoint::accept(eb.accept().await.unwrap(), &limits, 0)
                    .await
                    .unwrap();
                let result = handshake::exchange(
                    &conn,
                    peer,
                    &hello(acceptor_genesis),
                    Role::Acceptor,
                    Duration::from_secs(5),
                )
                .await;
                // Keep the connection open until the dialer has read our answer.
                (result, conn, eb)
            }
        });
        let (conn, peer) =
            endpoint::connect(&ea, eb.local_addr().unwrap(), Some(b.node_id()), &limits)
                .await
                .unwrap();
        let dialed = handshake::exchange(
            &conn,
            peer,
            &hello(dialer_genesis),
            Role::Dialer,
            Duration::from_secs(5),
        )
        .await;
        let (accepted, _acceptor_conn, _eb) = acceptor.await.unwrap();
        (dialed, accepted, conn)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn same_chain_completes_on_both_sides() {
        let (dialed, accepted, _conn) = pair(1, 1).await;
        assert_eq!(dialed.unwrap().head_height, 3);
        assert_eq!(
            accepted.unwrap().genesis_hash,
            modnode::hashes::BlockHash([1; 32])
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wrong_genesis_is_refused_by_both_and_names_both_hashes() {
        let (dialed, accepted, conn) = pair(1, 2).await;
        for err in [dialed.unwrap_err(), accepted.unwrap_err()] {
            let msg = err.to_string();
            assert!(matches!(err, HandshakeError::WrongChain(_)), "{msg}");
            assert!(
                msg.contains(&hex::encode([1u8; 32])) && msg.contains(&hex::encode([2u8; 32])),
                "{msg}"
            );
        }
        let closed = conn.closed().await;
        assert!(
            matches!(closed, quinn::ConnectionError::LocallyClosed)
                || matches!(closed, quinn::ConnectionError::ApplicationClosed(ref c) if c.error_code == quinn::VarInt::from_u32(CLOSE_WRONG_CHAIN)),
            "{closed:?}"
        );
    }
}

//! Hostile gossip peers over real QUIC on loopback: streams that trickle or pile up bytes.

use std::time::Duration;

use modnode::net::endpoint::{self, CLOSE_PROTOCOL_VIOLATION, TransportLimits};
use modnode::net::gossip::{
    self, GOSSIP_MESSAGE, GossipConfig, GossipEvent, GossipHandle, STREAM_DEADLINE,
    STREAM_OVER_BUDGET,
};
use modnode::net::identity::NodeIdentity;
use modnode_gossip::policy_v2::PolicyV2;
use tokio::sync::mpsc::Receiver;

/// A fresh identity on its own endpoint connected to `node_ep` (the endpoint of `node`): the
/// peer's side of the connection, the node's side, and the peer's id as the node sees it.
pub(super) async fn raw_peer_of(
    node_ep: &quinn::Endpoint,
    node: &NodeIdentity,
    limits: &TransportLimits,
) -> (
    quinn::Connection,
    quinn::Connection,
    modnode::net::identity::NodeId,
) {
    let peer = NodeIdentity::generate().unwrap();
    let peer_ep = endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &peer, limits).unwrap();
    let accept = tokio::spawn({
        let node_ep = node_ep.clone();
        let limits = limits.clone();
        async move {
            endpoint::accept(node_ep.accept().await.unwrap(), &limits, 0)
                .await
                .unwrap()
        }
    });
    let (conn, _) = endpoint::connect(
        &peer_ep,
        node_ep.local_addr().unwrap(),
        Some(node.node_id()),
        limits,
    )
    .await
    .unwrap();
    let (server_side, peer_id) = accept.await.unwrap();
    (conn, server_side, peer_id)
}

/// A gossip driver on its own endpoint, and a raw QUIC connection to it from a fresh identity
/// that the driver has taken as a peer.
async fn driver_and_raw_peer(
    config: GossipConfig,
) -> (
    quinn::Endpoint,
    GossipHandle,
    Receiver<GossipEvent>,
    quinn::Connection,
) {
    let limits = TransportLimits::default();
    let node = NodeIdentity::generate().unwrap();
    let node_ep = endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &node, &limits).unwrap();
    let (handle, events) = gossip::spawn(config, PolicyV2::default());
    let (conn, server_side, attacker_id) = raw_peer_of(&node_ep, &node, &limits).await;
    handle.add_peer(attacker_id, server_side).unwrap();
    (node_ep, handle, events, conn)
}

/// The header of a gossip frame whose payload is `payload_len` bytes.
fn header(payload_len: u32) -> Vec<u8> {
    let mut h = (payload_len + 2).to_be_bytes().to_vec();
    h.extend([1, GOSSIP_MESSAGE]);
    h
}

/// Waits (at most `limit`, a liveness bound far above the deadlines under test) for the
/// driver to report the peer as a violator and returns the reason.
async fn violation(events: &mut Receiver<GossipEvent>, limit: Duration) -> String {
    loop {
        match tokio::time::timeout(limit, events.recv()).await {
            Ok(Some(GossipEvent::Violation { reason, .. })) => return reason,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("driver stopped"),
            Err(_) => panic!("the hostile peer was never reported within {limit:?}"),
        }
    }
}

/// True once the stream was stopped by the reader with `code`, or its connection was closed
/// for a protocol violation.
async fn stopped_with(stream: &mut quinn::SendStream, code: u32) -> bool {
    match stream.stopped().await {
        Ok(Some(c)) => c == quinn::VarInt::from_u32(code),
        Err(quinn::StoppedError::ConnectionLost(quinn::ConnectionError::ApplicationClosed(c))) => {
            c.error_code == quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION)
        }
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_streams_are_stopped_at_their_deadline() {
    let config = GossipConfig {
        stream_read_timeout: Duration::from_millis(500),
        ..GossipConfig::default()
    };
    let (_node, handle, mut events, conn) = driver_and_raw_peer(config).await;
    // As many streams as the node allows, each announcing a 1 MiB frame and then trickling.
    let mut streams = Vec::new();
    for _ in 0..16 {
        let mut s = conn.open_uni().await.unwrap();
        s.write_all(&header(1 << 20)).await.unwrap();
        streams.push(s);
    }
    let trickle = tokio::spawn({
        let mut streams = std::mem::take(&mut streams);
        async move {
            for _ in 0..100 {
                for s in &mut streams {
                    if s.write_all(&[0]).await.is_err() {
                        return streams;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            streams
        }
    });
    let reason = violation(&mut events, Duration::from_secs(30)).await;
    assert!(reason.contains("not finished within 500 ms"), "{reason}");
    let mut streams = trickle.await.unwrap();
    for s in &mut streams {
        assert!(stopped_with(s, STREAM_DEADLINE).await);
    }
    let (_, traffic) = handle.stats().await.unwrap();
    assert!(traffic.streams_timed_out >= 1, "{traffic:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_streams_never_hold_more_than_the_peer_budget() {
    let budget = 1 << 20;
    let config = GossipConfig {
        peer_read_budget: budget,
        ..GossipConfig::default()
    };
    let (_node, handle, mut events, conn) = driver_and_raw_peer(config).await;
    // 16 streams announcing full-size frames, each sending 256 KiB and then holding on:
    // 4 MiB offered against a 1 MiB budget.
    let mut streams = Vec::new();
    for _ in 0..16 {
        let mut s = conn.open_uni().await.unwrap();
        s.write_all(&header(8 * 1024 * 1024 - 2)).await.unwrap();
        streams.push(s);
    }
    let chunk = vec![0u8; 256 * 1024];
    let writers: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let _ = s.write_all(&chunk).await;
                s
            })
        })
        .collect();
    let reason = violation(&mut events, Duration::from_secs(30)).await;
    assert!(reason.contains("over the budget"), "{reason}");
    // Every stream was stopped for the budget or ended with the violator's connection.
    for w in writers {
        let mut s = w.await.unwrap();
        assert!(stopped_with(&mut s, STREAM_OVER_BUDGET).await);
    }
    let (_, traffic) = handle.stats().await.unwrap();
    assert!(traffic.streams_over_budget >= 1, "{traffic:?}");
    assert!(
        traffic.peak_held_bytes <= budget as u64,
        "held {} bytes against a budget of {budget}",
        traffic.peak_held_bytes
    );
    assert!(traffic.peak_held_bytes > 0);
}

mod bans {
    //! A ban outlives a restart of the node.

    use std::net::SocketAddr;
    use std::path::Path;
    use std::time::Duration;

    use modnode::chain::block::Block;
    use modnode::chain::genesis::Genesis;
    use modnode::net::endpoint::{self, CLOSE_PROTOCOL_VIOLATION, TransportLimits};
    use modnode::net::handshake::{self, Hello, Role};
    use modnode::net::identity::NodeIdentity;
    use modnode::node::{Node, NodeConfig};
    use tempfile::TempDir;

    const LIVENESS: Duration = Duration::from_secs(60);

    fn genesis(dir: &Path) -> Genesis {
        let id = NodeIdentity::load_or_create(dir).unwrap().node_id();
        let text = serde_json::json!({
            "chain_id": "modnode-it-bans",
            "genesis_time_ms": modnode::clock::unix_ms(),
            "slot_ms": 300,
            "finality_depth": 32,
            "authorities": [id.to_string()],
            "generated_validators": { "count": 8, "seed": 3 },
        })
        .to_string();
        Genesis::from_json(&text, "<test>").unwrap()
    }

    async fn start(dir: &Path, genesis: &Genesis) -> Node {
        let mut config = NodeConfig::new(dir.to_path_buf(), genesis.clone());
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        Node::start(config).await.unwrap()
    }

    /// Connects as `me` and completes the hello; `Err` if the node refused us.
    async fn hello_as(
        me: &NodeIdentity,
        node: &Node,
        genesis: &Genesis,
        genesis_hash: [u8; 32],
    ) -> Result<quinn::Connection, String> {
        let limits = TransportLimits::default();
        let ep = endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), me, &limits).unwrap();
        let (conn, peer) = endpoint::connect(&ep, node.p2p_addr(), None, &limits)
            .await
            .map_err(|e| e.to_string())?;
        let hello = Hello {
            protocol_version: handshake::PROTOCOL_VERSION,
            chain_id: genesis.chain_id.clone(),
            genesis_hash: modnode::hashes::BlockHash(genesis_hash),
            head_height: 0,
            head_hash: modnode::hashes::BlockHash(genesis_hash),
            listen_port: 0,
        };
        handshake::exchange(&conn, peer, &hello, Role::Dialer, LIVENESS)
            .await
            .map_err(|e| e.to_string())?;
        // The node may still refuse right after the hello: give it the chance to.
        match tokio::time::timeout(Duration::from_millis(500), conn.closed()).await {
            Ok(reason) => Err(reason.to_string()),
            Err(_) => Ok(conn),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_banned_key_stays_banned_after_the_node_restarts() {
        let tmp = TempDir::new().unwrap();
        let genesis = genesis(tmp.path());
        let node = start(tmp.path(), &genesis).await;
        let genesis_hash = node
            .chain()
            .blocks(0, 1, usize::MAX)
            .await
            .unwrap()
            .first()
            .map(|b| Block::decode(b, 16).unwrap().hash().to_bytes())
            .unwrap();
        let villain = NodeIdentity::generate().unwrap();
        let conn = hello_as(&villain, &node, &genesis, genesis_hash)
            .await
            .unwrap();
        let mut uni = conn.open_uni().await.unwrap();
        uni.write_all(&[0xff; 64]).await.unwrap();
        uni.finish().unwrap();
        let closed = tokio::time::timeout(LIVENESS, conn.closed()).await.unwrap();
        assert!(
            matches!(&closed, quinn::ConnectionError::ApplicationClosed(c)
                if c.error_code == quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION)),
            "{closed:?}"
        );
        assert!(
            hello_as(&villain, &node, &genesis, genesis_hash)
                .await
                .is_err(),
            "banned before the restart"
        );
        // The operator sees the ban in `/status`, with the villain's id.
        let villain_hex = hex::encode(villain.node_id().as_bytes());
        let listed = |node: &Node| {
            node.status()
                .bans
                .iter()
                .any(|b| b.node == villain_hex && b.until_unix_ms > 0)
        };
        let deadline = tokio::time::Instant::now() + LIVENESS;
        while !listed(&node) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the ban never showed in /status: {:?}",
                node.status().bans
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(node.status().bans.len(), 1, "{:?}", node.status().bans);
        node.shutdown().await;

        let node = start(tmp.path(), &genesis).await;
        assert!(listed(&node), "the restored ban is not listed in /status");
        let refused = hello_as(&villain, &node, &genesis, genesis_hash).await;
        assert!(refused.is_err(), "the ban was lifted by the restart");
        // The refusal is the ban: another key from the same address gets in.
        let honest = NodeIdentity::generate().unwrap();
        hello_as(&honest, &node, &genesis, genesis_hash)
            .await
            .unwrap();
        node.shutdown().await;
    }
}

//! The relay over real UDP sockets on loopback, and two real QUIC endpoints through it: a green
//! testnet run cannot come from a relay that forwards everything whatever it is told.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::*;
use crate::net::endpoint::{self, TransportLimits};
use crate::net::identity::NodeIdentity;

const DEADLINE: Duration = Duration::from_secs(10);

/// What a [`Node`] received: when, the payload, and from where.
type Received = Arc<Mutex<Vec<(Instant, Vec<u8>, SocketAddr)>>>;

/// A UDP socket standing in for a node: records every datagram it receives.
struct Node {
    socket: Arc<UdpSocket>,
    got: Received,
    task: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn bind() -> Node {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let socket = Arc::clone(&socket);
            let got = Arc::clone(&got);
            async move {
                let mut buf = vec![0u8; 2048];
                while let Ok((len, src)) = socket.recv_from(&mut buf).await {
                    got.lock()
                        .unwrap()
                        .push((Instant::now(), buf[..len].to_vec(), src));
                }
            }
        });
        Node { socket, got, task }
    }

    fn addr(&self) -> SocketAddr {
        self.socket.local_addr().unwrap()
    }

    fn count(&self) -> usize {
        self.got.lock().unwrap().len()
    }

    fn payloads(&self) -> Vec<Vec<u8>> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, p, _)| p.clone())
            .collect()
    }

    async fn send(&self, to: SocketAddr, payload: &[u8]) {
        self.socket.send_to(payload, to).await.unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls `cond` every few milliseconds until it holds; panics naming `what` after [`DEADLINE`].
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends `count` numbered packets from `from` through the relay link `from_i → to_i`, in
/// batches the relay has taken in before the next one (so no socket buffer overflows and a
/// drop is always the relay's).
async fn send_numbered(relay: &Relay, from: &Node, from_i: usize, to_i: usize, count: u32) {
    let dest = relay.addr(from_i, to_i).unwrap();
    let start = relay.stats().link(from_i, to_i).unwrap().received;
    for i in 0..count {
        from.send(dest, &i.to_be_bytes()).await;
        if i % 50 == 49 || i + 1 == count {
            let want = start + u64::from(i) + 1;
            wait_for("the relay to take in a batch", || {
                relay.stats().link(from_i, to_i).unwrap().received >= want
            })
            .await;
        }
    }
}

async fn pair(seed: u64) -> (Relay, Node, Node) {
    let a = Node::bind().await;
    let b = Node::bind().await;
    let relay = Relay::start(vec![a.addr(), b.addr()], seed).await.unwrap();
    (relay, a, b)
}

#[tokio::test]
async fn a_perfect_link_forwards_both_ways_from_the_pair_socket() {
    let (relay, a, b) = pair(1).await;
    assert_eq!(relay.addr(0, 0), None);
    assert_eq!(relay.addr(0, 2), None);
    assert_ne!(relay.addr(0, 1), relay.addr(1, 0));

    a.send(relay.addr(0, 1).unwrap(), b"ping").await;
    wait_for("ping at b", || b.count() == 1).await;
    let (_, payload, src) = b.got.lock().unwrap()[0].clone();
    assert_eq!(payload, b"ping");
    assert_eq!(src, relay.addr(0, 1).unwrap(), "b sees the relay, not a");

    b.send(src, b"pong").await;
    wait_for("pong at a", || a.count() == 1).await;
    assert_eq!(a.payloads(), vec![b"pong".to_vec()]);
    let stats = relay.stats();
    assert_eq!(stats.link(0, 1).unwrap().forwarded, 1);
    assert_eq!(stats.link(1, 0).unwrap().forwarded, 1);
    assert_eq!(stats.total.forwarded, 2);
    assert_eq!(stats.total.dropped, 0);
    relay.shutdown().await;
}

#[tokio::test]
async fn loss_one_blocked_and_partition_drop_everything_and_heal_restores() {
    let cases = [
        LinkFaults {
            loss: 1.0,
            ..LinkFaults::default()
        },
        LinkFaults {
            blocked: true,
            ..LinkFaults::default()
        },
    ];
    for (case, faults) in cases.into_iter().map(Some).chain([None]).enumerate() {
        let (relay, a, b) = pair(2).await;
        match faults {
            Some(faults) => relay.set(0, 1, faults),
            None => relay.partition(&[1]),
        }
        send_numbered(&relay, &a, 0, 1, 200).await;
        let link = relay.stats().link(0, 1).unwrap();
        assert_eq!((link.dropped, link.forwarded), (200, 0), "case {case}");

        relay.heal();
        assert_eq!(relay.faults(0, 1), Some(LinkFaults::default()));
        a.send(relay.addr(0, 1).unwrap(), b"marker").await;
        wait_for("the marker after heal", || b.count() >= 1).await;
        // The relay socket forwards in order without faults: anything that leaked before the
        // heal would have arrived before the marker.
        assert_eq!(b.payloads(), vec![b"marker".to_vec()], "case {case}");
        relay.shutdown().await;
    }
}

#[tokio::test]
async fn a_partition_blocks_both_directions_across_the_cut_only() {
    let nodes = [Node::bind().await, Node::bind().await, Node::bind().await];
    let relay = Relay::start(nodes.iter().map(Node::addr).collect(), 3)
        .await
        .unwrap();
    relay.partition(&[0]);
    for (from, to) in [(0, 1), (1, 0), (0, 2), (2, 0)] {
        assert!(relay.faults(from, to).unwrap().blocked, "{from}->{to}");
    }
    assert!(!relay.faults(1, 2).unwrap().blocked);
    assert!(!relay.faults(2, 1).unwrap().blocked);

    send_numbered(&relay, &nodes[1], 1, 0, 20).await;
    send_numbered(&relay, &nodes[1], 1, 2, 20).await;
    wait_for("the uncut link to deliver", || nodes[2].count() == 20).await;
    assert_eq!(relay.stats().link(1, 0).unwrap().dropped, 20);
    assert_eq!(nodes[0].count(), 0);
    relay.shutdown().await;
}

#[tokio::test]
async fn loss_of_0_3_drops_about_30_percent() {
    let (relay, a, b) = pair(4).await;
    relay.set(
        0,
        1,
        LinkFaults {
            loss: 0.3,
            ..LinkFaults::default()
        },
    );
    send_numbered(&relay, &a, 0, 1, 2000).await;
    let link = relay.stats().link(0, 1).unwrap();
    assert!(
        (500..=700).contains(&link.dropped),
        "dropped {} of 2000",
        link.dropped
    );
    assert_eq!(link.forwarded + link.dropped, 2000);
    let forwarded = usize::try_from(link.forwarded).unwrap();
    wait_for("every forwarded packet", || b.count() == forwarded).await;
    relay.shutdown().await;
}

#[tokio::test]
async fn the_same_seed_makes_the_same_decisions() {
    let mut dropped = Vec::new();
    for seed in [5, 5, 6] {
        let (relay, a, _b) = pair(seed).await;
        relay.set(
            0,
            1,
            LinkFaults {
                loss: 0.5,
                ..LinkFaults::default()
            },
        );
        send_numbered(&relay, &a, 0, 1, 300).await;
        dropped.push(relay.stats().link(0, 1).unwrap().dropped);
        relay.shutdown().await;
    }
    assert_eq!(dropped[0], dropped[1], "{dropped:?}");
    assert_ne!(dropped[0], dropped[2], "{dropped:?}");
}

#[tokio::test]
async fn duplication_delivers_every_packet_twice() {
    let (relay, a, b) = pair(7).await;
    relay.set(
        0,
        1,
        LinkFaults {
            duplicate: 1.0,
            ..LinkFaults::default()
        },
    );
    send_numbered(&relay, &a, 0, 1, 100).await;
    wait_for("200 copies", || b.count() == 200).await;
    let mut payloads = b.payloads();
    payloads.sort();
    payloads.dedup();
    assert_eq!(payloads.len(), 100);
    let link = relay.stats().link(0, 1).unwrap();
    assert_eq!((link.duplicated, link.forwarded), (100, 200));
    relay.shutdown().await;
}

#[tokio::test]
async fn delay_holds_every_packet_at_least_that_long() {
    let (relay, a, b) = pair(8).await;
    let delay = Duration::from_millis(150);
    relay.set(
        0,
        1,
        LinkFaults {
            delay,
            jitter: Duration::from_millis(30),
            ..LinkFaults::default()
        },
    );
    let mut sent = Vec::new();
    for i in 0u8..5 {
        sent.push(Instant::now());
        a.send(relay.addr(0, 1).unwrap(), &[i]).await;
    }
    wait_for("5 delayed packets", || b.count() == 5).await;
    for (at, payload, _) in b.got.lock().unwrap().iter() {
        let waited = at.duration_since(sent[usize::from(payload[0])]);
        assert!(
            waited >= delay,
            "packet {} took only {waited:?}",
            payload[0]
        );
    }
    relay.shutdown().await;
}

#[tokio::test]
async fn reordering_lets_later_packets_overtake() {
    let (relay, a, b) = pair(9).await;
    relay.set(
        0,
        1,
        LinkFaults {
            reorder: 0.5,
            ..LinkFaults::default()
        },
    );
    send_numbered(&relay, &a, 0, 1, 200).await;
    wait_for("200 packets", || b.count() == 200).await;
    let order: Vec<u32> = b
        .payloads()
        .iter()
        .map(|p| u32::from_be_bytes(p[..4].try_into().unwrap()))
        .collect();
    assert!(order.windows(2).any(|w| w[0] > w[1]), "never reordered");
    assert!(relay.stats().link(0, 1).unwrap().reordered > 0);
    relay.shutdown().await;
}

#[tokio::test]
async fn replies_follow_a_node_restarted_on_a_new_port() {
    let (relay, a, b) = pair(10).await;
    let via = relay.addr(0, 1).unwrap();
    a.send(via, b"first").await;
    wait_for("first", || b.count() == 1).await;

    let restarted = Node::bind().await;
    restarted.send(via, b"second").await;
    wait_for("second", || b.count() == 2).await;
    b.send(via, b"reply").await;
    wait_for("the reply at the new port", || restarted.count() == 1).await;
    assert_eq!(a.count(), 0);
    relay.shutdown().await;
}

#[tokio::test]
async fn a_target_restarted_on_a_new_port_is_reached_after_set_target() {
    let (relay, a, _b) = pair(12).await;
    let via = relay.addr(0, 1).unwrap();
    let moved = Node::bind().await;
    relay.set_target(1, moved.addr());
    a.send(via, b"to the new port").await;
    wait_for("the packet at the new port", || moved.count() == 1).await;
    moved.send(via, b"back").await;
    wait_for("the reply at a", || a.count() == 1).await;
    let stats = relay.stats();
    assert_eq!(stats.link(0, 1).unwrap().forwarded, 1);
    assert_eq!(
        stats.link(1, 0).unwrap().forwarded,
        1,
        "the reply counts as 1->0"
    );
    relay.shutdown().await;
}

/// Two real QUIC endpoints (as the node builds them) through the relay: the handshake works
/// on a clean link, times out across a partition, and works again after the heal.
#[tokio::test]
async fn quic_connects_through_the_relay_fails_when_blocked_and_recovers_after_heal() {
    let limits = TransportLimits {
        handshake_timeout: Duration::from_secs(2),
        ..TransportLimits::default()
    };
    let id_a = NodeIdentity::generate().unwrap();
    let id_b = NodeIdentity::generate().unwrap();
    let bind: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let a = endpoint::make_endpoint(bind, &id_a, &limits).unwrap();
    let b = endpoint::make_endpoint(bind, &id_b, &limits).unwrap();
    let relay = Relay::start(vec![a.local_addr().unwrap(), b.local_addr().unwrap()], 11)
        .await
        .unwrap();

    let server = tokio::spawn({
        let b = b.clone();
        let limits = limits.clone();
        async move {
            while let Some(incoming) = b.accept().await {
                let limits = limits.clone();
                tokio::spawn(async move {
                    if let Ok((conn, _)) = endpoint::accept(incoming, &limits, 0).await
                        && let Ok((mut send, mut recv)) = conn.accept_bi().await
                        && let Ok(msg) = recv.read_to_end(64).await
                    {
                        let _ = send.write_all(&msg).await;
                        let _ = send.finish();
                        let _ = conn.closed().await;
                    }
                });
            }
        }
    });

    let via = relay.addr(0, 1).unwrap();
    let echo = async |conn: &quinn::Connection| {
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        send.write_all(b"hello").await.unwrap();
        send.finish().unwrap();
        recv.read_to_end(64).await.unwrap()
    };

    let (conn, peer) = endpoint::connect(&a, via, Some(id_b.node_id()), &limits)
        .await
        .expect("a clean link connects");
    assert_eq!(peer, id_b.node_id());
    assert_eq!(echo(&conn).await, b"hello");
    conn.close(0u32.into(), b"done");

    relay.partition(&[0]);
    let before = relay.stats().link(0, 1).unwrap().dropped;
    let blocked = endpoint::connect(&a, via, Some(id_b.node_id()), &limits).await;
    assert!(blocked.is_err(), "connected across a partition");
    assert!(relay.stats().link(0, 1).unwrap().dropped > before);

    relay.heal();
    let (conn, _) = endpoint::connect(&a, via, Some(id_b.node_id()), &limits)
        .await
        .expect("connects again after heal");
    assert_eq!(echo(&conn).await, b"hello");
    conn.close(0u32.into(), b"done");

    server.abort();
    a.close(0u32.into(), b"");
    b.close(0u32.into(), b"");
    relay.shutdown().await;
}

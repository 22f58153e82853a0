//! [`Relay`]: a fault-injecting UDP relay between the nodes of a local testnet.
//!
//! The kernel the testnet runs on may have no `netem`, so faults are injected in user space: for
//! every ordered pair of nodes `(from, to)` the relay binds one UDP socket on 127.0.0.1, and node
//! `from` dials [`Relay::addr`]`(from, to)` instead of node `to`'s real QUIC address. The relay
//! forwards what arrives there to node `to` *from that same socket*, so node `to`'s replies come
//! back to it and are forwarded to node `from`'s latest source address (learned from the latest
//! packet that did not come from node `to`: a node restarted on a new port is followed).
//!
//! A connection opened through `addr(a, b)` therefore carries packets a→b under
//! `faults[a][b]` and b→a under `faults[b][a]`, the same faults a connection opened the other
//! way (through `addr(b, a)`) meets: a link's faults are a property of the direction of travel,
//! not of who dialled.
//!
//! Every decision (lose, duplicate, reorder, jitter) is drawn from a per-socket RNG seeded from
//! the relay's seed and the pair, so for one seed and one sequence of packets the decisions are
//! the same. Each socket holds at most [`MAX_QUEUED_PER_SOCKET`] delayed packets; a packet that
//! would exceed the bound is dropped and counted in [`LinkStats::queue_full`].

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Delayed packets one relay socket holds at most (both directions together); beyond it packets
/// are dropped, as a router's full queue would.
pub const MAX_QUEUED_PER_SOCKET: usize = 4096;

/// Extra time a reordered packet is held, on top of its link's delay and jitter, so that the
/// packets sent after it overtake it.
pub const REORDER_HOLD: Duration = Duration::from_millis(20);

/// Largest UDP payload.
const MAX_DATAGRAM: usize = 65_535;

/// What happens to packets travelling one direction of one link. The default is a perfect link.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkFaults {
    /// Fixed delay added to every packet.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per packet.
    pub jitter: Duration,
    /// Probability in `[0, 1]` that a packet is dropped.
    pub loss: f64,
    /// Probability in `[0, 1]` that a packet is delivered twice.
    pub duplicate: f64,
    /// Probability in `[0, 1]` that a packet is held back [`REORDER_HOLD`] longer than the
    /// packets around it.
    pub reorder: f64,
    /// Every packet is dropped (a partition).
    pub blocked: bool,
}

/// Counters of one direction of one link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStats {
    /// Packets that arrived at the relay for this direction.
    pub received: u64,
    /// Copies sent on to their destination (duplicates included).
    pub forwarded: u64,
    /// Packets dropped: lost, blocked, queue full, no known destination or a failed send.
    pub dropped: u64,
    /// Extra copies sent by duplication.
    pub duplicated: u64,
    /// Packets held back to be reordered.
    pub reordered: u64,
    /// Of `dropped`, the packets dropped because the socket's queue was full.
    pub queue_full: u64,
}

impl LinkStats {
    fn add(&mut self, other: &LinkStats) {
        self.received = self.received.saturating_add(other.received);
        self.forwarded = self.forwarded.saturating_add(other.forwarded);
        self.dropped = self.dropped.saturating_add(other.dropped);
        self.duplicated = self.duplicated.saturating_add(other.duplicated);
        self.reordered = self.reordered.saturating_add(other.reordered);
        self.queue_full = self.queue_full.saturating_add(other.queue_full);
    }
}

/// The counters of one directed link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    /// The sending node.
    pub from: usize,
    /// The receiving node.
    pub to: usize,
    /// Its counters.
    pub stats: LinkStats,
}

/// A snapshot of the relay's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayStats {
    /// Every directed link (`from != to`), in `(from, to)` order.
    pub links: Vec<LinkCounters>,
    /// The sum over all links.
    pub total: LinkStats,
}

impl RelayStats {
    /// The counters of the link `from → to`, if it exists.
    pub fn link(&self, from: usize, to: usize) -> Option<LinkStats> {
        self.links
            .iter()
            .find(|l| l.from == from && l.to == to)
            .map(|l| l.stats)
    }
}

/// Faults and counters of every directed link, indexed `from * nodes + to`.
#[derive(Debug)]
struct Links {
    nodes: usize,
    /// Each node's real QUIC address.
    targets: Vec<SocketAddr>,
    faults: Vec<LinkFaults>,
    stats: Vec<LinkStats>,
}

impl Links {
    fn index(&self, from: usize, to: usize) -> Option<usize> {
        if from >= self.nodes || to >= self.nodes || from == to {
            return None;
        }
        from.checked_mul(self.nodes)?.checked_add(to)
    }
}

/// The relay: one forwarding socket per ordered pair of nodes, faults per directed link. All
/// methods take `&self`; dropping the relay stops its tasks too.
#[derive(Debug)]
pub struct Relay {
    links: Arc<Mutex<Links>>,
    /// `addrs[from * nodes + to]`, `None` on the diagonal.
    addrs: Vec<Option<SocketAddr>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Relay {
    /// Binds one socket per ordered pair (`from != to`) on 127.0.0.1 and starts forwarding;
    /// `targets[i]` is node i's real QUIC address. Must be called within a tokio runtime.
    pub async fn start(targets: Vec<SocketAddr>, seed: u64) -> std::io::Result<Relay> {
        let nodes = targets.len();
        let cells = nodes.checked_mul(nodes).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "too many relay nodes")
        })?;
        let links = Arc::new(Mutex::new(Links {
            nodes,
            targets: targets.clone(),
            faults: vec![LinkFaults::default(); cells],
            stats: vec![LinkStats::default(); cells],
        }));
        let (stop, _) = watch::channel(false);
        let mut addrs = Vec::with_capacity(cells);
        let mut tasks = Vec::new();
        for (from, _) in targets.iter().enumerate() {
            for (to, _) in targets.iter().enumerate() {
                if from == to {
                    addrs.push(None);
                    continue;
                }
                let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?;
                addrs.push(Some(socket.local_addr()?));
                let pair = u64::try_from(addrs.len()).unwrap_or(u64::MAX);
                let pipe = Pipe {
                    from,
                    to,
                    socket,
                    links: Arc::clone(&links),
                    rng: StdRng::seed_from_u64(seed ^ pair.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                };
                tasks.push(tokio::spawn(pipe.run(stop.subscribe())));
            }
        }
        Ok(Relay {
            links,
            addrs,
            stop,
            tasks,
        })
    }

    /// Number of nodes the relay connects.
    pub fn nodes(&self) -> usize {
        self.lock().nodes
    }

    /// The address node `from` dials to reach node `to` (None if out of range or from == to).
    pub fn addr(&self, from: usize, to: usize) -> Option<SocketAddr> {
        let index = self.lock().index(from, to)?;
        self.addrs.get(index).copied().flatten()
    }

    /// Node `node` now listens on `addr` (restarted on another port): packets for it go there,
    /// and packets from there count as its. Out-of-range nodes are ignored.
    pub fn set_target(&self, node: usize, addr: SocketAddr) {
        if let Some(slot) = self.lock().targets.get_mut(node) {
            *slot = addr;
        }
    }

    /// Faults for packets travelling from node `from` to node `to` (whoever opened the
    /// connection). Out-of-range pairs are ignored.
    pub fn set(&self, from: usize, to: usize, faults: LinkFaults) {
        let mut links = self.lock();
        if let Some(slot) = links.index(from, to).and_then(|i| links.faults.get_mut(i)) {
            *slot = faults;
        }
    }

    /// The faults now applied to `from → to`.
    pub fn faults(&self, from: usize, to: usize) -> Option<LinkFaults> {
        let links = self.lock();
        links
            .index(from, to)
            .and_then(|i| links.faults.get(i))
            .cloned()
    }

    /// Blocks every link between `side` and the other nodes, both directions (links inside
    /// `side`, and among the others, keep their faults).
    pub fn partition(&self, side: &[usize]) {
        let mut links = self.lock();
        let nodes = links.nodes;
        for from in 0..nodes {
            for to in 0..nodes {
                if side.contains(&from) == side.contains(&to) {
                    continue;
                }
                if let Some(slot) = links.index(from, to).and_then(|i| links.faults.get_mut(i)) {
                    slot.blocked = true;
                }
            }
        }
    }

    /// Every link back to no faults.
    pub fn heal(&self) {
        let mut links = self.lock();
        for faults in &mut links.faults {
            *faults = LinkFaults::default();
        }
    }

    /// The counters of every link and their total.
    pub fn stats(&self) -> RelayStats {
        let links = self.lock();
        let mut out = RelayStats::default();
        for from in 0..links.nodes {
            for to in 0..links.nodes {
                if let Some(stats) = links.index(from, to).and_then(|i| links.stats.get(i)) {
                    out.total.add(stats);
                    out.links.push(LinkCounters {
                        from,
                        to,
                        stats: *stats,
                    });
                }
            }
        }
        out
    }

    /// Stops forwarding and waits for the relay's tasks to end (packets still queued are lost).
    pub async fn shutdown(mut self) {
        // Receivers gone only means every task already ended.
        let _ = self.stop.send(true);
        for task in std::mem::take(&mut self.tasks) {
            // A task that panicked has nothing left to clean up.
            let _ = task.await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Links> {
        lock(&self.links)
    }
}

/// Counters and faults stay meaningful if a holder panicked: they are plain numbers.
fn lock(links: &Mutex<Links>) -> MutexGuard<'_, Links> {
    links.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A packet waiting for its time.
#[derive(Debug)]
struct Queued {
    due: Instant,
    seq: u64,
    dest: SocketAddr,
    /// Link index the packet counts against.
    link: usize,
    bytes: Arc<[u8]>,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// One relay socket: forwards `from → to` packets to node `to`'s address and `to → from`
/// replies back to the latest address `from` sent from.
struct Pipe {
    from: usize,
    to: usize,
    socket: UdpSocket,
    links: Arc<Mutex<Links>>,
    rng: StdRng,
}

impl Pipe {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut client: Option<SocketAddr> = None;
        let mut queue: BinaryHeap<Reverse<Queued>> = BinaryHeap::new();
        let mut seq: u64 = 0;
        loop {
            let next_due = queue.peek().map(|Reverse(q)| q.due);
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
                received = self.socket.recv_from(&mut buf) => {
                    // An error here is the ICMP "port unreachable" of an earlier send (a node
                    // that is down), surfaced by Linux: it concerns that send, not this socket.
                    if let Ok((len, src)) = received {
                        let bytes: Arc<[u8]> = buf.get(..len).unwrap_or_default().into();
                        self.admit(src, bytes, &mut client, &mut queue, &mut seq);
                    }
                }
                () = sleep_until_opt(next_due), if next_due.is_some() => {}
            }
            self.flush_due(&mut queue).await;
        }
    }

    /// Decides the fate of one arriving packet and queues its copies.
    fn admit(
        &mut self,
        src: SocketAddr,
        bytes: Arc<[u8]>,
        client: &mut Option<SocketAddr>,
        queue: &mut BinaryHeap<Reverse<Queued>>,
        seq: &mut u64,
    ) {
        let now = Instant::now();
        let mut links = lock(&self.links);
        let Some(target) = links.targets.get(self.to).copied() else {
            return;
        };
        let (link_from, link_to, dest) = if src == target {
            (self.to, self.from, *client)
        } else {
            *client = Some(src);
            (self.from, self.to, Some(target))
        };
        let Some(link) = links.index(link_from, link_to) else {
            return;
        };
        let faults = links.faults.get(link).cloned().unwrap_or_default();
        let Some(stats) = links.stats.get_mut(link) else {
            return;
        };
        stats.received = stats.received.saturating_add(1);
        let lost = self.rng.random::<f64>() < faults.loss;
        let Some(dest) = dest.filter(|_| !faults.blocked && !lost) else {
            stats.dropped = stats.dropped.saturating_add(1);
            return;
        };
        let copies = if self.rng.random::<f64>() < faults.duplicate {
            stats.duplicated = stats.duplicated.saturating_add(1);
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = faults
                .delay
                .saturating_add(jitter(&mut self.rng, faults.jitter));
            if self.rng.random::<f64>() < faults.reorder {
                stats.reordered = stats.reordered.saturating_add(1);
                delay = delay.saturating_add(REORDER_HOLD);
            }
            if queue.len() >= MAX_QUEUED_PER_SOCKET {
                stats.dropped = stats.dropped.saturating_add(1);
                stats.queue_full = stats.queue_full.saturating_add(1);
                continue;
            }
            *seq = seq.wrapping_add(1);
            queue.push(Reverse(Queued {
                due: now.checked_add(delay).unwrap_or(now),
                seq: *seq,
                dest,
                link,
                bytes: Arc::clone(&bytes),
            }));
        }
    }

    /// Sends every queued packet whose time has come.
    async fn flush_due(&self, queue: &mut BinaryHeap<Reverse<Queued>>) {
        let now = Instant::now();
        while queue.peek().is_some_and(|Reverse(q)| q.due <= now) {
            let Some(Reverse(packet)) = queue.pop() else {
                break;
            };
            let sent = self
                .socket
                .send_to(&packet.bytes, packet.dest)
                .await
                .is_ok();
            let mut links = lock(&self.links);
            if let Some(stats) = links.stats.get_mut(packet.link) {
                if sent {
                    stats.forwarded = stats.forwarded.saturating_add(1);
                } else {
                    stats.dropped = stats.dropped.saturating_add(1);
                }
            }
        }
    }
}

/// A delay drawn uniformly from `[0, max]`.
fn jitter(rng: &mut StdRng, max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.random_range(0..=nanos))
}

async fn sleep_until_opt(due: Option<Instant>) {
    if let Some(due) = due {
        tokio::time::sleep_until(due).await;
    }
}

#[cfg(test)]
mod tests;

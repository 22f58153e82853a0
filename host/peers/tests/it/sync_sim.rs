//! A small simulated network for `RangeSync`: a canonical chain, peers with scripted
//! behaviour and latency, and an importer that accepts only canonical blocks.

use modnode_peers::{
    BlockHash, NodeId, RangeSync, Request, SyncConfig, SyncError, Time, Violation,
};

/// Hash of canonical block `height`.
pub fn hash(height: u64) -> BlockHash {
    let mut hash = [0u8; 32];
    hash[..8].copy_from_slice(&height.to_le_bytes());
    hash[31] = 0xc0;
    hash
}

/// Bytes of canonical block `height`.
pub fn bytes(height: u64) -> Vec<u8> {
    let mut bytes = b"block".to_vec();
    bytes.extend_from_slice(&height.to_le_bytes());
    bytes
}

pub fn node(n: u8) -> NodeId {
    let mut id = [0u8; 32];
    id[0] = n;
    id
}

/// How a simulated peer answers block requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Serves canonical blocks after its latency.
    Honest,
    /// Never answers.
    Silent,
    /// Serves a corrupted block at this height, canonical ones elsewhere.
    BadAt(u64),
}

pub struct SimPeer {
    pub id: NodeId,
    pub head: u64,
    pub latency: Time,
    pub behaviour: Behaviour,
    pub connected: bool,
}

impl SimPeer {
    pub fn new(n: u8, head: u64, latency: Time, behaviour: Behaviour) -> Self {
        Self {
            id: node(n),
            head,
            latency,
            behaviour,
            connected: true,
        }
    }

    /// The answer to `request` under this peer's behaviour.
    pub fn answer(&self, request: &Request) -> Vec<(u64, BlockHash, Vec<u8>)> {
        let end = (request.start_height + request.count).min(self.head + 1);
        (request.start_height..end)
            .map(|h| {
                let mut body = bytes(h);
                if self.behaviour == Behaviour::BadAt(h) {
                    body.push(0xff);
                }
                (h, hash(h), body)
            })
            .collect()
    }
}

/// What happened during a run.
#[derive(Default, Debug)]
pub struct Log {
    /// Every request issued, with the time.
    pub requests: Vec<(Time, Request)>,
    /// Every block handed to the importer: (height, served by).
    pub delivered: Vec<(u64, NodeId)>,
    /// Heights the importer accepted, in order.
    pub imported: Vec<u64>,
    pub violations: Vec<(NodeId, Violation)>,
    /// Largest number of requests in flight at once.
    pub max_in_flight: usize,
    /// Largest number of requests in flight to one peer at once.
    pub max_in_flight_per_peer: usize,
    /// Largest number of blocks buffered at once.
    pub max_buffered: usize,
}

pub struct Sim {
    pub sync: RangeSync,
    pub peers: Vec<SimPeer>,
    pub now: Time,
    /// Answers on their way: (arrival time, request).
    pub pending: Vec<(Time, Request)>,
    pub log: Log,
}

impl Sim {
    pub fn new(config: SyncConfig, peers: Vec<SimPeer>) -> Self {
        let mut sync = RangeSync::new(config, 0, hash(0)).unwrap();
        for peer in &peers {
            sync.handle_peer_status(peer.id, peer.head, hash(peer.head), 0);
        }
        Self {
            sync,
            peers,
            now: 0,
            pending: Vec::new(),
            log: Log::default(),
        }
    }

    fn peer(&self, id: &NodeId) -> &SimPeer {
        self.peers.iter().find(|p| p.id == *id).unwrap()
    }

    /// Issues all requests the sync wants now; checks the in-flight bounds after each.
    pub fn issue_requests(&mut self) {
        while let Some(request) = self.sync.poll_request(self.now) {
            let status = self.sync.status();
            assert!(request.count >= 1);
            assert!(request.start_height > status.head_height);
            self.log.requests.push((self.now, request));
            self.log.max_in_flight = self.log.max_in_flight.max(status.in_flight);
            let per_peer = self.sync.in_flight_to(&request.peer);
            self.log.max_in_flight_per_peer = self.log.max_in_flight_per_peer.max(per_peer);
            let peer = self.peer(&request.peer);
            if peer.connected && peer.behaviour != Behaviour::Silent {
                self.pending.push((self.now + peer.latency, request));
            }
        }
    }

    /// Delivers every answer due by now, in arrival order.
    pub fn deliver_answers(&mut self) {
        self.pending.sort_by_key(|(at, r)| (*at, r.id));
        while self.pending.first().is_some_and(|(at, _)| *at <= self.now) {
            let (_, request) = self.pending.remove(0);
            let peer = self.peer(&request.peer);
            if !peer.connected {
                continue;
            }
            let answer = peer.answer(&request);
            match self.sync.handle_blocks(request.peer, request.id, answer) {
                Ok(()) | Err(SyncError::UnknownRequest { .. }) => {}
                Err(other) => panic!("unexpected error {other}"),
            }
        }
        self.log.max_buffered = self.log.max_buffered.max(self.sync.status().buffered);
    }

    /// Imports every ready block, checking the order, and hands violations to the "peer
    /// manager" (which disconnects the peer).
    pub fn import(&mut self) {
        while let Some((height, body, from)) = self.sync.poll_ready_block() {
            let head = self.sync.status().head_height;
            assert_eq!(height, head + 1, "block handed out out of order");
            self.log.delivered.push((height, from));
            if body == bytes(height) {
                self.log.imported.push(height);
                self.sync.handle_imported(height, hash(height));
            } else {
                self.sync.handle_import_failed(height, from);
            }
        }
        while let Some((peer, violation)) = self.sync.poll_violation() {
            self.log.violations.push((peer, violation));
            self.sync.handle_peer_disconnected(peer);
            if let Some(p) = self.peers.iter_mut().find(|p| p.id == peer) {
                p.connected = false;
            }
        }
    }

    /// One round: requests, answers, imports; then advances time to the next event.
    /// Returns false when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.issue_requests();
        self.deliver_answers();
        self.import();
        self.issue_requests();
        let next_answer = self.pending.iter().map(|(at, _)| *at).min();
        let next = match (next_answer, self.sync.poll_timeout()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return false,
            },
        };
        self.now = self.now.max(next);
        true
    }

    /// Steps until synced (or `max_steps`), returning the number of steps.
    pub fn run(&mut self, max_steps: usize) -> usize {
        for step in 0..max_steps {
            if self.sync.is_synced() {
                return step;
            }
            if !self.step() {
                self.import();
                return step;
            }
        }
        max_steps
    }
}

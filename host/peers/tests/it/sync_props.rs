//! Property: whatever peers answer, in whatever order and timing — full, partial, empty,
//! corrupted or malformed answers, failures, timeouts, head changes, disconnections — the
//! importer receives blocks at strictly increasing heights without gaps, never more than M
//! requests are in flight, and once peers behave the chain is fully synced, each block
//! imported exactly once.

use proptest::prelude::*;

use modnode_peers::{BlockHash, NodeId, RangeSync, Request, SECONDS, SyncConfig, SyncError, Time};

use crate::sync_sim::{bytes, hash, node};

const PEERS: usize = 3;

const CONFIG: SyncConfig = SyncConfig {
    batch_size: 8,
    max_in_flight: 4,
    max_in_flight_per_peer: 2,
    request_timeout: SECONDS,
    lookahead: 40,
    retry_backoff: SECONDS,
    retry_backoff_max: 4 * SECONDS,
};

#[derive(Debug, Clone, Copy)]
enum How {
    Full,
    Prefix(usize),
    Empty,
    /// Wrong bytes at this offset (hash unchanged): only the importer notices.
    Corrupt(usize),
    /// Heights shifted by one: malformed.
    Skewed,
}

#[derive(Debug, Clone)]
enum Op {
    Poll,
    Answer { pick: usize, how: How },
    Fail { pick: usize },
    Advance { micros: Time },
    Import,
    Status { peer: usize, head: u64 },
    Disconnect { peer: usize },
}

fn how() -> impl Strategy<Value = How> {
    prop_oneof![
        3 => Just(How::Full),
        2 => (0usize..8).prop_map(How::Prefix),
        1 => Just(How::Empty),
        1 => (0usize..8).prop_map(How::Corrupt),
        1 => Just(How::Skewed),
    ]
}

fn op(len: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Poll),
        6 => (any::<usize>(), how()).prop_map(|(pick, how)| Op::Answer { pick, how }),
        1 => any::<usize>().prop_map(|pick| Op::Fail { pick }),
        2 => (0..2 * SECONDS).prop_map(|micros| Op::Advance { micros }),
        4 => Just(Op::Import),
        1 => (0..PEERS, 0..=len).prop_map(|(peer, head)| Op::Status { peer, head }),
        1 => (0..PEERS).prop_map(|peer| Op::Disconnect { peer }),
    ]
}

struct Harness {
    sync: RangeSync,
    len: u64,
    heads: [u64; PEERS],
    connected: [bool; PEERS],
    outstanding: Vec<Request>,
    imported: Vec<u64>,
    now: Time,
}

impl Harness {
    fn index(peer: &NodeId) -> usize {
        usize::from(peer[0]) - 1
    }

    fn connect(&mut self, peer: usize, head: u64) {
        self.heads[peer] = head;
        self.connected[peer] = true;
        let id = node(peer as u8 + 1);
        self.sync.handle_peer_status(id, head, hash(head), self.now);
    }

    fn disconnect(&mut self, peer: usize) {
        self.connected[peer] = false;
        self.sync.handle_peer_disconnected(node(peer as u8 + 1));
    }

    fn poll(&mut self) {
        while let Some(request) = self.sync.poll_request(self.now) {
            assert!(self.sync.status().in_flight <= CONFIG.max_in_flight);
            assert!(self.sync.in_flight_to(&request.peer) <= CONFIG.max_in_flight_per_peer);
            assert!(request.count >= 1 && request.count <= CONFIG.batch_size);
            assert!(request.start_height > self.sync.status().head_height);
            self.outstanding.push(request);
        }
    }

    fn answer(&mut self, request: Request, how: How) {
        let peer = Self::index(&request.peer);
        // Peer 0 never lies, so the chain can always complete.
        let how = match how {
            How::Corrupt(_) | How::Skewed if peer == 0 => How::Full,
            other => other,
        };
        let end = (request.start_height + request.count).min(self.heads[peer] + 1);
        let mut blocks: Vec<(u64, BlockHash, Vec<u8>)> = (request.start_height..end)
            .map(|h| (h, hash(h), bytes(h)))
            .collect();
        match how {
            How::Full => {}
            How::Prefix(n) => blocks.truncate(n),
            How::Empty => blocks.clear(),
            How::Corrupt(at) => {
                if let Some(block) = blocks.get_mut(at) {
                    block.2.push(0xee);
                }
            }
            How::Skewed => blocks.iter_mut().for_each(|b| b.0 += 1),
        }
        match self.sync.handle_blocks(request.peer, request.id, blocks) {
            Ok(()) | Err(SyncError::UnknownRequest { .. }) => {}
            Err(other) => panic!("unexpected {other}"),
        }
    }

    fn import(&mut self) {
        while let Some((height, body, from)) = self.sync.poll_ready_block() {
            let head = self.sync.status().head_height;
            assert_eq!(height, head + 1, "gap or reordering at the importer");
            if body == bytes(height) {
                assert_eq!(self.imported.last().copied().unwrap_or(0) + 1, height);
                self.imported.push(height);
                self.sync.handle_imported(height, hash(height));
            } else {
                self.sync.handle_import_failed(height, from);
            }
        }
        while let Some((peer, _)) = self.sync.poll_violation() {
            self.disconnect(Self::index(&peer));
        }
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Poll => self.poll(),
            Op::Answer { pick, how } if !self.outstanding.is_empty() => {
                let request = self.outstanding.remove(pick % self.outstanding.len());
                if self.connected[Self::index(&request.peer)] {
                    self.answer(request, how);
                }
            }
            Op::Fail { pick } if !self.outstanding.is_empty() => {
                let request = self.outstanding.remove(pick % self.outstanding.len());
                match self
                    .sync
                    .handle_request_failed(request.peer, request.id, self.now)
                {
                    Ok(()) | Err(SyncError::UnknownRequest { .. }) => {}
                    Err(other) => panic!("unexpected {other}"),
                }
            }
            Op::Answer { .. } | Op::Fail { .. } => {}
            Op::Advance { micros } => self.now += micros,
            Op::Import => self.import(),
            Op::Status { peer, head } => self.connect(peer, head),
            Op::Disconnect { peer } => self.disconnect(peer),
        }
    }

    /// From now on every peer is connected, at the full height, and answers in full.
    fn drain(&mut self) {
        // Violations still queued name the connections about to be dropped here; acting on them
        // after the reconnect below would drop the fresh, honest connections instead, and with
        // no peer left "synced" would hold vacuously.
        while self.sync.poll_violation().is_some() {}
        for peer in 0..PEERS {
            self.disconnect(peer);
            self.connect(peer, self.len);
        }
        for _ in 0..10_000 {
            self.import();
            if self.sync.is_synced() {
                return;
            }
            for peer in 0..PEERS {
                if !self.connected[peer] {
                    self.connect(peer, self.len);
                }
            }
            self.poll();
            for request in std::mem::take(&mut self.outstanding) {
                if self.connected[Self::index(&request.peer)] {
                    self.answer(request, How::Full);
                }
            }
            self.now += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_interleaving_delivers_in_order_without_gaps(
        (len, heads, ops) in (1u64..200).prop_flat_map(|len| (
            Just(len),
            proptest::array::uniform3(0..=len),
            proptest::collection::vec(op(len), 0..300),
        ))
    ) {
        let mut harness = Harness {
            sync: RangeSync::new(CONFIG, 0, hash(0)).unwrap(),
            len,
            heads,
            connected: [false; PEERS],
            outstanding: Vec::new(),
            imported: Vec::new(),
            now: 0,
        };
        for (peer, head) in heads.iter().enumerate() {
            harness.connect(peer, *head);
        }
        for op in ops {
            harness.apply(op);
        }
        harness.drain();
        prop_assert!(harness.sync.is_synced());
        prop_assert_eq!(harness.imported, (1..=len).collect::<Vec<_>>());
    }
}

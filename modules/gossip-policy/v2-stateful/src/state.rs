//! The policy's memory and its encoding: `b"DS1"`, the clock (u64), the number of entries
//! (u16), then per peer its handle (u32), duplicates (u32) and the time of the latest (u64),
//! little endian, sorted by handle, at most [`MAX_PEERS`] (16 bytes each: ~16 KiB, far under
//! the host's state bound). Decoding is total: bytes that are not such a state read as empty.

use gossip_policy_common::PeerId;

/// Peers remembered at most; beyond it the one struck longest ago is forgotten.
pub const MAX_PEERS: usize = 1_024;

const MAGIC: &[u8; 3] = b"DS1";
const ENTRY_BYTES: usize = 16;
const HEADER_BYTES: usize = 3 + 8 + 2;

/// Duplicates one peer sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strikes {
    /// The peer's handle.
    pub peer: PeerId,
    /// Duplicates it pushed within the memory window.
    pub count: u32,
    /// When the latest arrived, host milliseconds.
    pub at_ms: u64,
}

/// What the policy remembers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// The host clock at the latest tick, milliseconds.
    pub now_ms: u64,
    /// Peers that pushed duplicates, sorted by handle.
    pub peers: Vec<Strikes>,
}

impl Memory {
    /// Duplicates `peer` pushed within the memory window.
    pub fn strikes(&self, peer: PeerId) -> u32 {
        self.peers
            .binary_search_by_key(&peer, |s| s.peer)
            .ok()
            .and_then(|i| self.peers.get(i))
            .map_or(0, |s| s.count)
    }

    /// `peer` pushed a duplicate.
    pub fn duplicate(&mut self, peer: PeerId) {
        let now = self.now_ms;
        match self.peers.binary_search_by_key(&peer, |s| s.peer) {
            Ok(i) => {
                if let Some(s) = self.peers.get_mut(i) {
                    s.count = s.count.saturating_add(1);
                    s.at_ms = now;
                }
            }
            Err(i) => {
                if self.peers.len() >= MAX_PEERS {
                    self.evict_oldest();
                }
                let at = i.min(self.peers.len());
                self.peers.insert(
                    at,
                    Strikes {
                        peer,
                        count: 1,
                        at_ms: now,
                    },
                );
                // The eviction may have shifted the insertion point.
                self.peers.sort_unstable_by_key(|s| s.peer);
            }
        }
    }

    /// Forgets `peer` (it left, joined afresh, or its link is needed after all).
    pub fn forget(&mut self, peer: PeerId) {
        self.peers.retain(|s| s.peer != peer);
    }

    /// The clock moved to `now_ms`: strikes older than `memory_ms` are forgotten.
    pub fn tick(&mut self, now_ms: u64, memory_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        let now = self.now_ms;
        self.peers
            .retain(|s| now.saturating_sub(s.at_ms) < memory_ms);
    }

    fn evict_oldest(&mut self) {
        if let Some(oldest) = self
            .peers
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| (s.at_ms, s.peer))
            .map(|(i, _)| i)
        {
            self.peers.remove(oldest);
        }
    }

    /// The encoding described in the module docs.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.peers.len().min(MAX_PEERS);
        let mut out =
            Vec::with_capacity(HEADER_BYTES.saturating_add(n.saturating_mul(ENTRY_BYTES)));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.now_ms.to_le_bytes());
        out.extend_from_slice(&u16::try_from(n).unwrap_or(u16::MAX).to_le_bytes());
        for s in self.peers.iter().take(n) {
            out.extend_from_slice(&s.peer.to_le_bytes());
            out.extend_from_slice(&s.count.to_le_bytes());
            out.extend_from_slice(&s.at_ms.to_le_bytes());
        }
        out
    }

    /// Reads [`encode`](Self::encode)'s bytes; anything else (empty, another format, a wrong
    /// length, unsorted or too many entries) is an empty memory.
    pub fn decode(bytes: &[u8]) -> Memory {
        Self::try_decode(bytes).unwrap_or_default()
    }

    fn try_decode(bytes: &[u8]) -> Option<Memory> {
        let (magic, rest) = bytes.split_at_checked(MAGIC.len())?;
        if magic != MAGIC {
            return None;
        }
        let (now, rest) = rest.split_first_chunk::<8>()?;
        let (count, mut rest) = rest.split_first_chunk::<2>()?;
        let count = usize::from(u16::from_le_bytes(*count));
        if count > MAX_PEERS || rest.len() != count.checked_mul(ENTRY_BYTES)? {
            return None;
        }
        let mut peers = Vec::with_capacity(count);
        while let Some((entry, tail)) = rest.split_first_chunk::<ENTRY_BYTES>() {
            let (peer, more) = entry.split_first_chunk::<4>()?;
            let (n, at) = more.split_first_chunk::<4>()?;
            let at: [u8; 8] = at.try_into().ok()?;
            peers.push(Strikes {
                peer: u32::from_le_bytes(*peer),
                count: u32::from_le_bytes(*n),
                at_ms: u64::from_le_bytes(at),
            });
            rest = tail;
        }
        if !peers
            .windows(2)
            .all(|w| matches!(w, [a, b] if a.peer < b.peer))
        {
            return None;
        }
        Some(Memory {
            now_ms: u64::from_le_bytes(*now),
            peers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_round_trips_and_garbage_reads_as_empty() {
        let mut m = Memory::default();
        m.tick(5_000, 30_000);
        for p in [9, 3, 9, 7, 3, 9] {
            m.duplicate(p);
        }
        assert_eq!(m.strikes(9), 3);
        assert_eq!(m.strikes(3), 2);
        assert_eq!(m.strikes(1), 0);
        let bytes = m.encode();
        assert_eq!(Memory::decode(&bytes), m);
        assert_eq!(Memory::decode(b""), Memory::default());
        assert_eq!(Memory::decode(&bytes[..bytes.len() - 1]), Memory::default());
        assert_eq!(Memory::decode(b"XX1garbage"), Memory::default());
    }

    #[test]
    fn strikes_expire_and_the_memory_stays_bounded() {
        let mut m = Memory::default();
        m.duplicate(1);
        m.tick(40_000, 30_000);
        assert_eq!(m.strikes(1), 0);
        for p in 0..(MAX_PEERS as u32 + 50) {
            m.duplicate(p);
        }
        assert_eq!(m.peers.len(), MAX_PEERS);
        assert!(m.encode().len() <= HEADER_BYTES + MAX_PEERS * ENTRY_BYTES);
        assert!(m.peers.windows(2).all(|w| w[0].peer < w[1].peer));
    }
}

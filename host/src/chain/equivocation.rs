//! Equivocation: an authority signing two different blocks for one of its slots.
//!
//! Each slot of an authority chain belongs to one authority, which may sign one block for it.
//! The first signed header this node sees for `(slot, proposer)` above the finalized block's
//! slot is remembered (one record per slot, `keys::first_header`; none for final slots, whose
//! blocks can never be canonical, so headers signed for past slots cost nothing); a second, different one is [`Evidence`]: two headers the same
//! authority signed for the same slot, which anyone holding the genesis can check. The second
//! block is neither executed nor stored, only the evidence is (persisted, newest
//! [`MAX_EVIDENCE`] kept), so whatever an authority signs, a slot costs this node at most one
//! block, one first-header record and one evidence record.
//!
//! **Fork choice is deterministic once the evidence is known.** Honest nodes may see the
//! equivocator's blocks in different orders, so "keep the first" alone would leave them on
//! different branches. Instead, a slot with evidence is *void*: every block of that authority at
//! that slot is refused, the one this node took first included, and so is every block built on
//! one of them. A node holding evidence reverts its head below such a block (if it is above the
//! finalized height: a final block is never reverted, the evidence is still recorded). The
//! outcome depends only on the set of slots with evidence, not on which blocks a node saw
//! or in which order, and the evidence reaches every honest node: the node that detects it
//! relays the second block once (the first went out when it was taken), so each peer receives
//! both signed headers and detects the equivocation itself. A third or later block of a void
//! slot is refused without being relayed.
//!
//! The relayer of a second block is not penalised: an honest node relays the first block of a
//! slot it sees, which may be another node's second. The authority is at fault; the node
//! layer penalises a peer only when it is the equivocating authority itself
//! ([`crate::node::verdict`]).

use std::collections::BTreeMap;

use super::block::{Block, BlockHash, BlockHeader, HEADER_BYTES, Seal};
use super::{Chain, ForkChoiceError};
use crate::store::{StoreError, WriteBatch, keys};

/// Most evidence records kept (in the store and in memory); beyond it the record of the
/// oldest slot is dropped. An authority can add at most one per slot it owns, and slots are
/// bounded by the clock (blocks from future slots are refused), so this is a window of the
/// latest 1,024 equivocations, long past finality for any older one.
pub const MAX_EVIDENCE: usize = 1024;

/// Most blocks remembered as void (of a void slot, or built on one); the memory is cleared
/// when it fills (a forgotten one is refused again by its slot, or as an unknown parent's
/// child).
const MAX_VOID: usize = 4096;

/// How many of the newest evidence records a [`Chain::recent_evidence`] summary lists.
pub const RECENT_EVIDENCE: usize = 8;

/// An ed25519-signed block header: one half of [`Evidence`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedHeader {
    /// The header.
    pub header: BlockHeader,
    /// The authority's signature over the header's seal message.
    pub signature: [u8; 64],
}

/// Length of an encoded [`SignedHeader`].
const SIGNED_HEADER_BYTES: usize = HEADER_BYTES + 64;

impl SignedHeader {
    /// The header of a sealed block (`None` for an unsigned one).
    pub fn of(block: &Block) -> Option<Self> {
        match block.seal {
            Seal::Ed25519(signature) => Some(Self {
                header: block.header,
                signature,
            }),
            Seal::Unsigned => None,
        }
    }

    /// Header ‖ signature.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.header.encode();
        out.extend_from_slice(&self.signature);
        out
    }

    /// Decodes [`SignedHeader::encode`]'s output.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != SIGNED_HEADER_BYTES {
            return None;
        }
        let (header, signature) = bytes.split_at_checked(HEADER_BYTES)?;
        Some(Self {
            header: BlockHeader::decode(header).ok()?,
            signature: signature.try_into().ok()?,
        })
    }
}

/// Proof that an authority equivocated: two different headers it signed for one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evidence {
    /// The header this node saw first.
    pub first: SignedHeader,
    /// A different header of the same authority for the same slot.
    pub second: SignedHeader,
}

impl Evidence {
    /// The slot both headers claim.
    pub fn slot(&self) -> u64 {
        self.first.header.slot
    }

    /// The authority (index in the genesis authority set) that signed both.
    pub fn proposer(&self) -> u32 {
        self.first.header.proposer
    }

    /// First ‖ second.
    pub fn encode(&self) -> Vec<u8> {
        [self.first.encode(), self.second.encode()].concat()
    }

    /// Decodes [`Evidence::encode`]'s output.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (first, second) = bytes.split_at_checked(SIGNED_HEADER_BYTES)?;
        Some(Self {
            first: SignedHeader::decode(first)?,
            second: SignedHeader::decode(second)?,
        })
    }

    /// Whether this is evidence on the chain of `genesis`: one slot, one proposer — the slot's
    /// authority —, two different headers, both signatures valid.
    pub fn verify(&self, genesis: &super::genesis::Genesis, genesis_hash: &BlockHash) -> bool {
        let (a, b) = (&self.first, &self.second);
        let slot = a.header.slot;
        let same_slot = slot == b.header.slot && a.header.proposer == b.header.proposer;
        let owner = genesis.proposer_for(slot) == Some(a.header.proposer);
        let Some(authority) = usize::try_from(a.header.proposer)
            .ok()
            .and_then(|i| genesis.authorities.get(i))
        else {
            return false;
        };
        let id = crate::crypto::identity::NodeId::from_bytes(*authority);
        let signed = |s: &SignedHeader| {
            id.verify(
                &super::block::seal_message(genesis_hash, &s.header.hash()),
                &s.signature,
            )
        };
        same_slot && owner && a.header.hash() != b.header.hash() && signed(a) && signed(b)
    }
}

/// A line of `/status` about one piece of evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvidenceSummary {
    /// The slot.
    pub slot: u64,
    /// The equivocating authority's index.
    pub proposer: u32,
    /// The block this node saw first.
    pub first: BlockHash,
    /// The conflicting block.
    pub second: BlockHash,
}

/// The evidence a chain holds, by `(slot, proposer)` (at most [`MAX_EVIDENCE`]).
#[derive(Debug, Default)]
pub(super) struct Equivocations {
    evidence: BTreeMap<(u64, u32), Evidence>,
    /// Blocks of a void slot or built on one (at most [`MAX_VOID`]): their children are
    /// refused without blaming the sender, who may have built on one before the evidence
    /// reached it.
    void: std::collections::HashSet<BlockHash>,
    /// Evidence records found since the chain opened (the `/metrics` counter).
    found: u64,
}

impl Equivocations {
    /// The evidence stored in `store`.
    pub(super) fn load(store: &dyn crate::store::KvStore) -> Result<Self, StoreError> {
        let mut evidence = BTreeMap::new();
        store.scan_prefix(keys::EVIDENCE_PREFIX, &mut |key, value| {
            let e = Evidence::decode(value).ok_or_else(|| {
                StoreError::Corrupt(format!("equivocation evidence record {key:02x?} malformed"))
            })?;
            evidence.insert((e.slot(), e.proposer()), e);
            Ok(())
        })?;
        Ok(Self {
            evidence,
            ..Self::default()
        })
    }
}

impl Chain {
    /// Remembers `hash` as void (bounded: the memory is cleared when full).
    pub(super) fn remember_void(&mut self, hash: BlockHash) {
        let void = &mut self.equivocations.void;
        if void.len() >= MAX_VOID {
            void.clear();
        }
        void.insert(hash);
    }

    /// Whether `hash` is a block remembered as void.
    pub(super) fn is_void_block(&self, hash: &BlockHash) -> bool {
        self.equivocations.void.contains(hash)
    }

    /// Whether `header`'s slot is void: this node holds evidence that its authority signed
    /// another block for it.
    pub(super) fn is_void(&self, header: &BlockHeader) -> bool {
        self.equivocations
            .evidence
            .contains_key(&(header.slot, header.proposer))
    }

    /// The one-block-per-authority-per-slot rule, for a block whose seal was checked and that
    /// is not canonical (the caller remembers its header as the slot's first if none is yet):
    /// refuses a block of a void slot or one that conflicts with the first (recording the evidence, voiding the
    /// slot and reverting the head below the slot's block if it is above finality).
    pub(super) fn check_equivocation(
        &mut self,
        block: &Block,
        hash: BlockHash,
    ) -> Result<(), ForkChoiceError> {
        let Some(signed) = SignedHeader::of(block) else {
            return Ok(());
        };
        if self.genesis.authorities.is_empty() {
            return Ok(());
        }
        let (slot, proposer) = (block.header.slot, block.header.proposer);
        if slot <= self.finalized_slot()? {
            // Such a block can never be canonical (its branch forks below finality): fork
            // choice refuses it anyway, and no record is kept for it.
            return Ok(());
        }
        let refused = |first: &SignedHeader, new_evidence: bool, reverted: u64| {
            ForkChoiceError::Equivocation {
                hash,
                slot,
                proposer,
                first: first.header.hash(),
                new_evidence,
                reverted,
            }
        };
        if let Some(evidence) = self.equivocations.evidence.get(&(slot, proposer)) {
            let err = refused(&evidence.first, false, 0);
            self.remember_void(hash);
            return Err(err);
        }
        let key = keys::first_header(slot, proposer);
        // None yet: the caller remembers this block's header on every path it takes.
        let Some(bytes) = self.store.get(&key)? else {
            return Ok(());
        };
        let first = SignedHeader::decode(&bytes).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "first signed header of slot {slot} (authority {proposer}) malformed"
            ))
        })?;
        if first.header.hash() == hash {
            return Ok(());
        }
        let evidence = Evidence {
            first,
            second: signed,
        };
        self.record_evidence(evidence)?;
        let reverted = self.void_slot(&evidence)?;
        tracing::warn!(
            slot,
            authority = proposer,
            first = %first.header.hash(),
            second = %hash,
            reverted,
            "authority signed two blocks for one slot: evidence recorded, the slot is void"
        );
        Err(refused(&first, true, reverted))
    }

    /// Remembers the first signed header of `block`'s slot if none is yet (the producer's own
    /// blocks and every imported block), in `batch`.
    pub(super) fn note_first_header(
        &self,
        block: &Block,
        batch: &mut WriteBatch,
    ) -> Result<(), StoreError> {
        let Some(signed) = SignedHeader::of(block) else {
            return Ok(());
        };
        let key = keys::first_header(block.header.slot, block.header.proposer);
        if !self.genesis.authorities.is_empty() && self.store.get(&key)?.is_none() {
            batch.put(key, signed.encode());
        }
        Ok(())
    }

    /// [`Chain::note_first_header`] in a batch of its own, for a block refused or not attached
    /// yet; none for a slot at or below the finalized block's, so headers an authority signs
    /// for its past slots cost no storage.
    pub(super) fn note_first_header_alone(&self, block: &Block) -> Result<(), StoreError> {
        if block.header.slot <= self.finalized_slot()? {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        self.note_first_header(block, &mut batch)?;
        if !batch.is_empty() {
            self.store.commit(&batch)?;
        }
        Ok(())
    }

    /// The slot of the finalized block (0 when it is not stored: a chain restored from a
    /// checkpoint below it).
    fn finalized_slot(&self) -> Result<u64, StoreError> {
        Ok(self
            .block_at(self.finalized_height())?
            .map_or(0, |b| b.header.slot))
    }

    /// Whether this node already signed or took a block of `proposer` for `slot` (the
    /// producer must not sign a second one).
    pub fn has_block_for_slot(&self, slot: u64, proposer: u32) -> Result<bool, StoreError> {
        Ok(self
            .store
            .get(&keys::first_header(slot, proposer))?
            .is_some())
    }

    /// Persists `evidence`, dropping the oldest record beyond [`MAX_EVIDENCE`].
    fn record_evidence(&mut self, evidence: Evidence) -> Result<(), StoreError> {
        let mut batch = WriteBatch::new();
        let slot_key = (evidence.slot(), evidence.proposer());
        batch.put(keys::evidence(slot_key.0, slot_key.1), evidence.encode());
        let oldest = self
            .equivocations
            .evidence
            .keys()
            .next()
            .copied()
            .filter(|_| self.equivocations.evidence.len() >= MAX_EVIDENCE);
        if let Some((slot, proposer)) = oldest {
            batch.delete(keys::evidence(slot, proposer));
        }
        self.store.commit(&batch)?;
        if let Some(oldest) = oldest {
            self.equivocations.evidence.remove(&oldest);
        }
        self.equivocations.evidence.insert(slot_key, evidence);
        self.equivocations.found = self.equivocations.found.saturating_add(1);
        Ok(())
    }

    /// Refuses every block of `evidence`'s slot from now on and reverts the head below the
    /// canonical one, if any and above the finalized height. Returns the blocks reverted.
    fn void_slot(&mut self, evidence: &Evidence) -> Result<u64, ForkChoiceError> {
        self.remember_void(evidence.first.header.hash());
        self.remember_void(evidence.second.header.hash());
        let (slot, proposer) = (evidence.slot(), evidence.proposer());
        let finalized = self.finalized_height();
        let mut height = self.head.height;
        let mut found = None;
        while height > finalized {
            let Some(block) = self.block_at(height)? else {
                break;
            };
            if block.header.slot < slot {
                break;
            }
            if block.header.slot == slot && block.header.proposer == proposer {
                found = Some(height);
                break;
            }
            height = height.saturating_sub(1);
        }
        let Some(height) = found else {
            return Ok(0);
        };
        let mut reverted = 0u64;
        while self.head.height >= height {
            let hash = self.head.hash;
            self.revert_head()?;
            self.remember_void(hash);
            reverted = reverted.saturating_add(1);
        }
        Ok(reverted)
    }

    /// Evidence records found since the chain opened.
    pub fn equivocations_found(&self) -> u64 {
        self.equivocations.found
    }

    /// The evidence this node holds for `(slot, proposer)`.
    pub fn evidence(&self, slot: u64, proposer: u32) -> Option<Evidence> {
        self.equivocations.evidence.get(&(slot, proposer)).copied()
    }

    /// The newest [`RECENT_EVIDENCE`] records, newest slot first.
    pub fn recent_evidence(&self) -> [Option<EvidenceSummary>; RECENT_EVIDENCE] {
        let mut out = [None; RECENT_EVIDENCE];
        for (slot, e) in out
            .iter_mut()
            .zip(self.equivocations.evidence.values().rev())
        {
            *slot = Some(EvidenceSummary {
                slot: e.slot(),
                proposer: e.proposer(),
                first: e.first.header.hash(),
                second: e.second.header.hash(),
            });
        }
        out
    }
}

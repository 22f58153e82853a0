//! Finality: a block is final once it is `finality_depth` below the head **and** under a
//! checkpoint that a majority of the authorities finalized in two phases (Casper FFG with the
//! seals as votes).
//!
//! Depth alone is not enough. Cut a network in two and each side keeps producing in its own
//! slots; after `finality_depth` blocks each side has finalized its own branch and the two can
//! never merge again (fork choice never reverts a final block). So only what a majority of the
//! authorities backs can be final: a minority's branch stays open and is abandoned at the heal.
//!
//! # Why counting seals once is not enough (the chain split this replaced)
//!
//! The rule used to be Aura's "rolling finality": final once a majority sealed the block or a
//! block built on it. It claimed that two branches could both be final only if an authority
//! equivocated. Wrong: an **honest** authority seals on both sides whenever fork choice moves
//! it to another branch, and every seal counted as a vote for every block under it.
//! `host/tests/it/finality_split.rs` rebuilds the split with three honest authorities:
//!
//! - A seals X1; B hears it and builds X2 on it; A misses X2 (slow, or cut off from B).
//! - C, cut off from both, builds Y1 and Y2; A hears them: longer than its X1, so fork choice
//!   moves A to Y (nothing is final on A: moving is allowed, and needed after a heal).
//! - A seals Y3 on Y2 in its slot. B builds X3 on X2.
//! - B (and a follower with it) finalized X1: sealed by A, built on by B. A, C (and a follower
//!   with them) finalized Y1: sealed by C, built on by A.
//!
//! Under CPU starvation (slots skipped, gossip late) that is the split once seen in a 4-node
//! devnet (finalized heights 39 and 60 on chains with different blocks there). Neither obvious
//! patch closes it: "do not seal on a branch lacking a block you see as final" does not stop A
//! (it never saw X1 final, having missed X2); "count a seal only if its authority sealed
//! nothing conflicting" cannot be known by a node that never heard the other side, and carried
//! in blocks as "my previous seal" it discounts only the first seal after a switch. The cause
//! is that a node finalized on seals cast by authorities that did not know the block was about
//! to become final, so nothing kept them from leaving.
//!
//! # The rule: FFG with implicit votes
//!
//! Time is cut in epochs of `n` slots (`n` authorities; each has exactly one slot an epoch).
//! The **checkpoint** of epoch `e` on a chain is its last block of a slot before the epoch
//! starts. A block of epoch `e` is its proposer's **vote** from the chain's highest justified
//! checkpoint of an earlier epoch (the *source*) to the checkpoint of `e` (the *target*); every
//! block of one epoch in one chain has the same source and target. The checkpoint of `e` is
//! **justified** when more than half of the authorities voted in epoch `e` (the finalized root
//! — genesis, or a checkpoint's base — is justified); the source is **finalized** when the
//! target's epoch is the one right after it. A block is final once it is at or below a
//! finalized checkpoint and `finality_depth` below the head.
//!
//! Safety (Casper FFG's proof, with "more than half" for "two thirds" because every authority is
//! honest and only the network fails): two conflicting finalized checkpoints need an authority
//! that voted in both majorities either twice for one target epoch or with one vote's
//! (source, target) strictly surrounding the other's. Neither happens:
//! - one vote per epoch: an authority has one slot an epoch and never seals twice in a slot;
//! - no surround: an authority never seals in an epoch not after its last sealed one, nor from
//!   a source lower than a source it already voted from ([`SealLock`], checked by the producer
//!   before it builds).
//!
//! Liveness: fork choice prefers the chain with the higher justified checkpoint (then the longer,
//! then the lower tip hash), so after a heal the minority moves to the majority's branch — the
//! only one a majority can justify — and its authorities' locks allow them to seal there. In the
//! split above A's seal Y3 votes from genesis (epoch 0) to epoch 2: X1 was never final (epoch
//! 1's majority {A, B} justified its checkpoint, but nothing voted from it in epoch 2), and at the
//! heal everyone moves to Y, justified at epoch 2.
//!
//! The cost is liveness of finality, not of the chain: while at most half of the authorities
//! produce, or while slots are missed so that no epoch gathers a majority, blocks are still made
//! and imported but the finalized height stays where it was (visible in `/status` as a growing
//! distance between `height` and `finalized_height`), and what depends on finality —
//! checkpoints, the state cache's anchors — waits. With every authority producing, a block is
//! final about two epochs (`2 n` slots) after it was made, or `finality_depth` blocks, whichever
//! is later. A chain without authorities (the unsigned dev chain) or with one keeps the depth
//! rule only.
//!
//! What is not covered: the producer's lock starts, after a restart, from the authority's last
//! block on the stored canonical chain; a vote cast on a branch the node no longer has, or
//! before its data directory was wiped, is forgotten (it still cannot seal twice in a slot it
//! already used on this chain; a surround needs it to have voted from a higher source there).
//!
//! The finalized height never goes down: it is kept here, advanced on every import, and
//! recomputed from the stored chain when the chain opens.

use std::collections::VecDeque;

/// A canonical block above the finalized root, as finality sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    height: u64,
    slot: u64,
    proposer: u32,
}

/// A checkpoint: the block at `height` as the checkpoint of `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checkpoint {
    height: u64,
    epoch: u64,
}

/// Bytes of a persisted root ([`Finality::root_record`]): height and epoch, big-endian.
pub(super) const ROOT_RECORD_LEN: usize = 16;

impl Checkpoint {
    fn encode(self) -> [u8; ROOT_RECORD_LEN] {
        let mut out = [0u8; ROOT_RECORD_LEN];
        let (height, epoch) = out.split_at_mut(8);
        height.copy_from_slice(&self.height.to_be_bytes());
        epoch.copy_from_slice(&self.epoch.to_be_bytes());
        out
    }

    fn decode(bytes: [u8; ROOT_RECORD_LEN]) -> Self {
        let (height, epoch) = bytes.split_at(8);
        let word = |b: &[u8]| <[u8; 8]>::try_from(b).map_or(0, u64::from_be_bytes);
        Self {
            height: word(height),
            epoch: word(epoch),
        }
    }
}

/// What the votes of a chain justify and finalize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verdict {
    /// The highest justified checkpoint.
    justified: Checkpoint,
    /// The highest finalized checkpoint.
    finalized: Checkpoint,
}

/// The finalized height and the canonical blocks above the finalized root.
#[derive(Debug, Clone)]
pub(super) struct Finality {
    /// Distinct voters an epoch needs: more than half of the authorities (0 without authorities
    /// or with one: the depth rule alone).
    needed: usize,
    /// Slots an epoch (the number of authorities; 0 with the depth rule alone).
    epoch_slots: u64,
    /// Blocks this far below the head may be final.
    depth: u64,
    /// Height at or below which blocks are final.
    finalized: u64,
    /// The highest finalized checkpoint at or below `finalized`: votes are counted from it.
    root: Checkpoint,
    /// Canonical blocks above the root, oldest first (24 bytes a block): about two epochs while
    /// a majority produces, more only while finality waits for one.
    above: VecDeque<Entry>,
    /// What the votes above the root decide (kept in step with `above`).
    verdict: Verdict,
}

impl Finality {
    /// Finality of a new chain (only genesis is final) of `authorities` authorities (0:
    /// unsigned) and `depth`.
    pub(super) fn fresh(authorities: usize, depth: u64) -> Self {
        Self::new(
            authorities,
            depth,
            Checkpoint {
                height: 0,
                epoch: 0,
            },
            VecDeque::new(),
        )
    }

    /// Finality for a chain of `authorities` authorities (0: unsigned) and `depth`, with
    /// `root` final and `above` (oldest first) the canonical blocks over it.
    fn new(authorities: usize, depth: u64, root: Checkpoint, above: VecDeque<Entry>) -> Self {
        let (needed, epoch_slots) = if authorities <= 1 {
            (0, 0)
        } else {
            (
                (authorities / 2).saturating_add(1),
                u64::try_from(authorities).unwrap_or(u64::MAX),
            )
        };
        let mut finality = Self {
            needed,
            epoch_slots,
            depth,
            finalized: root.height,
            root,
            above,
            verdict: Verdict {
                justified: root,
                finalized: root,
            },
        };
        finality.verdict = finality.decide();
        finality
    }

    /// Finality over a stored chain whose head is at `head`: walks the canonical blocks down
    /// from the head (`block_at(h)`: its slot and proposer; `Ok(None)` where no block is
    /// stored, i.e. below a checkpoint's base or the pruned floor, which is final) and counts
    /// their votes up again.
    ///
    /// `stored_root` is the root the chain last persisted ([`Finality::root_record`]): a
    /// finalized checkpoint, so on every chain the store can hold from now on; the walk stops
    /// there instead of going down to what is stored, and opening costs the blocks above the
    /// root (about two epochs while a majority produces), not the history kept.
    pub(super) fn open<E>(
        authorities: usize,
        depth: u64,
        head: u64,
        stored_root: Option<[u8; ROOT_RECORD_LEN]>,
        mut block_at: impl FnMut(u64) -> Result<Option<(u64, u32)>, E>,
    ) -> Result<Self, E> {
        let mut blocks = VecDeque::new();
        let mut height = head;
        let mut root = Checkpoint {
            height: 0,
            epoch: 0,
        };
        let stored_root = stored_root
            .filter(|_| authorities > 1)
            .map(Checkpoint::decode)
            .filter(|r| r.height <= head);
        // With the depth rule alone what is `depth` below the head is final: no need to walk
        // further (with votes, the walk goes down to what is stored).
        let by_depth = (authorities <= 1).then(|| head.saturating_sub(depth));
        // Height 0 (genesis) is final; so is the block under the lowest stored one (a
        // checkpoint's base, or the pruned floor), of an epoch no later than that block's.
        while height > 0 {
            if by_depth.is_some_and(|floor| height <= floor) {
                root = Checkpoint { height, epoch: 0 };
                break;
            }
            if let Some(stored) = stored_root
                && height <= stored.height
            {
                root = stored;
                break;
            }
            let Some((slot, proposer)) = block_at(height)? else {
                let epoch_slots = if authorities <= 1 {
                    1
                } else {
                    u64::try_from(authorities).unwrap_or(u64::MAX)
                };
                root = Checkpoint {
                    height,
                    epoch: blocks
                        .front()
                        .map_or(0, |b: &Entry| b.slot.checked_div(epoch_slots).unwrap_or(0)),
                };
                break;
            };
            blocks.push_front(Entry {
                height,
                slot,
                proposer,
            });
            height = height.saturating_sub(1);
        }
        let mut walked = Self::new(authorities, depth, root, blocks);
        walked.advance(head);
        Ok(walked)
    }

    /// Height at or below which blocks are final.
    pub(super) fn finalized(&self) -> u64 {
        self.finalized
    }

    /// The root to persist with the next block (`None` with the depth rule alone, which needs
    /// none): a finalized checkpoint, never reverted, so a later [`open`](Self::open) may
    /// start its walk there.
    pub(super) fn root_record(&self) -> Option<[u8; ROOT_RECORD_LEN]> {
        self.counts_votes().then(|| self.root.encode())
    }

    /// Whether this chain counts votes (more than one authority); else the depth rule alone.
    pub(super) fn counts_votes(&self) -> bool {
        self.needed > 0
    }

    /// Epoch of the chain's highest justified checkpoint (fork choice prefers the higher; 0
    /// with the depth rule alone).
    pub(super) fn justified_epoch(&self) -> u64 {
        self.verdict.justified.epoch
    }

    /// The epoch of `slot` (0 with the depth rule alone).
    pub(super) fn epoch_of(&self, slot: u64) -> u64 {
        slot.checked_div(self.epoch_slots).unwrap_or(0)
    }

    /// The source a block of `slot` built on the head would vote from: the epoch of the
    /// chain's highest justified checkpoint of an epoch before the slot's.
    pub(super) fn source_for(&self, slot: u64) -> u64 {
        let epoch = self.epoch_of(slot);
        self.justifications()
            .iter()
            .map(|(target, _)| target.epoch)
            .filter(|e| *e < epoch)
            .fold(self.root.epoch, u64::max)
    }

    /// The vote of `proposer`'s last canonical block above the root: its epoch and the epoch
    /// of the source it voted from (`None`: no such block, or no votes counted).
    pub(super) fn last_vote_of(&self, proposer: u32) -> Option<(u64, u64)> {
        if !self.counts_votes() {
            return None;
        }
        let last = self.above.iter().rev().find(|b| b.proposer == proposer)?;
        let mut below = self.clone();
        below.reverted(last.height);
        Some((self.epoch_of(last.slot), below.source_for(last.slot)))
    }

    /// The block at `height` and `slot` sealed by authority `proposer` became the head.
    pub(super) fn imported(&mut self, height: u64, slot: u64, proposer: u32) {
        // A head below what is kept (it cannot be: nothing final is reverted) resets nothing.
        while self.above.back().is_some_and(|b| b.height >= height) {
            self.above.pop_back();
        }
        self.above.push_back(Entry {
            height,
            slot,
            proposer,
        });
        self.advance(height);
    }

    /// The head block at `height` was reverted.
    pub(super) fn reverted(&mut self, height: u64) {
        while self.above.back().is_some_and(|b| b.height >= height) {
            self.above.pop_back();
        }
        self.verdict = self.decide();
    }

    /// Counts the votes again and moves the finalized height up to the highest finalized
    /// checkpoint that is also `depth` below `head`.
    fn advance(&mut self, head: u64) {
        self.verdict = self.decide();
        let by_depth = head.saturating_sub(self.depth);
        if self.needed == 0 {
            if by_depth > self.finalized {
                self.finalized = by_depth;
            }
            let floor = self.finalized;
            while self.above.front().is_some_and(|b| b.height <= floor) {
                self.above.pop_front();
            }
            return;
        }
        let finalized = by_depth.min(self.verdict.finalized.height);
        if finalized > self.finalized {
            self.finalized = finalized;
        }
        // Votes are counted from the highest finalized checkpoint that is final here too.
        let limit = self.finalized;
        let new_root = self
            .justifications()
            .into_iter()
            .filter(|(target, source)| {
                source.epoch.checked_add(1) == Some(target.epoch) && source.height <= limit
            })
            .map(|(_, source)| source)
            .next_back();
        if let Some(root) = new_root
            && root != self.root
        {
            self.root = root;
            while self.above.front().is_some_and(|b| b.height <= root.height) {
                self.above.pop_front();
            }
            self.verdict = self.decide();
        }
    }

    /// What the votes above the root justify and finalize.
    fn decide(&self) -> Verdict {
        let mut verdict = Verdict {
            justified: self.root,
            finalized: self.root,
        };
        for (target, source) in self.justifications() {
            verdict.justified = target;
            if source.epoch.checked_add(1) == Some(target.epoch) {
                verdict.finalized = source;
            }
        }
        verdict
    }

    /// Every checkpoint the votes above the root justify, with the source it was justified
    /// from, in order (the root, justified, is not listed).
    fn justifications(&self) -> Vec<(Checkpoint, Checkpoint)> {
        let mut out = Vec::new();
        if self.needed == 0 {
            return out;
        }
        let mut justified = self.root;
        let mut blocks = self.above.iter().peekable();
        // The last block before the epoch being counted (the root until one is passed).
        let mut before = self.root.height;
        while let Some(first) = blocks.next() {
            let epoch = self.epoch_of(first.slot);
            let mut voters = vec![first.proposer];
            let mut last = first.height;
            while let Some(next) = blocks.next_if(|b| self.epoch_of(b.slot) == epoch) {
                if !voters.contains(&next.proposer) {
                    voters.push(next.proposer);
                }
                last = next.height;
            }
            // Votes of the root's epoch (or earlier) target nothing above the root. Every block
            // of one epoch votes from the same source: the highest justified checkpoint before.
            if epoch > justified.epoch && voters.len() >= self.needed {
                let target = Checkpoint {
                    height: before,
                    epoch,
                };
                out.push((target, justified));
                justified = target;
            }
            before = last;
        }
        out
    }
}

/// What an authority has voted so far, so that it never casts a vote that surrounds or is
/// surrounded by one of its own (see the module doc): held by the producer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealLock {
    /// Epoch of its last sealed block and the source that block voted from.
    last: Option<(u64, u64)>,
}

impl SealLock {
    /// The lock of an authority whose last vote was `vote` (epoch, source), if any.
    pub fn after(vote: Option<(u64, u64)>) -> Self {
        Self { last: vote }
    }

    /// Whether the authority may seal a block of `epoch` voting from `source`.
    pub fn allows(&self, epoch: u64, source: u64) -> bool {
        self.last
            .is_none_or(|(sealed, from)| epoch > sealed && source >= from)
    }

    /// The authority sealed a block of `epoch` voting from `source`.
    pub fn sealed(&mut self, epoch: u64, source: u64) {
        self.last = Some((epoch, source));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `authorities` where the block at height `h` (1-based) was made at slot
    /// `slots[h - 1]` by that slot's authority (`slot % authorities`).
    fn walked(authorities: usize, depth: u64, slots: &[u64]) -> Finality {
        let n = authorities.max(1) as u64;
        let head = slots.len() as u64;
        Finality::open::<()>(authorities, depth, head, None, |h| {
            Ok(slots.get((h - 1) as usize).map(|s| (*s, (s % n) as u32)))
        })
        .unwrap()
    }

    fn imported(authorities: usize, depth: u64, slots: &[u64]) -> Finality {
        let n = authorities.max(1) as u64;
        let mut f = Finality::fresh(authorities, depth);
        for (i, s) in slots.iter().enumerate() {
            f.imported(i as u64 + 1, *s, (s % n) as u32);
        }
        f
    }

    #[test]
    fn with_every_authority_producing_the_later_of_depth_and_two_epochs_decides() {
        // Slots 1..=40 round robin: the last epoch (39..=41) has two votes, so the checkpoint
        // of epoch 12 (height 35) is final by votes; depth 8 decides.
        let round_robin: Vec<u64> = (1..=40).collect();
        for f in [walked(3, 8, &round_robin), imported(3, 8, &round_robin)] {
            assert_eq!(f.finalized(), 32);
            assert_eq!(f.justified_epoch(), 13);
        }
        // Depth 1: the votes decide (epoch 12's checkpoint, the last block before slot 36).
        for f in [walked(3, 1, &round_robin), imported(3, 1, &round_robin)] {
            assert_eq!(f.finalized(), 35);
            assert!(f.above.iter().all(|b| b.height > 35));
        }
    }

    #[test]
    fn a_minority_of_the_authorities_never_finalizes_what_it_builds_alone() {
        // Slots 1..=10 by all three, then 50 blocks by authority 2 alone (cut off).
        let mut slots: Vec<u64> = (1..=10).collect();
        slots.extend((1..=50).map(|i| 10 + 3 * i - 1).map(|s| s - (s % 3) + 2));
        assert!(slots.windows(2).all(|w| w[0] < w[1]));
        for f in [walked(3, 4, &slots), imported(3, 4, &slots)] {
            // Epochs 1, 2 justified (slots 3..=8), epoch 3 (9, 10, then 11 by 2) too: epoch
            // 2's checkpoint (height 5) is final; nothing the minority built alone is.
            assert_eq!(
                f.finalized(),
                5,
                "nothing built by the minority alone is final"
            );
            assert_eq!(f.justified_epoch(), 3);
        }
        // A majority (0 and 1) building on its own finalizes.
        let mut majority: Vec<u64> = (1..=10).collect();
        majority.extend((11..=100).filter(|s| s % 3 != 2));
        for f in [walked(3, 4, &majority), imported(3, 4, &majority)] {
            assert!(
                f.finalized() >= majority.len() as u64 - 6,
                "{}",
                f.finalized()
            );
        }
    }

    #[test]
    fn the_majority_rule_needs_more_than_half() {
        // Two of four authorities are not a majority.
        let two_of_four: Vec<u64> = (1..=60).filter(|s| s % 4 < 2).collect();
        assert_eq!(imported(4, 2, &two_of_four).finalized(), 0);
        assert_eq!(walked(4, 2, &two_of_four).finalized(), 0);
        // Three of four are.
        let three_of_four: Vec<u64> = (1..=40).filter(|s| s % 4 < 3).collect();
        let f = imported(4, 2, &three_of_four);
        assert!(
            f.finalized() >= three_of_four.len() as u64 - 8,
            "{}",
            f.finalized()
        );
        assert_eq!(walked(4, 2, &three_of_four).finalized(), f.finalized());
    }

    #[test]
    fn without_authorities_or_with_one_only_depth_counts() {
        let one: Vec<u64> = (1..=20).collect();
        for authorities in [0, 1] {
            assert_eq!(imported(authorities, 5, &one).finalized(), 15);
            assert_eq!(walked(authorities, 5, &one).finalized(), 15);
            // Opening reads only the blocks above the depth, not the whole chain.
            let mut read = 0;
            let f = Finality::open::<()>(authorities, 5, 20, None, |_| {
                read += 1;
                Ok(Some((read, 0)))
            })
            .unwrap();
            assert_eq!((f.finalized(), read), (15, 5));
        }
    }

    #[test]
    fn finality_resumes_when_the_majority_is_back_and_never_goes_down() {
        let mut f = imported(3, 1, &(1..=9).collect::<Vec<_>>());
        // Epoch 3 (slot 9) has one vote: epoch 1's checkpoint (height 2) is final.
        assert_eq!(f.finalized(), 2);
        // Authority 0 alone for 10 epochs: stuck.
        for (i, slot) in (12..=39).step_by(3).enumerate() {
            f.imported(10 + i as u64, slot, 0);
        }
        let stuck = f.finalized();
        assert_eq!(stuck, 2);
        let head = 9 + 10;
        // A revert of the head leaves the finalized height where it is.
        f.reverted(head);
        assert_eq!(f.finalized(), stuck);
        // Authority 0 again, then 1 seals in the same epoch: justified, but only the epoch
        // after that finalizes it.
        f.imported(head, 42, 0);
        f.imported(head + 1, 43, 1);
        assert_eq!(f.finalized(), stuck);
        f.imported(head + 2, 45, 0);
        f.imported(head + 3, 46, 1);
        assert_eq!(
            f.finalized(),
            head - 1,
            "epoch 14's checkpoint: the block before 42"
        );
    }

    #[test]
    fn opening_from_the_persisted_root_reads_only_the_blocks_above_it_and_decides_the_same() {
        // 300 blocks round robin by three authorities, depth 8.
        let slots: Vec<u64> = (1..=300).collect();
        let live = imported(3, 8, &slots);
        let record = live.root_record().expect("votes are counted");
        assert!(live.root.height > 250, "the root follows finality");
        let mut read = 0u64;
        let reopened = Finality::open::<()>(3, 8, 300, Some(record), |h| {
            read += 1;
            Ok(slots.get((h - 1) as usize).map(|s| (*s, (s % 3) as u32)))
        })
        .unwrap();
        assert_eq!(
            read,
            300 - live.root.height,
            "only the blocks above the root"
        );
        let full = walked(3, 8, &slots);
        for f in [&reopened, &full] {
            assert_eq!(f.finalized(), live.finalized());
            assert_eq!(f.justified_epoch(), live.justified_epoch());
            assert_eq!(f.last_vote_of(1), live.last_vote_of(1));
        }
        // The depth rule persists nothing and ignores a record.
        assert_eq!(imported(1, 8, &slots).root_record(), None);
        let depth_only = Finality::open::<()>(1, 8, 300, Some(record), |_| Ok(Some((1, 0))));
        assert_eq!(depth_only.unwrap().finalized(), 292);
    }

    #[test]
    fn a_chain_restored_from_a_checkpoint_is_final_at_its_base() {
        // Blocks stored from height 101 (base 100) to 110, all by authority 1.
        let f = Finality::open::<()>(3, 4, 110, None, |h| Ok((h > 100).then_some((3 * h + 1, 1))))
            .unwrap();
        assert_eq!(f.finalized(), 100);
        assert_eq!(f.above.len(), 10);
    }

    #[test]
    fn an_authoritys_last_vote_is_found_on_the_chain() {
        // Slots 1..=10 round robin, depth large so nothing moves the root.
        let f = imported(3, 100, &(1..=10).collect::<Vec<_>>());
        // Authority 1's last block is slot 10 (epoch 3), voting from epoch 2 (justified by
        // slots 6..=8); authority 2's is slot 8 (epoch 2), from epoch 1.
        assert_eq!(f.last_vote_of(1), Some((3, 2)));
        assert_eq!(f.last_vote_of(2), Some((2, 1)));
        assert_eq!(f.last_vote_of(7), None);
        assert_eq!(imported(1, 100, &[1, 2]).last_vote_of(0), None);
    }

    #[test]
    fn an_authority_never_votes_from_a_lower_source_nor_twice_in_an_epoch() {
        let mut lock = SealLock::default();
        assert!(lock.allows(3, 1));
        lock.sealed(3, 1);
        assert!(!lock.allows(3, 1), "one vote an epoch");
        assert!(!lock.allows(4, 0), "a lower source would surround");
        assert!(lock.allows(4, 1));
        assert!(lock.allows(5, 4));
    }
}

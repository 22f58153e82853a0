//! A bounded cache of signature sets known to be valid, so that a set verified once (by the
//! background pre-verifier, or by an earlier call) is not paired again on the import path.
//!
//! Verification is a pure function of the bytes, so answering "valid" for a set that verified
//! before gives exactly the result verifying again would: the cache changes how long a check
//! takes, never what it says. Only valid verdicts are stored; an invalid set is verified for
//! real every time it is asked about. Each set is keyed by sha256 over the length-prefixed
//! pubkey, message and signature (a fixed 32-byte key, and no two different triples share a
//! preimage). At most `capacity` keys are held; the oldest inserted goes first.
//!
//! One cache belongs to a runtime (`runtime::Runtime::sig_cache`) and is shared (`Arc`) by every
//! guest thread calling its modules and by the pre-verifier feeding it; the lock is held only
//! to look keys up and insert them, never while pairing.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::SignatureSet;

/// Entries a runtime's cache holds by default (~5 MB of keys).
pub const DEFAULT_CAPACITY: usize = 65_536;

type Key = [u8; 32];

/// What a cache has answered so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Calls ([`SigCache::verify`], [`SigCache::verify_batch`]) answered from the cache alone,
    /// without a pairing.
    pub answered_from_cache: u64,
    /// Calls that ran a real verification (of the sets not in the cache).
    pub verified: u64,
    /// Keys held now.
    pub entries: usize,
}

#[derive(Default)]
struct Keys {
    set: HashSet<Key>,
    /// Insertion order, for eviction.
    order: VecDeque<Key>,
}

/// A bounded cache of signature sets known to be valid (see the module docs).
pub struct SigCache {
    capacity: usize,
    keys: Mutex<Keys>,
    answered_from_cache: AtomicU64,
    verified: AtomicU64,
}

impl std::fmt::Debug for SigCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigCache")
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for SigCache {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

fn key(set: &SignatureSet<'_>) -> Key {
    let mut h = Sha256::new();
    for part in [set.pubkey, set.message, set.signature] {
        h.update(u64::try_from(part.len()).unwrap_or(u64::MAX).to_le_bytes());
        h.update(part);
    }
    h.finalize().into()
}

impl SigCache {
    /// An empty cache holding at most `capacity` sets; 0 holds none (see [`Self::off`]).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            keys: Mutex::new(Keys::default()),
            answered_from_cache: AtomicU64::new(0),
            verified: AtomicU64::new(0),
        }
    }

    /// A cache that holds nothing: every call verifies for real (benchmarks that time BLS on
    /// inputs they repeat).
    pub fn off() -> Self {
        Self::new(0)
    }

    /// The most sets it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// What it answered so far, and how many keys it holds.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            answered_from_cache: self.answered_from_cache.load(Ordering::Relaxed),
            verified: self.verified.load(Ordering::Relaxed),
            entries: self.keys.lock().map_or(0, |k| k.set.len()),
        }
    }

    /// Whether `set` is known valid.
    pub fn contains(&self, set: &SignatureSet<'_>) -> bool {
        let key = key(set);
        self.keys.lock().is_ok_and(|k| k.set.contains(&key))
    }

    /// [`super::verify`], answered from the cache when the set is known valid.
    pub fn verify(&self, pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool {
        self.verify_batch(&[SignatureSet {
            pubkey,
            message,
            signature,
        }])
    }

    /// [`super::verify_batch`] (an empty batch is false), answered from the cache when every
    /// set is known valid; otherwise the sets not known are verified for real (one set alone,
    /// several as a batch) and, if valid, inserted. The answer is the one verifying every set
    /// would give: the known ones are valid.
    pub fn verify_batch(&self, sets: &[SignatureSet<'_>]) -> bool {
        if sets.is_empty() {
            return false;
        }
        let keys: Vec<Key> = sets.iter().map(key).collect();
        let unknown: Vec<(SignatureSet<'_>, Key)> = {
            let Ok(held) = self.keys.lock() else {
                return self.verify_for_real(sets);
            };
            sets.iter()
                .zip(&keys)
                .filter(|(_, k)| !held.set.contains(*k))
                .map(|(s, k)| (*s, *k))
                .collect()
        };
        if unknown.is_empty() {
            self.answered_from_cache.fetch_add(1, Ordering::Relaxed);
            // The wall time of the answer still counts as signature checking.
            return super::timed(|| true);
        }
        let to_verify: Vec<SignatureSet<'_>> = unknown.iter().map(|(s, _)| *s).collect();
        let valid = self.verify_for_real(&to_verify);
        if valid {
            self.insert(unknown.iter().map(|(_, k)| *k));
        }
        valid
    }

    fn verify_for_real(&self, sets: &[SignatureSet<'_>]) -> bool {
        self.verified.fetch_add(1, Ordering::Relaxed);
        match sets {
            [one] => super::verify(one.pubkey, one.message, one.signature),
            many => super::verify_batch(many),
        }
    }

    fn insert(&self, new: impl Iterator<Item = Key>) {
        if self.capacity == 0 {
            return;
        }
        let Ok(mut held) = self.keys.lock() else {
            return;
        };
        for key in new {
            if !held.set.insert(key) {
                continue;
            }
            held.order.push_back(key);
            while held.set.len() > self.capacity {
                match held.order.pop_front() {
                    Some(oldest) => {
                        held.set.remove(&oldest);
                    }
                    None => break,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Keypair;

    fn signed(n: u8) -> Vec<(Keypair, [u8; 96])> {
        (0..n)
            .map(|i| {
                let kp = Keypair::from_seed([i.wrapping_add(90); 32]);
                let sig = kp.sign(&kp.pubkey);
                (kp, sig)
            })
            .collect()
    }

    fn sets(keys: &[(Keypair, [u8; 96])]) -> Vec<SignatureSet<'_>> {
        keys.iter()
            .map(|(k, s)| SignatureSet {
                pubkey: &k.pubkey,
                message: &k.pubkey,
                signature: s,
            })
            .collect()
    }

    #[test]
    fn a_cached_valid_set_answers_without_pairing() {
        let cache = SigCache::new(16);
        let keys = signed(1);
        let set = sets(&keys)[0];
        assert!(cache.verify(set.pubkey, set.message, set.signature));
        assert_eq!(cache.stats().verified, 1);
        assert!(cache.contains(&set));
        assert!(cache.verify(set.pubkey, set.message, set.signature));
        assert!(cache.verify_batch(&[set]));
        let stats = cache.stats();
        assert_eq!(stats.verified, 1, "no second real verification");
        assert_eq!(stats.answered_from_cache, 2);
    }

    #[test]
    fn an_invalid_set_is_never_cached() {
        let cache = SigCache::new(16);
        let keys = signed(2);
        let mut bad = sets(&keys)[0];
        bad.message = b"not what was signed";
        for round in 1..=3u64 {
            assert!(!cache.verify(bad.pubkey, bad.message, bad.signature));
            assert!(!cache.contains(&bad));
            assert_eq!(cache.stats().verified, round, "verified for real each time");
        }
        // A failed batch caches none of its sets, valid or not.
        let mut batch = sets(&keys);
        batch[1].message = b"tampered";
        assert!(!cache.verify_batch(&batch));
        assert!(!cache.contains(&batch[0]) && !cache.contains(&batch[1]));
        assert_eq!(cache.stats().entries, 0);
        assert_eq!(cache.stats().answered_from_cache, 0);
        assert!(!cache.verify_batch(&[]), "an empty batch stays false");
    }

    #[test]
    fn a_batch_with_one_uncached_set_verifies_for_real() {
        let cache = SigCache::new(16);
        let keys = signed(5);
        let all = sets(&keys);
        assert!(cache.verify_batch(&all[..4]));
        assert_eq!(cache.stats().verified, 1);
        assert!(cache.verify_batch(&all), "one set new");
        assert_eq!(cache.stats().verified, 2);
        assert_eq!(cache.stats().answered_from_cache, 0);
        // A bad uncached set makes the batch false even though the rest are known.
        let mut one_bad = all.clone();
        one_bad.push(SignatureSet {
            pubkey: &keys[0].0.pubkey,
            message: b"other",
            signature: &keys[0].1,
        });
        assert!(!cache.verify_batch(&one_bad));
        assert_eq!(cache.stats().verified, 3);
        assert!(cache.verify_batch(&all));
        assert_eq!(cache.stats().answered_from_cache, 1);
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_oldest() {
        let cache = SigCache::new(3);
        let keys = signed(5);
        let all = sets(&keys);
        for s in &all {
            assert!(cache.verify(s.pubkey, s.message, s.signature));
        }
        assert_eq!(cache.stats().entries, 3);
        assert!(!cache.contains(&all[0]) && !cache.contains(&all[1]));
        assert!(all[2..].iter().all(|s| cache.contains(s)));
        // The evicted one is verified for real again, with the same answer.
        let before = cache.stats().verified;
        assert!(cache.verify(all[0].pubkey, all[0].message, all[0].signature));
        assert_eq!(cache.stats().verified, before + 1);
        assert_eq!(cache.stats().entries, 3);
    }

    #[test]
    fn a_cache_that_is_off_verifies_every_time() {
        let cache = SigCache::off();
        let keys = signed(1);
        let set = sets(&keys)[0];
        for round in 1..=2u64 {
            assert!(cache.verify(set.pubkey, set.message, set.signature));
            assert_eq!(cache.stats().verified, round);
        }
        assert_eq!(cache.stats().entries, 0);
    }

    #[test]
    fn keys_of_different_splits_of_the_same_bytes_differ() {
        let a = SignatureSet {
            pubkey: b"ab",
            message: b"c",
            signature: b"d",
        };
        let b = SignatureSet {
            pubkey: b"a",
            message: b"bc",
            signature: b"d",
        };
        assert_ne!(key(&a), key(&b));
    }
}

//! BLS12-381 signature verification with blst, as Ethereum's proof-of-possession scheme.
//!
//! Every failure to decode or validate a key or signature (wrong length, not on the curve, not
//! in the subgroup, the point at infinity) is a failed verification, never an error or a panic:
//! consensus treats such deposits as having an invalid signature.
//!
//! [`identity`] holds the ed25519 [`identity::NodeId`] that block seals are checked against.

pub mod cache;
pub mod identity;
pub mod sha256_many;

pub use cache::{CacheStats, SigCache};

use std::cell::Cell;
use std::time::{Duration, Instant};

use blst::BLST_ERROR;
use blst::min_pk::{PublicKey, Signature};

/// Domain separation tag of Ethereum's BLS signatures (proof-of-possession ciphersuite).
pub const DST: &[u8] = b"BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_";

/// Bits of randomness per blinding scalar in batch verification.
const RAND_BITS: usize = 64;

/// One (pubkey, message, signature) triple.
#[derive(Debug, Clone, Copy)]
pub struct SignatureSet<'a> {
    /// Compressed public key (48 bytes).
    pub pubkey: &'a [u8],
    /// The signed message.
    pub message: &'a [u8],
    /// Compressed signature (96 bytes).
    pub signature: &'a [u8],
}

thread_local! {
    /// Wall time this thread spent in [`verify`] and [`verify_batch`].
    static VERIFY_TIME: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Wall time the calling thread has spent in [`verify`] and [`verify_batch`] since it started
/// (including the time it waited for blst's worker threads). Benchmarks take the difference
/// around a call to split a deposit transition into signature checks and everything else.
pub fn verify_time_on_this_thread() -> Duration {
    VERIFY_TIME.with(Cell::get)
}

/// Runs `f`, adding its wall time to this thread's [`verify_time_on_this_thread`].
fn timed<R>(f: impl FnOnce() -> R) -> R {
    let start = Instant::now();
    let result = f();
    VERIFY_TIME.with(|t| t.set(t.get().saturating_add(start.elapsed())));
    result
}

fn decode(set: &SignatureSet<'_>) -> Option<(PublicKey, Signature)> {
    // `key_validate` rejects the point at infinity and points outside the subgroup.
    let pk = PublicKey::key_validate(set.pubkey).ok()?;
    let sig = Signature::sig_validate(set.signature, true).ok()?;
    Some((pk, sig))
}

/// Verifies one signature.
pub fn verify(pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool {
    timed(|| verify_untimed(pubkey, message, signature))
}

fn verify_untimed(pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let set = SignatureSet {
        pubkey,
        message,
        signature,
    };
    let Some((pk, sig)) = decode(&set) else {
        return false;
    };
    sig.verify(false, message, DST, &[], &pk, false) == BLST_ERROR::BLST_SUCCESS
}

/// Verifies all sets at once with random 64-bit blinding scalars; true only if every set
/// verifies (up to a 2^-64 chance of accepting a bad batch). An empty batch is false.
pub fn verify_batch(sets: &[SignatureSet<'_>]) -> bool {
    timed(|| verify_batch_untimed(sets))
}

fn verify_batch_untimed(sets: &[SignatureSet<'_>]) -> bool {
    if sets.is_empty() {
        return false;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || sets.len() < 4 {
        return accumulate(sets).is_some_and(|pairing| pairing.finalverify(None));
    }
    // Two halves, one on a helper thread and one on the caller: each decodes, group-checks and
    // accumulates its sets into a partial pairing, and the caller merges and does the one
    // final exponentiation. One hand-off per batch; blst's own batch call hands the whole
    // work to its pool (two jobs) after a separate parallel decoding pass, and every hand-off
    // is a wake-up that costs most on an idle machine.
    let (first, second) = sets.split_at(sets.len() / 2);
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| accumulate(second));
        let mine = accumulate(first);
        let theirs = helper.join().ok().flatten();
        match (mine, theirs) {
            (Some(mut acc), Some(other)) => {
                acc.merge(&other) == BLST_ERROR::BLST_SUCCESS && acc.finalverify(None)
            }
            _ => false,
        }
    })
}

/// Decodes and group-checks `sets` and accumulates them, each with a random nonzero 64-bit
/// blinding scalar, into one committed partial pairing; `None` if any set does not decode.
fn accumulate(sets: &[SignatureSet<'_>]) -> Option<blst::Pairing<'static>> {
    let mut pairing = blst::Pairing::new(true, DST);
    for set in sets {
        let (pk, sig) = decode(set)?;
        // A zero scalar would drop a set from the check.
        let blind = (rand::random::<u64>() | 1).to_le_bytes();
        let aggregated = pairing.mul_n_aggregate(
            <&blst::blst_p1_affine>::from(&pk),
            false,
            <&blst::blst_p2_affine>::from(&sig),
            false,
            &blind,
            RAND_BITS,
            set.message,
            &[],
        );
        if aggregated != BLST_ERROR::BLST_SUCCESS {
            return None;
        }
    }
    pairing.commit();
    Some(pairing)
}

/// A secret key for tests, benchmarks and dev genesis.
pub struct Keypair {
    secret: blst::min_pk::SecretKey,
    /// Compressed public key.
    pub pubkey: [u8; 48],
}

impl Keypair {
    /// Derives a keypair from 32 bytes of seed material (deterministic).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        // key_gen only fails for seeds shorter than 32 bytes.
        let secret = match blst::min_pk::SecretKey::key_gen(&seed, &[]) {
            Ok(sk) => sk,
            Err(_) => unreachable!("32-byte seed is always accepted"),
        };
        let pubkey = secret.sk_to_pk().compress();
        Self { secret, pubkey }
    }

    /// Signs a message.
    pub fn sign(&self, message: &[u8]) -> [u8; 96] {
        self.secret.sign(message, DST, &[]).compress()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_invalid_and_garbage() {
        let kp = Keypair::from_seed([7; 32]);
        let sig = kp.sign(b"hello");
        assert!(verify(&kp.pubkey, b"hello", &sig));
        assert!(!verify(&kp.pubkey, b"hellO", &sig));
        assert!(!verify(&[0u8; 48], b"hello", &sig), "undecodable key");
        let mut infinity = [0u8; 48];
        infinity[0] = 0xc0;
        assert!(!verify(&infinity, b"hello", &sig), "point at infinity");
        assert!(!verify(&kp.pubkey[..47], b"hello", &sig), "short key");
        assert!(!verify(&kp.pubkey, b"hello", &sig[..95]), "short signature");
    }

    #[test]
    fn batches_of_every_size_fail_for_a_bad_set_in_either_half() {
        let kps: Vec<_> = (0..9u8).map(|i| Keypair::from_seed([i + 40; 32])).collect();
        let sigs: Vec<_> = kps.iter().map(|k| k.sign(&k.pubkey)).collect();
        for n in 1..=kps.len() {
            let sets: Vec<_> = kps[..n]
                .iter()
                .zip(&sigs)
                .map(|(k, s)| SignatureSet {
                    pubkey: &k.pubkey,
                    message: &k.pubkey,
                    signature: s,
                })
                .collect();
            assert!(verify_batch(&sets), "{n} valid sets");
            assert!(!verify_batch(&sets[..0]), "an empty batch");
            for bad in 0..n {
                let mut wrong_message = sets.clone();
                wrong_message[bad].message = b"other";
                assert!(!verify_batch(&wrong_message), "{n} sets, message {bad}");
                let mut undecodable = sets.clone();
                undecodable[bad].pubkey = &[0u8; 48];
                assert!(!verify_batch(&undecodable), "{n} sets, key {bad}");
                // Two valid signatures swapped between sets: each set is wrong, the sum of
                // unblinded checks would balance out.
                let other = (bad + 1) % n;
                if other != bad {
                    let mut swapped = sets.clone();
                    swapped[bad].signature = sets[other].signature;
                    swapped[other].signature = sets[bad].signature;
                    assert!(
                        !verify_batch(&swapped),
                        "{n} sets, {bad} swapped with {other}"
                    );
                }
            }
        }
    }
}

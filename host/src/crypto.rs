//! BLS12-381 signature verification with blst, as Ethereum's proof-of-possession scheme.
//!
//! Every failure to decode or validate a key or signature (wrong length, not on the curve, not
//! in the subgroup, the point at infinity) is a failed verification, never an error or a panic:
//! consensus treats such deposits as having an invalid signature.

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

fn decode(set: &SignatureSet<'_>) -> Option<(PublicKey, Signature)> {
    // `key_validate` rejects the point at infinity and points outside the subgroup.
    let pk = PublicKey::key_validate(set.pubkey).ok()?;
    let sig = Signature::sig_validate(set.signature, true).ok()?;
    Some((pk, sig))
}

/// Verifies one signature.
pub fn verify(pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool {
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
    if sets.is_empty() {
        return false;
    }
    let Some(decoded) = decode_all(sets) else {
        return false;
    };
    let msgs: Vec<&[u8]> = sets.iter().map(|s| s.message).collect();
    let pks: Vec<&PublicKey> = decoded.iter().map(|(pk, _)| pk).collect();
    let sigs: Vec<&Signature> = decoded.iter().map(|(_, sig)| sig).collect();
    let rands: Vec<blst::blst_scalar> = sets
        .iter()
        .map(|_| {
            let mut scalar = blst::blst_scalar::default();
            // A zero scalar would drop a set from the check.
            let r: u64 = rand::random::<u64>() | 1;
            scalar.b[..8].copy_from_slice(&r.to_le_bytes());
            scalar
        })
        .collect();
    Signature::verify_multiple_aggregate_signatures(
        &msgs, DST, &pks, false, &sigs, false, &rands, RAND_BITS,
    ) == BLST_ERROR::BLST_SUCCESS
}

/// Decodes and group-checks every key and signature, spread over the cores: decompression
/// and subgroup checks are a large share of verification and parallelise perfectly. `None` if
/// any set fails to decode.
fn decode_all(sets: &[SignatureSet<'_>]) -> Option<Vec<(PublicKey, Signature)>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || sets.len() < 4 {
        return sets.iter().map(decode).collect();
    }
    let chunk = sets.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut chunks = sets.chunks(chunk);
        // The calling thread decodes the first chunk itself.
        let first = chunks.next().unwrap_or_default();
        let handles: Vec<_> = chunks
            .map(|part| scope.spawn(move || part.iter().map(decode).collect::<Option<Vec<_>>>()))
            .collect();
        let mut all = first.iter().map(decode).collect::<Option<Vec<_>>>()?;
        for handle in handles {
            all.extend(handle.join().ok()??);
        }
        Some(all)
    })
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
    fn batch_fails_if_any_set_fails() {
        let kps: Vec<_> = (0..4u8).map(|i| Keypair::from_seed([i; 32])).collect();
        let sigs: Vec<_> = kps.iter().map(|k| k.sign(&k.pubkey)).collect();
        let sets: Vec<_> = kps
            .iter()
            .zip(&sigs)
            .map(|(k, s)| SignatureSet {
                pubkey: &k.pubkey,
                message: &k.pubkey,
                signature: s,
            })
            .collect();
        assert!(verify_batch(&sets));
        let mut bad = sets.clone();
        bad[2].message = b"other";
        assert!(!verify_batch(&bad));
        assert!(!verify_batch(&[]));
    }
}

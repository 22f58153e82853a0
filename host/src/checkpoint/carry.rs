//! Carrying verified chunks over when a restore switches to another checkpoint (its peers
//! stopped offering the one in progress: they pruned it, `checkpoint.keep`, or it turned out
//! bad), sans-IO.
//!
//! What "still verifies" means, precisely: a chunk verified for the old checkpoint carries over
//! only if its bytes are exactly a chunk the new manifest lists (same sha256) **and** they pass
//! every check [`Restorer::verify`] makes against the new manifest: listed size and hash,
//! opened by the new manifest's module, the listed leaf range, leaf sizes, and the range proof
//! against the new manifest's registry root (from which, with the manifest's extras, its state
//! root follows). Nothing verified against the old manifest is trusted for the new one.
//!
//! What that carries in practice: a chunk's bytes hold its leaf range, its leaves and their
//! range proof, nothing about the block. So a newer checkpoint of the same registry (no
//! validator added and no balance changed between the two heights — the eth1 state and the
//! module schedule travel in the manifest and may differ, and with them the state root), made
//! by the same module with the same parameters, lists the very same chunks: every verified one
//! carries over. When any leaf differs, the registry root differs, and so does every chunk's
//! range proof (its sibling hashes cover every leaf outside its range): no old chunk can verify
//! against the new root, and the whole state is fetched again. A checkpoint of another module
//! version or parameters chunks differently, so nothing carries either. Leaves are never
//! re-proven from an old proof: a proof against the old root says nothing about the new one.
//!
//! That is checkpoint-v1 and -v2, whose chunks carry their proofs. A checkpoint-v3 chunk holds
//! only its leaves, and is held to the subtree root the new manifest lists for it
//! ([`super::roots`]): every chunk whose leaves no block between the two heights touched is
//! listed again with the same bytes and carries over, proven against the new root — a restorer
//! holding an older v3 checkpoint fetches only the chunks that changed.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::restore::{ChunkOpener, RestoreError, Restorer, verify_all};
use crate::state::merkle::Hash32;

/// What a switch kept.
#[derive(Debug, Default)]
pub struct CarriedOver {
    /// The chunks that verified against the new manifest, `(index in the new manifest,
    /// bytes)`: what the progress store keeps.
    pub chunks: Vec<(usize, Vec<u8>)>,
    /// Stored chunks of the old checkpoint.
    pub stored: usize,
    /// Of those, the ones whose bytes the new manifest lists.
    pub listed: usize,
    /// The first listed chunk that did not verify against the new manifest (its manifest is
    /// then bad: it lists bytes that do not prove).
    pub refused: Option<RestoreError>,
}

/// The stored chunks of another checkpoint whose bytes `restorer`'s manifest lists, at their
/// index there (each listed index at most once). Cheap: one hash per chunk, nothing opened.
pub fn listed_chunks(restorer: &Restorer, stored: Vec<(usize, Vec<u8>)>) -> Vec<(usize, Vec<u8>)> {
    let mut by_hash: BTreeMap<Hash32, usize> = BTreeMap::new();
    for (index, entry) in restorer.manifest().chunks.iter().enumerate() {
        by_hash.entry(entry.hash).or_insert(index);
    }
    let mut out = Vec::new();
    for (_, bytes) in stored {
        let hash: Hash32 = Sha256::digest(&bytes).into();
        if let Some(index) = by_hash.remove(&hash) {
            out.push((index, bytes));
        }
    }
    out.sort_by_key(|(index, _)| *index);
    out
}

/// Verifies the stored chunks of the old checkpoint (`(old index, bytes)`) that `restorer`'s
/// new manifest lists, on `threads` workers, and inserts those that verify into `restorer`.
/// Only a failure on this node is an error; a chunk that does not verify is left out and
/// reported in [`CarriedOver::refused`].
pub fn carry_over(
    restorer: &mut Restorer,
    opener: &dyn ChunkOpener,
    stored: Vec<(usize, Vec<u8>)>,
    threads: usize,
) -> Result<CarriedOver, RestoreError> {
    let count = stored.len();
    let listed = listed_chunks(restorer, stored);
    let listed_count = listed.len();
    let refused = match verify_all(restorer, opener, &listed, threads, None) {
        Ok(_) => None,
        Err(e @ (RestoreError::Call(_) | RestoreError::Local(_))) => return Err(e),
        Err(e) => Some(e),
    };
    let chunks = listed
        .into_iter()
        .filter(|(index, _)| restorer.has(*index))
        .collect();
    Ok(CarriedOver {
        chunks,
        stored: count,
        listed: listed_count,
        refused,
    })
}

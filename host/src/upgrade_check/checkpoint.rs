//! Checkpoint: generated states (leaf counts, contents, chunk-size hints) go through each
//! version: plan, build every chunk, open every chunk, verify every proof, rebuild the state.
//! Each version must be deterministic (same plan and same chunk bytes twice), cover every leaf
//! exactly once and restore the original root. Versions reporting the same version number must
//! produce byte-identical chunks. `host/tests/it/upgrade_check.rs` runs v1 → v2.

use std::sync::Arc;

use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::runner::{CaseRun, Phase};
use super::versions::{Version, is_host_failure};
use super::{CaseInput, CheckError, Kind};
use crate::checkpoint::manifest::ChunkEntry;
use crate::checkpoint::roots::{RootTree, chunk_level};
use crate::chunk::{LeafRange, PlanParams};
use crate::runtime::CallError;
use crate::runtime::checkpoint::StateReader;
use crate::state::merkle::{Hash32, MerkleTree, RangeProof, verify_range};

/// Largest generated state, in leaves.
const MAX_LEAVES: u32 = 1500;

/// One generated state and planning hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointCase {
    /// Number of 32-byte leaves.
    pub leaves: u32,
    /// Seed of the leaf contents (`sha256(seed ‖ index)`).
    pub leaf_seed: u64,
    /// `plan-params.target-chunk-bytes`.
    pub target_chunk_bytes: u64,
}

/// The generated state as the checkpoint world's state reader.
struct LeafState {
    leaves: Vec<Hash32>,
    tree: MerkleTree,
}

impl LeafState {
    fn new(case: &CheckpointCase) -> Self {
        let leaves: Vec<Hash32> = (0..case.leaves)
            .map(|i| {
                Sha256::new()
                    .chain_update(case.leaf_seed.to_le_bytes())
                    .chain_update(i.to_le_bytes())
                    .finalize()
                    .into()
            })
            .collect();
        Self {
            tree: MerkleTree::from_leaves(leaves.clone()),
            leaves,
        }
    }

    fn slice(&self, start: u64, end: u64) -> Option<&[Hash32]> {
        let start = usize::try_from(start).ok()?;
        let end = usize::try_from(end).ok()?;
        self.leaves.get(start..end)
    }
}

impl StateReader for LeafState {
    fn leaf_count(&self) -> u64 {
        self.tree.len()
    }

    fn leaf_size(&self) -> u32 {
        32
    }

    fn read_leaves(&self, start: u64, end: u64) -> Vec<Vec<u8>> {
        self.slice(start, end)
            .map(|s| s.iter().map(|l| l.to_vec()).collect())
            .unwrap_or_default()
    }

    fn range_proof(&self, start: u64, end: u64) -> Vec<u8> {
        self.tree
            .range_proof(start, end)
            .map(|p| p.to_bytes())
            .unwrap_or_default()
    }
}

/// What one version did with one state.
struct VersionRun {
    fuel: u64,
    chunks: Vec<Vec<u8>>,
    problems: Vec<String>,
}

fn call<T>(r: Result<T, CallError>) -> Result<Result<T, CallError>, CheckError> {
    match r {
        Err(e) if is_host_failure(&e) => Err(CheckError::Host {
            reason: e.to_string(),
        }),
        other => Ok(other),
    }
}

fn run_version(
    version: &Version,
    state: &Arc<LeafState>,
    case: &CheckpointCase,
) -> Result<VersionRun, CheckError> {
    let reader: Arc<dyn StateReader> = state.clone();
    let params = PlanParams {
        target_chunk_bytes: case.target_chunk_bytes,
    };
    let mut run = VersionRun {
        fuel: 0,
        chunks: Vec::new(),
        problems: Vec::new(),
    };
    let (ranges, fuel) = match call(version.plan_checkpoint(reader.clone(), params))? {
        Ok(planned) => planned,
        Err(e) => {
            run.problems.push(format!("plan failed: {e}"));
            return Ok(run);
        }
    };
    run.fuel = fuel;
    match call(version.plan_checkpoint(reader.clone(), params))? {
        Ok((again, _)) if again == ranges => {}
        _ => run
            .problems
            .push("plan is not deterministic: a second call gave another answer".into()),
    }
    let mut next = 0u64;
    for range in &ranges {
        if range.start != next || range.end <= range.start {
            run.problems.push(format!(
                "plan range [{}, {}) does not continue at leaf {next}",
                range.start, range.end
            ));
            return Ok(run);
        }
        next = range.end;
    }
    if next != state.tree.len() {
        run.problems.push(format!(
            "plan covers leaves [0, {next}) of {}",
            state.tree.len()
        ));
        return Ok(run);
    }

    // Chunks that carry no proof (checkpoint-v3) are proven as a restorer proves them: through
    // the chunk roots a manifest lists, here read from the state's tree.
    let roots = manifest_roots(state, &ranges);
    let mut restored: Vec<Hash32> = Vec::with_capacity(state.leaves.len());
    for (index, &range) in ranges.iter().enumerate() {
        let where_ = format!("chunk [{}, {})", range.start, range.end);
        let chunk = match call(version.build_chunk(reader.clone(), range))? {
            Ok((Ok(chunk), fuel)) => {
                run.fuel = run.fuel.saturating_add(fuel);
                chunk
            }
            Ok((Err(e), _)) => {
                run.problems.push(format!("{where_}: build refused: {e:?}"));
                return Ok(run);
            }
            Err(e) => {
                run.problems.push(format!("{where_}: build failed: {e}"));
                return Ok(run);
            }
        };
        match call(version.build_chunk(reader.clone(), range))? {
            Ok((Ok(again), _)) if again == chunk => {}
            _ => run.problems.push(format!(
                "{where_}: not deterministic: a second build gave other bytes"
            )),
        }
        let contents = match call(version.open_chunk(chunk.clone()))? {
            Ok((Ok(contents), fuel)) => {
                run.fuel = run.fuel.saturating_add(fuel);
                contents
            }
            Ok((Err(e), _)) => {
                run.problems
                    .push(format!("{where_}: cannot open its own chunk: {e:?}"));
                return Ok(run);
            }
            Err(e) => {
                run.problems.push(format!("{where_}: open failed: {e}"));
                return Ok(run);
            }
        };
        if contents.range != range {
            run.problems.push(format!(
                "{where_}: opens as [{}, {})",
                contents.range.start, contents.range.end
            ));
        }
        let (hashes, rest) = contents.leaves.as_chunks::<32>();
        let leaves = (contents.leaf_size == 32 && rest.is_empty()).then(|| hashes.to_vec());
        let Some(leaves) = leaves else {
            run.problems
                .push(format!("{where_}: a leaf is not 32 bytes after opening"));
            return Ok(run);
        };
        // A chunk without a proof is held, as a restorer holds it, to the subtree root its
        // manifest would list (the state tree's own node, checked up to the root).
        let verified = if contents.proof.is_empty() {
            roots.as_ref().map_err(Clone::clone).and_then(|roots| {
                roots
                    .hold(index, range.start, &leaves)
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
        } else {
            RangeProof::from_bytes(&contents.proof)
                .and_then(|proof| verify_range(&state.tree.root(), range.start, &leaves, &proof))
                .map_err(|e| e.to_string())
        };
        if let Err(e) = verified {
            run.problems
                .push(format!("{where_}: proof does not verify: {e}"));
        }
        restored.extend_from_slice(&leaves);
        run.chunks.push(chunk);
    }
    let root = MerkleTree::from_leaves(restored).root();
    if root != state.tree.root() {
        run.problems.push(format!(
            "restoring the chunks gives root {}, the state's root is {}",
            hex::encode(root),
            hex::encode(state.tree.root())
        ));
    }
    Ok(run)
}

/// The chunk roots a manifest of `ranges` would list, hashed up to the state's root.
fn manifest_roots(state: &LeafState, ranges: &[LeafRange]) -> Result<RootTree, String> {
    let entries: Vec<ChunkEntry> = ranges
        .iter()
        .map(|r| ChunkEntry {
            hash: [0; 32],
            start: r.start,
            end: r.end,
            size: 1,
        })
        .collect();
    let level = chunk_level(&entries, state.tree.len())
        .map_err(|e| format!("a chunk without proof, but {e}"))?;
    let roots = (0u64..)
        .zip(&entries)
        .map(|(i, _)| state.tree.node(level, i).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    RootTree::new(&entries, &roots, state.tree.len(), &state.tree.root())
}

/// The checkpoint phase.
pub(crate) struct CheckpointCheck<'a> {
    from: &'a Version,
    to: &'a Version,
}

impl<'a> CheckpointCheck<'a> {
    pub(crate) fn new(from: &'a Version, to: &'a Version) -> Self {
        Self { from, to }
    }
}

impl Phase for CheckpointCheck<'_> {
    type Input = CheckpointCase;

    fn kind(&self) -> Kind {
        Kind::Checkpoint
    }

    fn strategy(&self) -> BoxedStrategy<CheckpointCase> {
        (
            prop_oneof![0u32..=70, 0u32..=MAX_LEAVES],
            any::<u64>(),
            prop_oneof![Just(0u64), 1u64..=4096, 4096u64..=1 << 20, Just(u64::MAX)],
        )
            .prop_map(|(leaves, leaf_seed, target_chunk_bytes)| CheckpointCase {
                leaves,
                leaf_seed,
                target_chunk_bytes,
            })
            .boxed()
    }

    fn wrap(input: CheckpointCase) -> CaseInput {
        CaseInput::Checkpoint(input)
    }

    fn run_case(&self, input: &CheckpointCase) -> Result<CaseRun, CheckError> {
        let state = Arc::new(LeafState::new(input));
        let old = run_version(self.from, &state, input)?;
        let new = run_version(self.to, &state, input)?;
        let mut problems = new.problems;
        if problems.is_empty()
            && old.problems.is_empty()
            && self.from.version == self.to.version
            && old.chunks != new.chunks
        {
            problems.push(format!(
                "both versions report version {}, but their chunks differ",
                self.to.version
            ));
        }
        Ok(CaseRun {
            fuel_old: old.fuel,
            fuel_new: new.fuel,
            divergence: (!problems.is_empty())
                .then(|| format!("the new version: {}", problems.join("; "))),
        })
    }
}

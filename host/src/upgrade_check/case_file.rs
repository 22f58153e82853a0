//! Counterexample files: the shrunk input of a failing case, the seed it came from and the
//! modules it failed on, as JSON that `--replay-case` re-runs.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::checkpoint::CheckpointCase;
use super::deposit_inputs::DepositCase;
use super::deposits_cross::CrossCase;
use super::gossip::{NetworkCase, PlanCase};
use super::{CheckError, Failure, Kind};

/// The input of one case, of any kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "kebab-case")]
pub enum CaseInput {
    /// A registry and deposit blocks.
    Deposits(DepositCase),
    /// A genesis with epochs and deposit blocks, for versions of different deposits contracts.
    DepositsCross(CrossCase),
    /// One gossip-policy call.
    GossipPlan(PlanCase),
    /// A simulated gossip network.
    GossipNetwork(NetworkCase),
    /// A state to checkpoint.
    Checkpoint(CheckpointCase),
    /// A block of a data dir's recorded chain (`--replay`; re-run it with `--replay`).
    Recorded {
        /// The data dir.
        data_dir: String,
        /// The block's height (0: see the failure's detail).
        height: u64,
    },
}

/// A case file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseFile {
    /// Where the file was read from (not stored).
    #[serde(skip)]
    pub origin: String,
    /// The kind checked.
    pub kind: Kind,
    /// The seed of the run that found the case (a decimal string; a number in older files).
    #[serde(with = "super::seed_text")]
    pub seed: u64,
    /// The old version's name.
    pub from: String,
    /// sha256 of the old version.
    pub from_sha256: String,
    /// The new version's name.
    pub to: String,
    /// sha256 of the new version.
    pub to_sha256: String,
    /// What was wrong when it was found.
    pub failure: Failure,
    /// The input.
    pub input: CaseInput,
}

impl CaseFile {
    /// Writes the file (pretty JSON).
    pub fn write(&self, path: &Path) -> Result<(), CheckError> {
        let err = |reason: String| CheckError::CaseFile {
            path: path.display().to_string(),
            reason,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| err(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| err(format!("cannot write: {e}")))
    }

    /// Reads a file written by [`CaseFile::write`].
    pub fn read(path: &Path) -> Result<Self, CheckError> {
        let err = |reason: String| CheckError::CaseFile {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let mut case: CaseFile = serde_json::from_str(&text)
            .map_err(|e| err(format!("not an upgrade-check case file: {e}")))?;
        case.origin = path.display().to_string();
        Ok(case)
    }
}

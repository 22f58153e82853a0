//! The local module slots across restarts: after every activation, rollback or cancellation
//! through the admin API, what each local kind runs (its active version and its shadow or
//! canary) is written to `<data-dir>/module-slots.json`; at start, after the stored modules are
//! prepared, the node puts them back and says so in its log. Without this, a live activation
//! of an uploaded gossip policy was lost on restart, silently.
//!
//! Consensus kinds are not recorded: the chain's schedule decides what they run.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::module_ops;
use crate::admin::ModuleOp;
use crate::modules_store::upload::ModuleService;
use crate::runtime::{Kind, Mode, Modules, Scope};

/// Name of the record in the data directory.
pub const SLOT_RECORD_FILE: &str = "module-slots.json";

/// What the local slots run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRecord {
    /// One entry per local kind.
    pub kinds: Vec<KindRecord>,
}

/// What one local kind runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindRecord {
    /// The kind (`gossip-policy`, `checkpoint`).
    pub kind: String,
    /// The active version's sha256 (hex).
    pub active: String,
    /// The version on trial beside it, if any.
    pub candidate: Option<CandidateRecord>,
}

/// A shadow or canary version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateRecord {
    /// Its sha256 (hex).
    pub hash: String,
    /// The share of calls it serves as a canary (1..=100); `None`: a shadow.
    pub canary_percent: Option<u8>,
}

/// Why the record could not be written or read (ours: the data directory's file).
#[derive(Debug, thiserror::Error)]
pub enum SlotRecordError {
    /// Writing it failed.
    #[error(transparent)]
    Write(#[from] crate::files::AtomicWriteError),
    /// Reading it failed.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// It is not a slot record; delete it to start from the built-in defaults.
    #[error("{} is not a module slot record ({source}); delete it to start from the defaults", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

/// What `slots`' local kinds run now.
pub fn of(slots: &Modules) -> SlotRecord {
    let kinds = slots
        .status()
        .into_iter()
        .filter(|s| s.kind.scope() == Scope::Local)
        .map(|s| {
            let candidate = match (&s.shadow, &s.canary) {
                (Some(shadow), _) => Some(CandidateRecord {
                    hash: shadow.version.hash.to_hex(),
                    canary_percent: None,
                }),
                (None, Some(canary)) => Some(CandidateRecord {
                    hash: canary.version.hash.to_hex(),
                    canary_percent: Some(canary.percent),
                }),
                (None, None) => None,
            };
            KindRecord {
                kind: s.kind.to_string(),
                active: s.active.hash.to_hex(),
                candidate,
            }
        })
        .collect();
    SlotRecord { kinds }
}

/// Writes what `slots` run to `data_dir` (atomically: a crash leaves the old record or the new).
pub fn save(data_dir: &Path, slots: &Modules) -> Result<(), SlotRecordError> {
    let bytes = serde_json::to_vec_pretty(&of(slots)).unwrap_or_default();
    crate::files::write_private_atomically(&data_dir.join(SLOT_RECORD_FILE), &bytes)?;
    Ok(())
}

/// The record in `data_dir`, if one was written.
pub fn load(data_dir: &Path) -> Result<Option<SlotRecord>, SlotRecordError> {
    let path = data_dir.join(SLOT_RECORD_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SlotRecordError::Read { path, source }),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| SlotRecordError::Malformed { path, source })
}

/// Puts back what the record in `data_dir` says each local kind ran, logging each kind
/// restored and each version that cannot be (not stored here any more, no longer ready): the
/// node then runs what it started with for that kind, and says so.
pub fn restore(data_dir: &Path, slots: &Modules, service: &ModuleService) {
    let record = match load(data_dir) {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "module slots not restored");
            return;
        }
    };
    for entry in record.kinds {
        let Ok(kind) = entry.kind.parse::<Kind>() else {
            tracing::warn!(kind = %entry.kind, file = SLOT_RECORD_FILE, "unknown module kind in the slot record; skipped");
            continue;
        };
        if kind.scope() != Scope::Local {
            continue;
        }
        let activate = |hash: &str, mode: Mode| -> Result<(), String> {
            let parsed: crate::hashes::ModuleHash = hash
                .parse()
                .map_err(|_| format!("{hash} is not a sha256"))?;
            module_ops::run(slots, service, ModuleOp::Activate { hash: parsed, mode })
                .map(drop)
                .map_err(|e| e.to_string())
        };
        let running = slots.kind_status(kind).active.hash.to_hex();
        if entry.active != running
            && let Err(e) = activate(&entry.active, Mode::Live)
        {
            tracing::warn!(%kind, module = %entry.active, error = %e,
                "the module activated before the restart cannot be restored; running the default");
            continue;
        }
        if let Some(c) = &entry.candidate {
            let mode = c.canary_percent.map_or(Mode::Shadow, Mode::Canary);
            if let Err(e) = activate(&c.hash, mode) {
                tracing::warn!(%kind, module = %c.hash, error = %e,
                    "the candidate tried before the restart cannot be restored");
            }
        }
        let status = slots.kind_status(kind);
        tracing::info!(
            %kind,
            active = %status.active.name,
            shadow = ?status.shadow.map(|s| s.version.name),
            canary = ?status.canary.map(|c| format!("{} {}%", c.version.name, c.percent)),
            file = SLOT_RECORD_FILE,
            "module slot restored as it was before the restart"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_record_is_none_and_a_damaged_one_names_its_file() {
        let dir = tempfile::TempDir::new().unwrap();
        assert!(load(dir.path()).unwrap().is_none());
        let record = SlotRecord {
            kinds: vec![KindRecord {
                kind: "gossip-policy".into(),
                active: "ab".repeat(32),
                candidate: Some(CandidateRecord {
                    hash: "cd".repeat(32),
                    canary_percent: Some(30),
                }),
            }],
        };
        let path = dir.path().join(SLOT_RECORD_FILE);
        std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(record));
        std::fs::write(&path, b"{not json").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains(SLOT_RECORD_FILE) && e.contains("delete it"),
            "{e}"
        );
    }
}

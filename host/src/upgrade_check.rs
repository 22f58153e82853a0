//! `upgrade-check`: runs two versions of a module side by side and finds what changed.
//!
//! For each kind, generated inputs (proptest strategies, driven by a [`TestRunner`] with an
//! explicit seed) go through both versions; outputs, post-state roots and fuel are compared
//! case by case. The first failing case is shrunk to a minimal counterexample, which can be
//! written to a [`CaseFile`] and re-run with [`Checker::replay_case`]. Deposits can also be
//! checked against a data dir's recorded blocks ([`Checker::replay_data_dir`]) or a running
//! node's ([`Checker::replay_blocks`], `--from-node`).
//!
//! Deposits versions of different contracts (@2.0.0 applies a deposit in its block, @3.0.0
//! queues it for an epoch transition) differ by design: they are checked for what must hold
//! instead ([`Invariant`]: acceptance, deposit index, exactly once, conservation, same
//! outcome, drain with only the documented [`DifferenceClass`]es, liveness, finality) and a
//! cost gate ([`COST_GATE_PERCENT`] of each call's budget; epoch work independent of the
//! queue's length), on generated cases, a recorded chain's deposits, or a chain that switched
//! between them at H replayed on its own schedule.
//!
//! - [`deposit_inputs`]: generated registries and deposit blocks (also used by the workspace
//!   equivalence tests).
//! - `deposits`, `gossip`, `checkpoint`: what a case is and what must hold, per kind;
//!   `deposits_cross` across deposits contracts.
//! - `runner`: seeds, case counts, shrinking and fuel ratios, the same for every kind.
//! - `versions`: the adapter over the runtime (load, call, read fuel).
//! - `case_file`, `replay`: counterexample files and data-dir replay.
//!
//! [`TestRunner`]: proptest::test_runner::TestRunner

mod case_file;
mod checkpoint;
pub mod deposit_inputs;
mod deposits;
mod deposits_cross;
mod gossip;
mod invariant;
mod live;
pub mod migration;
mod replay;
mod report;
mod runner;
mod seed_text;
mod versions;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use case_file::{CaseFile, CaseInput};
pub use deposits_cross::{
    COST_GATE_PERCENT, CrossBlock, CrossCase, CrossDeposit, Difference, DifferenceClass,
};
pub use invariant::Invariant;
pub use live::{LiveCheckpoint, verify_checkpoint};
pub use report::{Counterexample, Failure, Report, Verdict};

/// Default bound on new-version fuel over old-version fuel, per case.
pub const DEFAULT_MAX_FUEL_RATIO: f64 = 2.0;
/// Default fuel below which a case's old-version cost is counted as this much when taking the
/// ratio: a call of a few hundred instructions (microseconds) is not flagged for doubling, a
/// registry scan per deposit (tens of thousands per deposit) is.
pub const DEFAULT_FUEL_FLOOR: u64 = 10_000;

/// Which kind of module is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `modnode:deposits` (consensus).
    Deposits,
    /// `modnode:gossip-policy` (local).
    GossipPolicy,
    /// `modnode:checkpoint`.
    Checkpoint,
}

impl Kind {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Deposits => "deposits",
            Kind::GossipPolicy => "gossip-policy",
            Kind::Checkpoint => "checkpoint",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Kind::Deposits, Kind::GossipPolicy, Kind::Checkpoint]
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown module kind `{s}` (expected deposits, gossip-policy or checkpoint)"
                )
            })
    }
}

/// Why a check could not run. None of these is a verdict about the modules' behaviour.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A module file could not be read (the caller's input).
    #[error("cannot read module {path}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a usable modnode module (the module's fault).
    #[error("{path} is not a usable modnode module: {reason}")]
    BadModule {
        /// The file.
        path: String,
        /// What validation or loading found.
        reason: String,
    },
    /// The module is of another kind than the one checked (the caller's input).
    #[error("{path} is a {found} module, but this is an upgrade-check of {expected} modules")]
    WrongKind {
        /// The file.
        path: String,
        /// The kind asked for.
        expected: Kind,
        /// The kind the module is.
        found: Kind,
    },
    /// The runtime could not be created (ours).
    #[error("cannot create the module runtime: {reason}")]
    Runtime {
        /// What failed.
        reason: String,
    },
    /// A case file is unreadable, malformed or for another kind (the caller's input).
    #[error("case file {path}: {reason}")]
    CaseFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A data dir could not be replayed (the caller's input or the store).
    #[error("cannot replay {path}: {reason}")]
    Replay {
        /// The data dir.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The host failed while running a case (ours, not the module's): no verdict.
    #[error("host failure while checking (not the module's fault): {reason}")]
    Host {
        /// What failed.
        reason: String,
    },
    /// Both modules are the same kind but the check does not support it (yet).
    #[error("{0}")]
    Unsupported(String),
}

/// A module component to check: its bytes and what to call it in messages.
#[derive(Debug, Clone)]
pub struct ModuleFile {
    /// The file name (or other label) errors name.
    pub label: String,
    /// Component bytes.
    pub bytes: Vec<u8>,
}

impl ModuleFile {
    /// Reads a component file.
    pub fn read(path: &Path) -> Result<Self, CheckError> {
        let bytes = std::fs::read(path).map_err(|source| CheckError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self {
            label: path.display().to_string(),
            bytes,
        })
    }
}

/// How many cases, from which seed, with which fuel bound.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Generated cases (per phase for kinds with several).
    pub cases: u32,
    /// Seed of the generators; the same seed gives the same cases.
    pub seed: u64,
    /// A case fails when the new version uses more than this times the old version's fuel.
    pub max_fuel_ratio: f64,
    /// The old version's fuel counts as at least this much in the ratio.
    pub fuel_floor: u64,
    /// Bound on shrinking steps after a failure.
    pub max_shrink_iters: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cases: 64,
            seed: 0,
            max_fuel_ratio: DEFAULT_MAX_FUEL_RATIO,
            fuel_floor: DEFAULT_FUEL_FLOOR,
            max_shrink_iters: 1024,
        }
    }
}

/// Two loaded versions of one kind, ready to be compared.
pub struct Checker {
    kind: Kind,
    from: versions::Version,
    to: versions::Version,
}

/// What a run found, with the documented differences seen (cross-contract deposits only).
#[derive(Debug, Clone)]
pub struct Findings {
    /// The report.
    pub report: Report,
    /// The documented differences between the versions' results, with how often each was
    /// seen over the passing cases; empty for versions of one contract.
    pub differences: Vec<Difference>,
}

impl Checker {
    /// Loads both versions; each must be a valid module of `kind`.
    pub fn new(kind: Kind, from: &ModuleFile, to: &ModuleFile) -> Result<Self, CheckError> {
        let runtime = versions::runtime()?;
        Ok(Self {
            kind,
            from: versions::load(&runtime, from, kind)?,
            to: versions::load(&runtime, to, kind)?,
        })
    }

    /// `<kind>-v<version>@<hash>` of the old and the new version.
    pub fn names(&self) -> (&str, &str) {
        (&self.from.name, &self.to.name)
    }

    /// Whether the two versions are deposits modules of different contracts (@2.0.0 and
    /// @3.0.0), checked for what must hold rather than output for output.
    pub fn is_cross_contract(&self) -> bool {
        self.kind == Kind::Deposits && self.from.deposits_contract() != self.to.deposits_contract()
    }

    /// Runs `settings.cases` generated cases (per phase) through both versions.
    pub fn run(&self, settings: &Settings) -> Result<Report, CheckError> {
        Ok(self.run_with_differences(settings)?.report)
    }

    /// [`run`](Self::run), with the documented differences seen.
    pub fn run_with_differences(&self, settings: &Settings) -> Result<Findings, CheckError> {
        if self.is_cross_contract() {
            let check = deposits_cross::CrossCheck::new(&self.from, &self.to)?;
            let report = runner::run(&check, settings)?;
            return Ok(Findings {
                report,
                differences: check.differences(),
            });
        }
        let report = self.run_one_contract(settings)?;
        Ok(Findings {
            report,
            differences: Vec::new(),
        })
    }

    fn run_one_contract(&self, settings: &Settings) -> Result<Report, CheckError> {
        match self.kind {
            Kind::Deposits if self.from.deposits_contract() != Some(2) => {
                Err(CheckError::Unsupported(format!(
                    "{} and {} are both on modnode:deposits@{}.x: versions of one contract are \
                     compared output for output only on @2.0.0; check each against a @2.0.0 \
                     version (the cross-contract check)",
                    self.from.name,
                    self.to.name,
                    self.from.deposits_contract().unwrap_or(0)
                )))
            }
            Kind::Deposits => runner::run(
                &deposits::DepositsCheck::new(&self.from, &self.to),
                settings,
            ),
            Kind::GossipPolicy => {
                let plans = runner::run(&gossip::PlanCheck::new(&self.from, &self.to), settings)?;
                let network_settings = Settings {
                    cases: gossip::network_cases(settings.cases),
                    ..settings.clone()
                };
                let network = runner::run(
                    &gossip::NetworkCheck::new(&self.from, &self.to)?,
                    &network_settings,
                )?;
                Ok(plans.merge(network))
            }
            Kind::Checkpoint => runner::run(
                &checkpoint::CheckpointCheck::new(&self.from, &self.to),
                settings,
            ),
        }
    }

    /// Re-runs the case recorded in a case file.
    pub fn replay_case(&self, case: &CaseFile, settings: &Settings) -> Result<Report, CheckError> {
        if case.kind != self.kind {
            return Err(CheckError::CaseFile {
                path: case.origin.clone(),
                reason: format!(
                    "it records a {} case, but this is a check of {} modules",
                    case.kind, self.kind
                ),
            });
        }
        let mismatch = |found: &'static str| CheckError::CaseFile {
            path: case.origin.clone(),
            reason: format!("its input is a {found} case, not a {} case", self.kind),
        };
        match &case.input {
            CaseInput::DepositsCross(input) => match self.kind {
                Kind::Deposits if self.is_cross_contract() => runner::replay(
                    &deposits_cross::CrossCheck::new(&self.from, &self.to)?,
                    input,
                    case.seed,
                    settings,
                ),
                Kind::Deposits => Err(CheckError::CaseFile {
                    path: case.origin.clone(),
                    reason: "it records a case of deposits versions of different contracts \
                             (@2.0.0 against @3.0.0), but these two are of one contract"
                        .into(),
                }),
                _ => Err(mismatch("deposits")),
            },
            CaseInput::Deposits(input) => match self.kind {
                Kind::Deposits if !self.is_cross_contract() => runner::replay(
                    &deposits::DepositsCheck::new(&self.from, &self.to),
                    input,
                    case.seed,
                    settings,
                ),
                Kind::Deposits => Err(CheckError::CaseFile {
                    path: case.origin.clone(),
                    reason: "it records a case of deposits versions of one contract, but these \
                             two are of different contracts (@2.0.0 against @3.0.0)"
                        .into(),
                }),
                _ => Err(mismatch("deposits")),
            },
            CaseInput::GossipPlan(input) => match self.kind {
                Kind::GossipPolicy => runner::replay(
                    &gossip::PlanCheck::new(&self.from, &self.to),
                    input,
                    case.seed,
                    settings,
                ),
                _ => Err(mismatch("gossip plan")),
            },
            CaseInput::GossipNetwork(input) => match self.kind {
                Kind::GossipPolicy => runner::replay(
                    &gossip::NetworkCheck::new(&self.from, &self.to)?,
                    input,
                    case.seed,
                    settings,
                ),
                _ => Err(mismatch("gossip network")),
            },
            CaseInput::Checkpoint(input) => match self.kind {
                Kind::Checkpoint => runner::replay(
                    &checkpoint::CheckpointCheck::new(&self.from, &self.to),
                    input,
                    case.seed,
                    settings,
                ),
                _ => Err(mismatch("checkpoint")),
            },
            CaseInput::Recorded { data_dir, .. } => Err(CheckError::CaseFile {
                path: case.origin.clone(),
                reason: format!(
                    "it records a block of the data dir {data_dir}; re-run it with --replay"
                ),
            }),
        }
    }

    /// Re-executes the canonical blocks recorded in `data_dir` with both versions (deposits
    /// only), comparing each block's state root between the versions and with the recorded one.
    pub fn replay_data_dir(
        &self,
        data_dir: &Path,
        genesis: crate::chain::genesis::Genesis,
        settings: &Settings,
    ) -> Result<Report, CheckError> {
        Ok(self
            .replay_data_dir_with_differences(data_dir, genesis, settings)?
            .report)
    }

    /// [`replay_data_dir`](Self::replay_data_dir), with the documented differences seen.
    pub fn replay_data_dir_with_differences(
        &self,
        data_dir: &Path,
        genesis: crate::chain::genesis::Genesis,
        settings: &Settings,
    ) -> Result<Findings, CheckError> {
        if self.kind != Kind::Deposits {
            return Err(CheckError::Unsupported(format!(
                "--replay re-executes recorded blocks, which only deposits modules process; \
                 {} modules have no recorded history to replay",
                self.kind
            )));
        }
        let blocks = replay::recorded_blocks(data_dir, &genesis, &self.from)?;
        self.replay_blocks(&data_dir.display().to_string(), &blocks, genesis, settings)
    }

    /// Re-executes a chain's canonical `blocks` from height 1 (read from `origin`: a data dir
    /// or a running node) with both versions (deposits only): versions of one contract each
    /// replay the whole history and must agree with it and each other; versions of different
    /// contracts replay it on its own schedule, or, if it never switches between them, run its
    /// real deposits through both and check what must hold across contracts.
    pub fn replay_blocks(
        &self,
        origin: &str,
        blocks: &[crate::chain::block::Block],
        genesis: crate::chain::genesis::Genesis,
        settings: &Settings,
    ) -> Result<Findings, CheckError> {
        self.replay_blocks_from(origin, None, blocks, genesis, settings)
    }

    /// [`replay_blocks`](Self::replay_blocks) from `start` (a running node's verified
    /// checkpoint; `blocks` are the canonical blocks after it), or from genesis without one:
    /// both versions run on the checkpoint's real state.
    pub fn replay_blocks_from(
        &self,
        origin: &str,
        start: Option<&LiveCheckpoint>,
        blocks: &[crate::chain::block::Block],
        genesis: crate::chain::genesis::Genesis,
        settings: &Settings,
    ) -> Result<Findings, CheckError> {
        if self.kind != Kind::Deposits {
            return Err(CheckError::Unsupported(format!(
                "recorded blocks are replayed only by deposits modules, not {} modules",
                self.kind
            )));
        }
        if self.is_cross_contract() {
            return replay::replay_across(
                &self.from, &self.to, origin, start, blocks, genesis, settings,
            );
        }
        Ok(Findings {
            report: replay::replay(
                &self.from, &self.to, origin, start, blocks, genesis, settings,
            )?,
            differences: Vec::new(),
        })
    }

    /// A case file for `counterexample`, naming both modules.
    pub fn case_file(&self, counterexample: &Counterexample) -> CaseFile {
        CaseFile {
            origin: String::new(),
            kind: self.kind,
            seed: counterexample.seed,
            from: self.from.name.clone(),
            from_sha256: hex::encode(self.from.sha256),
            to: self.to.name.clone(),
            to_sha256: hex::encode(self.to.sha256),
            failure: counterexample.failure.clone(),
            input: counterexample.input.clone(),
        }
    }
}

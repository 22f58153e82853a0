//! What a check found: its verdict, the failure (the first invariant broken, or a difference a
//! version's contract does not allow), the counterexample that shows it, and the report.

use super::*;

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// No divergence, no fuel regression.
    Pass,
    /// The versions disagree (outputs, roots, invariants or determinism).
    Divergence,
    /// The new version burns more than the allowed multiple of the old version's fuel.
    FuelRegression,
}

impl Verdict {
    /// Whether the upgrade may ship.
    pub fn passed(self) -> bool {
        self == Verdict::Pass
    }
}

/// What was wrong with one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Failure {
    /// The versions disagree; says where and how.
    Divergence {
        /// What differs.
        detail: String,
    },
    /// The new version burns too much fuel.
    Fuel {
        /// Fuel of the old version on the case.
        old: u64,
        /// Fuel of the new version on the case.
        new: u64,
        /// `new / old`.
        ratio: f64,
    },
    /// A cross-contract invariant does not hold (see [`Invariant`]).
    Invariant {
        /// Which one.
        invariant: Invariant,
        /// Where and how, naming the block, the deposit index and the version.
        detail: String,
    },
    /// One call used more fuel than the cost gate allows: over [`COST_GATE_PERCENT`] of its
    /// budget, or growing with the length of the queue behind the entries it applies.
    Cost {
        /// The version, the call and the height.
        call: String,
        /// Fuel it used (host calls included).
        fuel: u64,
        /// The most it may use.
        limit: u64,
    },
}

impl Failure {
    pub(super) fn verdict(&self) -> Verdict {
        match self {
            Failure::Divergence { .. } | Failure::Invariant { .. } => Verdict::Divergence,
            Failure::Fuel { .. } | Failure::Cost { .. } => Verdict::FuelRegression,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Divergence { detail } => write!(f, "divergence: {detail}"),
            Failure::Fuel { old, new, ratio } => write!(
                f,
                "fuel regression: the new version used {new} fuel where the old used {old} \
                 ({ratio:.2}x)"
            ),
            Failure::Invariant { invariant, detail } => {
                write!(f, "invariant `{invariant}` does not hold: {detail}")
            }
            Failure::Cost { call, fuel, limit } => write!(
                f,
                "cost gate: {call} used {fuel} fuel, over the {limit} it may use"
            ),
        }
    }
}

/// A minimal failing case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Counterexample {
    /// The seed the run started from (a decimal string in JSON).
    #[serde(with = "seed_text")]
    pub seed: u64,
    /// What was wrong.
    pub failure: Failure,
    /// The (shrunk) input, re-runnable with `--replay-case`.
    pub input: CaseInput,
    /// Where the case file was written, if it was.
    pub case_file: Option<PathBuf>,
}

/// What a check found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The kind checked.
    pub kind: Kind,
    /// Cases run (generated, replayed blocks, or 1 for a replayed case), shrinking excluded.
    pub cases: u32,
    /// Failing cases found (a run stops at its first failure and shrinks it, so 0 or 1 per
    /// phase).
    pub divergences: u32,
    /// Highest new/old fuel ratio seen on any case (old fuel counted as at least the floor).
    pub max_fuel_ratio: f64,
    /// The outcome.
    pub verdict: Verdict,
    /// The minimal failing case, if any.
    pub counterexample: Option<Counterexample>,
}

impl Report {
    /// The JSON object `modnode upgrade-check --json` prints.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind,
            "cases": self.cases,
            "divergences": self.divergences,
            "max_fuel_ratio": self.max_fuel_ratio,
            "verdict": self.verdict,
            "counterexample": self.counterexample,
        })
    }

    pub(super) fn merge(self, other: Report) -> Report {
        let counterexample = self.counterexample.or(other.counterexample);
        Report {
            kind: self.kind,
            cases: self.cases.saturating_add(other.cases),
            divergences: self.divergences.saturating_add(other.divergences),
            max_fuel_ratio: self.max_fuel_ratio.max(other.max_fuel_ratio),
            verdict: counterexample
                .as_ref()
                .map_or(Verdict::Pass, |c| c.failure.verdict()),
            counterexample,
        }
    }
}

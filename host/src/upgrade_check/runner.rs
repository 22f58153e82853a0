//! Drives a phase's cases through proptest's [`TestRunner`] with an explicit seed and case
//! count, judges each case (divergence first, then fuel), and shrinks the first failure to a
//! minimal counterexample.

use std::cell::RefCell;
use std::fmt;

use proptest::strategy::BoxedStrategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use super::{CaseInput, CheckError, Counterexample, Failure, Kind, Report, Settings, Verdict};

/// What both versions did on one case.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CaseRun {
    /// Fuel the old version used (0: not measured, e.g. every block rejected).
    pub(crate) fuel_old: u64,
    /// Fuel the new version used.
    pub(crate) fuel_new: u64,
    /// Where the versions disagree, if they do.
    pub(crate) divergence: Option<String>,
}

impl CaseRun {
    /// `new / max(old, floor)`; `None` when the old fuel was not measured.
    pub(crate) fn ratio(&self, floor: u64) -> Option<f64> {
        (self.fuel_old > 0).then(|| self.fuel_new as f64 / self.fuel_old.max(floor).max(1) as f64)
    }

    pub(crate) fn judge(&self, settings: &Settings) -> Option<Failure> {
        if let Some(detail) = &self.divergence {
            return Some(Failure::Divergence {
                detail: detail.clone(),
            });
        }
        let ratio = self.ratio(settings.fuel_floor)?;
        (ratio > settings.max_fuel_ratio).then_some(Failure::Fuel {
            old: self.fuel_old,
            new: self.fuel_new,
            ratio: (ratio * 1000.0).round() / 1000.0,
        })
    }
}

/// One kind's (or one part of a kind's) generated cases and what must hold for each.
pub(crate) trait Phase {
    /// A case.
    type Input: Clone + fmt::Debug;
    /// The kind checked.
    fn kind(&self) -> Kind;
    /// Generates cases.
    fn strategy(&self) -> BoxedStrategy<Self::Input>;
    /// The case as a case-file input.
    fn wrap(input: Self::Input) -> CaseInput;
    /// Runs a case through both versions. `Err` is a host failure: no verdict.
    fn run_case(&self, input: &Self::Input) -> Result<CaseRun, CheckError>;
}

/// The generators' random source for `seed`.
fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&seed.to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

#[derive(Default)]
struct Progress {
    cases: u32,
    shrinking: bool,
    max_ratio: f64,
    host_error: Option<CheckError>,
}

/// Runs `settings.cases` cases of `phase`; on a failure, shrinks it.
pub(crate) fn run<P: Phase>(phase: &P, settings: &Settings) -> Result<Report, CheckError> {
    let config = Config {
        cases: settings.cases,
        max_shrink_iters: settings.max_shrink_iters,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, rng(settings.seed));
    let progress = RefCell::new(Progress::default());
    let result = runner.run(&phase.strategy(), |input| {
        let run = phase.run_case(&input);
        let mut p = progress.borrow_mut();
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                p.host_error.get_or_insert(e);
                return Err(TestCaseError::fail("host failure"));
            }
        };
        if !p.shrinking {
            p.cases = p.cases.saturating_add(1);
            if let Some(ratio) = run.ratio(settings.fuel_floor) {
                p.max_ratio = p.max_ratio.max(ratio);
            }
        }
        match run.judge(settings) {
            Some(failure) => {
                p.shrinking = true;
                Err(TestCaseError::fail(failure.to_string()))
            }
            None => Ok(()),
        }
    });
    let progress = progress.into_inner();
    if let Some(e) = progress.host_error {
        return Err(e);
    }
    let mut report = Report {
        kind: phase.kind(),
        cases: progress.cases,
        divergences: 0,
        max_fuel_ratio: progress.max_ratio,
        verdict: Verdict::Pass,
        counterexample: None,
    };
    match result {
        Ok(()) => Ok(report),
        Err(TestError::Fail(message, minimal)) => {
            // Cases are deterministic: re-running the minimal one gives its structured failure.
            let failure =
                phase
                    .run_case(&minimal)?
                    .judge(settings)
                    .unwrap_or(Failure::Divergence {
                        detail: format!(
                            "non-deterministic: the case failed ({message}) but passed when re-run"
                        ),
                    });
            report.divergences = 1;
            report.verdict = failure.verdict();
            report.counterexample = Some(Counterexample {
                seed: settings.seed,
                failure,
                input: P::wrap(minimal),
                case_file: None,
            });
            Ok(report)
        }
        Err(TestError::Abort(reason)) => Err(CheckError::Host {
            reason: format!("the case generator gave up: {reason}"),
        }),
    }
}

/// Runs one recorded case.
pub(crate) fn replay<P: Phase>(
    phase: &P,
    input: &P::Input,
    seed: u64,
    settings: &Settings,
) -> Result<Report, CheckError> {
    let run = phase.run_case(input)?;
    let failure = run.judge(settings);
    Ok(Report {
        kind: phase.kind(),
        cases: 1,
        divergences: u32::from(failure.is_some()),
        max_fuel_ratio: run.ratio(settings.fuel_floor).unwrap_or(0.0),
        verdict: failure.as_ref().map_or(Verdict::Pass, Failure::verdict),
        counterexample: failure.map(|failure| Counterexample {
            seed,
            failure,
            input: P::wrap(input.clone()),
            case_file: None,
        }),
    })
}

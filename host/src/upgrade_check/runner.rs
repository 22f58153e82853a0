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
            ratio,
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
    /// Runs a case and judges it: by default the divergence, then the fuel ratio. A phase
    /// whose cases can fail in other ways (an invariant, a cost gate) names the failure itself.
    fn run_judged(
        &self,
        input: &Self::Input,
        settings: &Settings,
    ) -> Result<(CaseRun, Option<Failure>), CheckError> {
        let run = self.run_case(input)?;
        let failure = run.judge(settings);
        Ok((run, failure))
    }
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
        let run = phase.run_judged(&input, settings);
        let mut p = progress.borrow_mut();
        let (run, failure) = match run {
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
        match failure {
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
            let failure = phase
                .run_judged(&minimal, settings)?
                .1
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
    let (run, failure) = phase.run_judged(input, settings)?;
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::upgrade_check::gossip::NetworkCase;

    /// A phase without modules: inputs at or above `threshold` diverge; fuel grows with the
    /// input above `fuel_from`.
    struct Toy {
        threshold: u16,
        fuel_from: u16,
    }

    impl Phase for Toy {
        type Input = u8;
        fn kind(&self) -> Kind {
            Kind::GossipPolicy
        }
        fn strategy(&self) -> BoxedStrategy<u8> {
            any::<u8>().boxed()
        }
        fn wrap(input: u8) -> CaseInput {
            CaseInput::GossipNetwork(NetworkCase {
                seed: u64::from(input),
                nodes: 0,
                degree: 0,
                deposits: 0,
                blocks: 0,
            })
        }
        fn run_case(&self, input: &u8) -> Result<CaseRun, CheckError> {
            Ok(CaseRun {
                fuel_old: 20_000,
                fuel_new: if u16::from(*input) >= self.fuel_from {
                    50_000
                } else {
                    20_000
                },
                divergence: (u16::from(*input) >= self.threshold).then(|| format!("input {input}")),
            })
        }
    }

    fn settings(seed: u64) -> Settings {
        Settings {
            cases: 256,
            seed,
            ..Settings::default()
        }
    }

    #[test]
    fn a_failure_shrinks_to_the_boundary_and_the_seed_reproduces_the_run() {
        let toy = Toy {
            threshold: 200,
            fuel_from: 256,
        };
        let a = run(&toy, &settings(7)).unwrap();
        let b = run(&toy, &settings(7)).unwrap();
        assert_eq!(a.verdict, Verdict::Divergence);
        let c = a.counterexample.clone().unwrap();
        assert_eq!(
            c.failure,
            Failure::Divergence {
                detail: "input 200".into()
            }
        );
        assert_eq!(c.seed, 7);
        assert_eq!(a.cases, b.cases);
        assert_eq!(
            a.counterexample.map(|c| c.input),
            b.counterexample.map(|c| c.input)
        );
    }

    #[test]
    fn fuel_is_flagged_above_the_ratio_and_divergence_wins() {
        let fuel = Toy {
            threshold: 256,
            fuel_from: 100,
        };
        let report = run(&fuel, &settings(1)).unwrap();
        assert_eq!(report.verdict, Verdict::FuelRegression);
        assert_eq!(
            report.counterexample.unwrap().failure,
            Failure::Fuel {
                old: 20_000,
                new: 50_000,
                ratio: 2.5
            }
        );
        let lenient = Settings {
            max_fuel_ratio: 3.0,
            ..settings(1)
        };
        let report = run(&fuel, &lenient).unwrap();
        assert_eq!(report.verdict, Verdict::Pass);
        assert_eq!(report.cases, 256);
        assert_eq!(report.max_fuel_ratio, 2.5);

        let both = CaseRun {
            fuel_old: 1,
            fuel_new: 1_000_000,
            divergence: Some("x".into()),
        };
        assert!(matches!(
            both.judge(&settings(1)),
            Some(Failure::Divergence { .. })
        ));
    }

    #[test]
    fn cheap_calls_are_judged_against_the_fuel_floor() {
        let cheap = CaseRun {
            fuel_old: 300,
            fuel_new: 740,
            divergence: None,
        };
        assert_eq!(cheap.judge(&settings(0)), None);
        let no_floor = Settings {
            fuel_floor: 0,
            ..settings(0)
        };
        assert!(matches!(
            cheap.judge(&no_floor),
            Some(Failure::Fuel {
                old: 300,
                new: 740,
                ..
            })
        ));
        let unmeasured = CaseRun {
            fuel_old: 0,
            fuel_new: 1_000_000,
            divergence: None,
        };
        assert_eq!(unmeasured.judge(&no_floor), None);
    }
}

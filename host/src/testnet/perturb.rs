//! The perturbation plan: every perturbation of a run with its start, end and targets, decided
//! up front from the manifest and its seed (pure: the same manifest gives the same plan), and
//! the sans-IO schedule that says, given the time, which perturbations start or end now.

use rand::seq::{IndexedRandom as _, SliceRandom as _};
use rand::{Rng as _, SeedableRng as _};

use super::manifest::{Manifest, PerturbationKind};

/// One perturbation as it will be applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// When it starts, ms after the run's start.
    pub start_ms: u64,
    /// When it ends (healed, resumed, restarted), ms after the run's start.
    pub end_ms: u64,
    /// What.
    pub kind: PerturbationKind,
    /// The nodes it acts on (for partitions: one side).
    pub targets: Vec<usize>,
    /// Clock skew for [`PerturbationKind::ClockSkew`], ms (signed).
    pub skew_ms: i64,
}

/// A change to apply now.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Start perturbation `index` of the plan.
    Start(usize),
    /// End perturbation `index` of the plan.
    End(usize),
}

fn ms(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        // Truncation is the intent: whole milliseconds.
        (seconds * 1000.0) as u64
    } else {
        0
    }
}

/// Nodes a perturbation of `kind` may act on at all: never the late joiner before it started
/// (it is not running), never node 0 for a wipe (it hosts the dev deposit contract).
fn eligible(manifest: &Manifest, kind: PerturbationKind, at_ms: u64) -> Vec<usize> {
    let late = manifest
        .late_joiner
        .as_ref()
        .map(|l| (manifest.late_node(), ms(l.at_s)));
    (0..manifest.nodes)
        .filter(|n| !(kind == PerturbationKind::Wipe && *n == 0))
        .filter(|n| match late {
            // A margin after its start: it is still restoring.
            Some((Some(late), start)) if late == *n => at_ms > start.saturating_add(30_000),
            _ => true,
        })
        .collect()
}

/// Targets fitting `kind`, chosen with `rng`.
fn choose_targets(
    manifest: &Manifest,
    kind: PerturbationKind,
    at_ms: u64,
    rng: &mut rand::rngs::StdRng,
) -> Vec<usize> {
    let n = manifest.nodes;
    let mut all: Vec<usize> = (0..n).collect();
    all.shuffle(rng);
    let mut chosen = match kind {
        PerturbationKind::PartitionMinority => {
            all.truncate((n.saturating_sub(1) / 2).max(1));
            all
        }
        PerturbationKind::PartitionMajority => {
            all.truncate((n / 2).saturating_add(1));
            all
        }
        PerturbationKind::PartitionAuthority => {
            let authority = rng.random_range(0..manifest.authorities.max(1));
            vec![authority]
        }
        PerturbationKind::PolicySwap => {
            all.truncate((n / 2).max(1));
            all
        }
        PerturbationKind::DepositsUpgrade => Vec::new(),
        PerturbationKind::BadLinks => {
            let pool = eligible(manifest, kind, at_ms);
            pool.choose_multiple(rng, 2.min(pool.len()))
                .copied()
                .collect()
        }
        PerturbationKind::Kill
        | PerturbationKind::Pause
        | PerturbationKind::Wipe
        | PerturbationKind::ClockSkew => {
            let pool = eligible(manifest, kind, at_ms);
            pool.choose(rng).copied().into_iter().collect()
        }
    };
    chosen.sort_unstable();
    chosen
}

/// The whole plan of `manifest`: listed perturbations, the upgrade and the policy swap, and the
/// seeded random ones, sorted by start. Every perturbation ends before `duration_s`.
pub fn plan(manifest: &Manifest) -> Vec<Planned> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(manifest.seed ^ 0x7e57_6e70);
    let end_of_run = ms(manifest.duration_s);
    let mut out = Vec::new();
    let mut push = |start_ms: u64,
                    duration_ms: u64,
                    kind: PerturbationKind,
                    targets: Option<Vec<usize>>,
                    rng: &mut rand::rngs::StdRng| {
        let targets = targets.unwrap_or_else(|| choose_targets(manifest, kind, start_ms, rng));
        let skew_ms = if kind == PerturbationKind::ClockSkew {
            // Within the chain's allowance for a peer's clock, either way.
            let magnitude: i64 = rng.random_range(100..400);
            if rng.random_bool(0.5) {
                magnitude
            } else {
                magnitude.saturating_neg()
            }
        } else {
            0
        };
        let end_ms = start_ms.saturating_add(duration_ms).min(end_of_run);
        out.push(Planned {
            start_ms,
            end_ms,
            kind,
            targets,
            skew_ms,
        });
    };
    for p in &manifest.perturbations {
        push(
            ms(p.at_s),
            ms(p.duration_s),
            p.kind,
            p.targets.clone(),
            &mut rng,
        );
    }
    if let Some(upgrade) = &manifest.upgrade {
        push(
            ms(upgrade.at_s),
            0,
            PerturbationKind::DepositsUpgrade,
            Some(Vec::new()),
            &mut rng,
        );
    }
    if let Some(swap) = &manifest.policy_swap {
        push(
            ms(swap.at_s),
            0,
            PerturbationKind::PolicySwap,
            None,
            &mut rng,
        );
    }
    if let Some(random) = &manifest.random {
        let [lo, hi] = random.every_s;
        let [dlo, dhi] = random.duration_s;
        let mut at = ms(rng.random_range(lo..=hi));
        while at < end_of_run {
            let duration = ms(rng.random_range(dlo..=dhi));
            if at.saturating_add(duration) >= end_of_run {
                break;
            }
            if let Some(kind) = random.kinds.choose(&mut rng).copied() {
                push(at, duration, kind, None, &mut rng);
            }
            at = at.saturating_add(ms(rng.random_range(lo..=hi)));
        }
    }
    out.sort_by_key(|p| (p.start_ms, p.end_ms));
    out
}

/// Which perturbations start and end as time passes (sans-IO: the runner passes `now_ms`).
#[derive(Debug, Clone)]
pub struct Schedule {
    plan: Vec<Planned>,
    started: Vec<bool>,
    ended: Vec<bool>,
}

impl Schedule {
    /// A schedule over `plan`.
    pub fn new(plan: Vec<Planned>) -> Self {
        let len = plan.len();
        Self {
            plan,
            started: vec![false; len],
            ended: vec![false; len],
        }
    }

    /// The plan.
    pub fn plan(&self) -> &[Planned] {
        &self.plan
    }

    /// The steps due at `now_ms`, each returned once: ends before starts, so a node is
    /// restarted before another perturbation takes it.
    pub fn due(&mut self, now_ms: u64) -> Vec<Step> {
        let mut steps = Vec::new();
        for (i, p) in self.plan.iter().enumerate() {
            let (Some(started), Some(ended)) = (self.started.get(i), self.ended.get_mut(i)) else {
                continue;
            };
            if *started && !*ended && p.end_ms <= now_ms {
                *ended = true;
                steps.push(Step::End(i));
            }
        }
        for (i, p) in self.plan.iter().enumerate() {
            if let Some(started) = self.started.get_mut(i)
                && !*started
                && p.start_ms <= now_ms
            {
                *started = true;
                steps.push(Step::Start(i));
            }
        }
        steps
    }

    /// Every started perturbation not yet ended (the runner ends them all at the run's end).
    pub fn open(&self) -> Vec<usize> {
        (0..self.plan.len())
            .filter(|i| self.started.get(*i) == Some(&true) && self.ended.get(*i) == Some(&false))
            .collect()
    }

    /// Marks `index` ended (the runner ended it early).
    pub fn mark_ended(&mut self, index: usize) {
        if let Some(ended) = self.ended.get_mut(index) {
            *ended = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long() -> Manifest {
        Manifest::parse(
            r#"
            nodes = 7
            authorities = 4
            duration_s = 1800
            seed = 11
            [late_joiner]
            at_s = 60
            [random]
            every_s = [20, 30]
            duration_s = [5, 12]
            kinds = ["kill", "pause", "partition-minority", "partition-majority",
                     "partition-authority", "wipe", "clock-skew", "bad-links",
                     "deposits-upgrade", "policy-swap"]
            "#,
            "<inline>",
        )
        .unwrap()
    }

    #[test]
    fn a_seeded_plan_is_deterministic_dense_and_fits_each_kind() {
        let m = long();
        let plan = plan(&m);
        assert_eq!(plan, super::plan(&m), "same seed, same plan");
        let mut other = m.clone();
        other.seed = 12;
        assert_ne!(plan, super::plan(&other), "another seed, another plan");
        // 1800 s at one every 20-30 s.
        assert!(plan.len() >= 60, "{} perturbations", plan.len());
        let kinds: std::collections::BTreeSet<_> = plan.iter().map(|p| p.kind).collect();
        assert!(kinds.len() >= 8, "{kinds:?}");
        for p in &plan {
            assert!(p.end_ms <= 1_800_000 && p.start_ms <= p.end_ms, "{p:?}");
            match p.kind {
                PerturbationKind::PartitionMinority => assert_eq!(p.targets.len(), 3),
                PerturbationKind::PartitionMajority => assert_eq!(p.targets.len(), 4),
                PerturbationKind::PartitionAuthority => {
                    assert!(p.targets.len() == 1 && p.targets[0] < 4)
                }
                PerturbationKind::PolicySwap => assert_eq!(p.targets.len(), 3),
                PerturbationKind::Wipe => assert!(p.targets.len() == 1 && p.targets[0] != 0),
                PerturbationKind::ClockSkew => {
                    assert!((100..400).contains(&p.skew_ms.unsigned_abs()))
                }
                _ => {}
            }
            if p.start_ms < 90_000 {
                assert!(!p.targets.contains(&6) || p.kind.is_partition(), "{p:?}");
            }
        }
        // Sequential: one ends before the next starts.
        for pair in plan.windows(2) {
            assert!(pair[0].end_ms < pair[1].start_ms, "{pair:?}");
        }
    }

    #[test]
    fn the_schedule_starts_and_ends_each_once_ends_first() {
        let plan = vec![
            Planned {
                start_ms: 0,
                end_ms: 100,
                kind: PerturbationKind::Kill,
                targets: vec![1],
                skew_ms: 0,
            },
            Planned {
                start_ms: 100,
                end_ms: 300,
                kind: PerturbationKind::Pause,
                targets: vec![1],
                skew_ms: 0,
            },
        ];
        let mut s = Schedule::new(plan);
        assert_eq!(s.due(0), vec![Step::Start(0)]);
        assert_eq!(s.due(50), vec![]);
        assert_eq!(s.due(150), vec![Step::End(0), Step::Start(1)]);
        assert_eq!(s.open(), vec![1]);
        assert_eq!(s.due(150), vec![]);
        assert_eq!(s.due(400), vec![Step::End(1)]);
        assert!(s.open().is_empty());
    }
}

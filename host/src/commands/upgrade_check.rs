//! `modnode upgrade-check <kind> --from <a.wasm> --to <b.wasm>`: runs both versions side by side
//! (see [`modnode::upgrade_check`]) and exits non-zero on any divergence or fuel regression.

use std::path::PathBuf;

use anyhow::Context as _;
use modnode::upgrade_check::{
    CaseFile, Checker, DEFAULT_FUEL_FLOOR, DEFAULT_MAX_FUEL_RATIO, Kind, ModuleFile, Report,
    Settings,
};

/// Arguments of `modnode upgrade-check`.
#[derive(Debug, clap::Args)]
pub struct UpgradeCheckArgs {
    /// Module kind: deposits, gossip-policy or checkpoint.
    pub kind: Kind,
    /// The version in use.
    #[arg(long)]
    pub from: PathBuf,
    /// The candidate version.
    #[arg(long)]
    pub to: PathBuf,
    /// Generated cases (gossip-policy also runs a few simulated networks).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub cases: u32,
    /// Generator seed (random if omitted; always printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Re-execute the recorded blocks of this data dir (deposits) instead of generated cases.
    #[arg(long, conflicts_with = "replay_case")]
    pub replay: Option<PathBuf>,
    /// Genesis file of the --replay data dir (the embedded dev genesis if omitted).
    #[arg(long, requires = "replay")]
    pub genesis: Option<PathBuf>,
    /// Re-run the case recorded in this case file.
    #[arg(long)]
    pub replay_case: Option<PathBuf>,
    /// Where to write a counterexample (default `upgrade-check-<kind>-<seed>.json`).
    #[arg(long)]
    pub case_file: Option<PathBuf>,
    /// Fail when the new version burns more than this times the old version's fuel on a case.
    #[arg(long, default_value_t = DEFAULT_MAX_FUEL_RATIO, value_parser = positive_ratio)]
    pub max_fuel_ratio: f64,
    /// Old-version fuel below this counts as this much when taking the ratio (cheap calls are
    /// not flagged for a few hundred instructions).
    #[arg(long, default_value_t = DEFAULT_FUEL_FLOOR)]
    pub fuel_floor: u64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn positive_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

/// Runs the check; `Ok(false)` when it found a divergence or regression.
pub fn upgrade_check(args: UpgradeCheckArgs) -> anyhow::Result<bool> {
    let seed = args.seed.unwrap_or_else(rand::random);
    let settings = Settings {
        cases: args.cases,
        seed,
        max_fuel_ratio: args.max_fuel_ratio,
        fuel_floor: args.fuel_floor,
        ..Settings::default()
    };
    let from = ModuleFile::read(&args.from)?;
    let to = ModuleFile::read(&args.to)?;
    let checker = Checker::new(args.kind, &from, &to)?;
    let (old, new) = checker.names();
    if !args.json {
        eprintln!("upgrade-check {}: {old} -> {new}", args.kind);
    }
    let mut report = if let Some(case) = &args.replay_case {
        let case = CaseFile::read(case)?;
        checker.replay_case(&case, &settings)?
    } else if let Some(data_dir) = &args.replay {
        let genesis = super::run::genesis(args.genesis.as_ref())?;
        checker.replay_data_dir(data_dir, genesis, &settings)?
    } else {
        if !args.json {
            eprintln!("seed {seed}, {} cases", args.cases);
        }
        checker.run(&settings)?
    };
    if let Some(counterexample) = report.counterexample.as_mut() {
        // Generated cases get a case file; replayed ones already have theirs.
        if args.replay_case.is_none() && args.replay.is_none() {
            let path = args.case_file.clone().unwrap_or_else(|| {
                PathBuf::from(format!(
                    "upgrade-check-{}-{}.json",
                    args.kind, counterexample.seed
                ))
            });
            checker
                .case_file(counterexample)
                .write(&path)
                .with_context(|| "cannot save the counterexample")?;
            counterexample.case_file = Some(path);
        }
    }
    if args.json {
        println!("{}", report.to_json());
    } else {
        print_human(&report);
    }
    Ok(report.verdict.passed())
}

fn print_human(report: &Report) {
    println!(
        "{} cases, max fuel ratio {:.2}: {}",
        report.cases,
        report.max_fuel_ratio,
        match report.verdict {
            modnode::upgrade_check::Verdict::Pass => "PASS",
            modnode::upgrade_check::Verdict::Divergence => "FAIL (divergence)",
            modnode::upgrade_check::Verdict::FuelRegression => "FAIL (fuel regression)",
        }
    );
    if let Some(c) = &report.counterexample {
        println!("counterexample (seed {}): {}", c.seed, c.failure);
        match serde_json::to_string(&c.input) {
            Ok(input) => println!("input: {input}"),
            Err(e) => println!("input: (cannot print: {e})"),
        }
        if let Some(path) = &c.case_file {
            println!(
                "written to {}; re-run with --replay-case {}",
                path.display(),
                path.display()
            );
        }
    }
}

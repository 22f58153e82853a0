//! `modnode testnet run <manifest.toml> [--out DIR]`: a multi-process testnet under faults
//! (issue 25), described by a manifest; prints progress lines, writes `report.json` and
//! `timeline.png` into the output directory and exits non-zero on any violation.

use std::path::PathBuf;

use anyhow::Context as _;
use modnode::testnet::manifest::Manifest;
use modnode::testnet::runner::{self, RunOptions};

/// Options of `modnode testnet run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The testnet manifest (TOML; see `examples/testnet/`).
    pub manifest: PathBuf,
    /// Output directory: node data, logs, genesis, report (default: a new temporary one).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs the manifest; Ok(false) when the run found violations or did not converge.
pub fn run(args: RunArgs) -> anyhow::Result<bool> {
    let manifest = Manifest::load(&args.manifest)?;
    let out = match args.out {
        Some(dir) => dir,
        None => tempfile::Builder::new()
            .prefix("modnode-testnet-")
            .tempdir()
            .context("cannot create an output directory")?
            .keep(),
    };
    let binary = std::env::current_exe().context("cannot find the modnode binary")?;
    eprintln!(
        "testnet {}: {} nodes ({} authorities), {} s, seed {}; output in {}",
        manifest.name,
        manifest.nodes,
        manifest.authorities,
        manifest.duration_s,
        manifest.seed,
        out.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = rt.block_on(runner::run(
        manifest,
        RunOptions {
            binary,
            out_dir: out,
            progress: true,
        },
    ))?;
    println!("report: {}", outcome.report_json.display());
    println!("timeline: {}", outcome.report_png.display());
    for v in &outcome.violations {
        println!("violation: {v}");
    }
    let ok = outcome.violations.is_empty() && outcome.converged;
    println!(
        "{}: {} violations, converged {} ({} ms after the last heal), {} deposits accepted",
        if ok { "PASS" } else { "FAIL" },
        outcome.violations.len(),
        outcome.converged,
        outcome.converge_ms.map_or("-".into(), |ms| ms.to_string()),
        outcome.deposits_accepted
    );
    Ok(ok)
}

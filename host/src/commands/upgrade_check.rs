//! `modnode upgrade-check <kind> --from <a.wasm> --to <b.wasm>`: runs both versions side by side
//! (see [`modnode::upgrade_check`]) and exits non-zero on any divergence or fuel regression.

use std::path::PathBuf;

use anyhow::Context as _;
use modnode::admin::blocks_query::MAX_RAW_BLOCKS;
use modnode::admin::client::{self, Target};
use modnode::admin::{AdminError, AdminToken};
use modnode::chain::block::Block;
use modnode::chain::genesis::MAX_DEPOSITS_PER_BLOCK;
use modnode::upgrade_check::{
    COST_GATE_PERCENT, CaseFile, Checker, DEFAULT_FUEL_FLOOR, DEFAULT_MAX_FUEL_RATIO, Kind,
    LiveCheckpoint, ModuleFile, Report, Settings, verify_checkpoint,
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
    #[arg(long, conflicts_with_all = ["replay_case", "from_node"])]
    pub replay: Option<PathBuf>,
    /// Re-execute the running node whose admin API is at this URL (`http://<ip>:<port>`;
    /// deposits) on its real state: its newest checkpoint (verified as a restorer verifies
    /// it) and the canonical blocks after it, to its head — try-runtime's "live" mode. A node
    /// without a checkpoint is replayed from genesis (it must keep every block).
    #[arg(long, value_name = "URL", conflicts_with = "replay_case")]
    pub from_node: Option<String>,
    /// With `--from-node`: ignore the node's checkpoints and replay every block from genesis.
    #[arg(long, requires = "from_node")]
    pub from_genesis: bool,
    /// With `--from-node`: the file holding the node's admin token (its `admin.token`).
    #[arg(
        long,
        value_name = "FILE",
        requires = "from_node",
        alias = "token-file"
    )]
    pub token: Option<PathBuf>,
    /// Genesis file of the --replay data dir or --from-node chain (the embedded dev genesis if
    /// omitted).
    #[arg(long)]
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
    let mut differences = Vec::new();
    let mut live = None;
    let mut report = if let Some(case) = &args.replay_case {
        let case = CaseFile::read(case)?;
        checker.replay_case(&case, &settings)?
    } else if let Some(data_dir) = &args.replay {
        let genesis = super::run::genesis(args.genesis.as_ref())?;
        let findings = checker.replay_data_dir_with_differences(data_dir, genesis, &settings)?;
        differences = findings.differences;
        findings.report
    } else if let Some(url) = &args.from_node {
        let genesis = super::run::genesis(args.genesis.as_ref())?;
        let token = args
            .token
            .as_deref()
            .map(AdminToken::load_file)
            .transpose()?;
        let target = Target::url(url, token)?;
        let runtime = super::module::runtime()?;
        let start = if args.from_genesis {
            None
        } else {
            node_checkpoint(&runtime, &target, url)?
        };
        let first = start.as_ref().map_or(1, |c| c.height().saturating_add(1));
        let blocks = node_blocks(&runtime, &target, url, first)?;
        if !args.json {
            match &start {
                Some(c) => eprintln!(
                    "checkpoint {} at height {} from {url} (verified), then {} blocks after it",
                    hex::encode(c.id),
                    c.height(),
                    blocks.len()
                ),
                None => eprintln!("{} blocks from genesis, from {url}", blocks.len()),
            }
        }
        let findings =
            checker.replay_blocks_from(url, start.as_ref(), &blocks, genesis, &settings)?;
        live = Some(serde_json::json!({
            "checkpoint": start.as_ref().map(|c| hex::encode(c.id)),
            "checkpoint_height": start.as_ref().map(LiveCheckpoint::height),
            "blocks_replayed": blocks.len(),
        }));
        differences = findings.differences;
        findings.report
    } else {
        if !args.json {
            eprintln!("seed {seed}, {} cases", args.cases);
            if checker.is_cross_contract() {
                eprintln!(
                    "versions of different deposits contracts: checking what must hold \
                     (acceptance, deposit index, exactly once, conservation, same outcome, \
                     drain, cost gate at {COST_GATE_PERCENT}% of each call's budget)"
                );
            }
        }
        let findings = checker.run_with_differences(&settings)?;
        differences = findings.differences;
        findings.report
    };
    if let Some(counterexample) = report.counterexample.as_mut() {
        // Generated cases get a case file; replayed ones already have theirs.
        if args.replay_case.is_none() && args.replay.is_none() && args.from_node.is_none() {
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
        let mut json = report.to_json();
        if let Some(object) = json.as_object_mut() {
            if !differences.is_empty() {
                object.insert(
                    "differences".into(),
                    serde_json::to_value(&differences).context("cannot print the differences")?,
                );
            }
            if let Some(live) = live {
                object.insert("from_node".into(), live);
            }
        }
        println!("{json}");
    } else {
        print_human(&report);
        for d in &differences {
            println!(
                "documented difference {} (seen {} times): {}",
                serde_json::to_value(d.class)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                d.count,
                d.rule
            );
        }
    }
    Ok(report.verdict.passed())
}

/// The newest checkpoint of the node at `url`, verified as a restorer verifies one (over its
/// admin API: `GET /checkpoints/latest`, the checkpoint's block, `GET /checkpoints/chunk`
/// chunk by chunk); `None`, said on stderr (also with `--json`, whose answer is on stdout),
/// when the node stores none yet.
fn node_checkpoint(
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    url: &str,
) -> anyhow::Result<Option<LiveCheckpoint>> {
    let latest = match runtime.block_on(client::latest_checkpoint(target)) {
        Ok(latest) => latest,
        Err(AdminError::Refused {
            status: 404,
            message,
            ..
        }) => {
            eprintln!(
                "the node at {url} has no checkpoint to start from ({message}): replaying every \
                 block from genesis"
            );
            return Ok(None);
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot read the checkpoint of the node at {url}"));
        }
    };
    let text = |name: &str| {
        latest
            .get(name)
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .with_context(|| {
                format!("the node at {url} answered /checkpoints/latest without {name}")
            })
    };
    let id = text("id")?;
    let manifest = hex::decode(text("manifest")?)
        .with_context(|| format!("the node at {url} sent a checkpoint manifest that is not hex"))?;
    let height = latest
        .get("height")
        .and_then(|h| h.as_u64())
        .with_context(|| {
            format!("the node at {url} answered /checkpoints/latest without height")
        })?;
    let block = node_blocks_page(runtime, target, url, height, 1)?
        .into_iter()
        .next()
        .with_context(|| {
            format!("the node at {url} does not serve its checkpoint's block {height}")
        })?;
    let mut chunk = |index: usize| -> Result<Vec<u8>, String> {
        let answer = runtime
            .block_on(client::checkpoint_chunk(target, &id, index))
            .map_err(|e| e.to_string())?;
        answer
            .get("bytes")
            .and_then(|b| b.as_str())
            .and_then(|h| hex::decode(h).ok())
            .ok_or_else(|| "the answer carries no hex bytes".to_string())
    };
    Ok(Some(verify_checkpoint(url, &manifest, block, &mut chunk)?))
}

/// One page of the node's canonical blocks from `from` (at most `count`), decoded.
fn node_blocks_page(
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    url: &str,
    from: u64,
    count: u64,
) -> anyhow::Result<Vec<Block>> {
    let answer = runtime
        .block_on(client::raw_blocks(target, from, count))
        .with_context(|| format!("cannot read blocks from {from} of the node at {url}"))?;
    let page = answer
        .get("blocks")
        .and_then(|b| b.as_array())
        .with_context(|| format!("the node at {url} answered /blocks without a block list"))?;
    page.iter()
        .map(|line| {
            let height = line.get("height").and_then(|h| h.as_u64()).unwrap_or(0);
            let bytes = line
                .get("bytes")
                .and_then(|b| b.as_str())
                .and_then(|h| hex::decode(h).ok())
                .with_context(|| {
                    format!("the node at {url} sent block {height} without its encoding")
                })?;
            Block::decode(&bytes, MAX_DEPOSITS_PER_BLOCK)
                .map_err(|e| anyhow::anyhow!("block {height} from the node at {url}: {e}"))
        })
        .collect()
}

/// The canonical blocks of the node at `url` from height `first` to its head, over its admin
/// API (`GET /blocks?raw=1`, a page at a time).
fn node_blocks(
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    url: &str,
    first: u64,
) -> anyhow::Result<Vec<Block>> {
    let mut blocks: Vec<Block> = Vec::new();
    loop {
        let from = next_height(first, &blocks);
        let page = node_blocks_page(runtime, target, url, from, MAX_RAW_BLOCKS)?;
        if page.is_empty() {
            break;
        }
        for block in page {
            if block.header.height != next_height(first, &blocks) {
                anyhow::bail!(
                    "the node at {url} keeps blocks from height {} only (pruned, or started from \
                     a checkpoint) but the replay starts at {first}: let it create a checkpoint \
                     (modnode checkpoint create), or run it with --history full",
                    block.header.height
                );
            }
            blocks.push(block);
        }
    }
    Ok(blocks)
}

/// The height after the last block read (`first` before any).
fn next_height(first: u64, blocks: &[Block]) -> u64 {
    u64::try_from(blocks.len())
        .unwrap_or(u64::MAX)
        .saturating_add(first)
}

fn print_human(report: &Report) {
    print!("{}", human(report));
}

/// The report for a person. Each number says what it is over: the summary's fuel ratio is the
/// highest of every case run, the counterexample's is that of the smallest failing case
/// shrinking found (a shrunk case is smaller, so its ratio is usually lower).
fn human(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} cases run, highest fuel ratio of the cases run {:.2} (new / old fuel): {}",
        report.cases,
        report.max_fuel_ratio,
        match report.verdict {
            modnode::upgrade_check::Verdict::Pass => "PASS",
            modnode::upgrade_check::Verdict::Divergence => "FAIL (divergence)",
            modnode::upgrade_check::Verdict::FuelRegression => "FAIL (fuel regression)",
        }
    );
    if report.kind == Kind::GossipPolicy && report.verdict == modnode::upgrade_check::Verdict::Pass
    {
        let _ = writeln!(
            out,
            "PASS: every plan keeps the contract's invariants and the simulated networks are \
             covered as well; plans may differ from the old version's (a shadow counts each \
             plan that differs from the active one's as a divergence: expected for a new policy)"
        );
    }
    if let Some(c) = &report.counterexample {
        let _ = writeln!(
            out,
            "counterexample (seed {}, the smallest failing case shrinking found; its numbers are \
             its own): {}",
            c.seed, c.failure
        );
        match serde_json::to_string(&c.input) {
            Ok(input) => {
                let _ = writeln!(out, "input: {input}");
            }
            Err(e) => {
                let _ = writeln!(out, "input: (cannot print: {e})");
            }
        }
        if let Some(path) = &c.case_file {
            let _ = writeln!(
                out,
                "written to {}; re-run with --replay-case {}",
                path.display(),
                path.display()
            );
        }
    }
    out
}

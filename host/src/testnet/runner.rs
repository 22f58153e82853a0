//! `modnode testnet run`: starts the manifest's nodes as `modnode run` processes whose peers
//! are reached only through the fault-injecting [`Relay`], submits deposits continuously,
//! polls every node at ~2 Hz into the invariant [`Checker`] (continuously: a violation is
//! printed when it happens), applies the planned perturbations, heals everything at the end,
//! waits for convergence and writes the report.

mod actions;
mod bookkeeping;
mod deposits;
mod poll;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use self::poll::Observation;
use super::invariants::{Checker, Violation};
use super::manifest::{Manifest, PerturbationKind};
use super::node_process::{DepositRole, LogLine, NodeProcess, NodeSpec};
use super::perturb::{self, Schedule, Step};
use super::relay::Relay;
use super::report;
use crate::chain::genesis::Genesis;

pub use self::actions::embedded_hash;

/// Where and how to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The `modnode` binary the nodes run.
    pub binary: PathBuf,
    /// Output directory: node data, logs, genesis, report (created; must be empty or new).
    pub out_dir: PathBuf,
    /// Print progress lines on stderr.
    pub progress: bool,
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every violation, in the order found.
    pub violations: Vec<String>,
    /// Whether every live node reached one head and every deposit after the last heal.
    pub converged: bool,
    /// Time from the last heal to convergence, ms.
    pub converge_ms: Option<u64>,
    /// Deposits the contract accepted.
    pub deposits_accepted: u64,
    /// Every node's last observed (head, deposit count).
    pub final_nodes: Vec<Option<(u64, u64)>>,
    /// Perturbations applied, by kind.
    pub perturbations: BTreeMap<String, u64>,
    /// Deposits upgrades a majority voted: (height, module).
    pub upgrades: Vec<(u64, String)>,
    /// The deposits module each node ran at the end (embedded name, or the hash), if it
    /// answered.
    pub active_deposits: Vec<Option<String>>,
    /// The relay's counters at the end.
    pub relay: super::relay::RelayStats,
    /// The JSON report.
    pub report_json: PathBuf,
    /// The PNG timeline.
    pub report_png: PathBuf,
}

/// Why a run could not be carried out (ours: the harness or the machine — distinct from
/// violations, which are the network's).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A file in the output directory.
    #[error("testnet output {path}: {source}")]
    Files {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The genesis or a node identity could not be made.
    #[error("testnet setup: {0}")]
    Setup(String),
    /// The relay could not bind its sockets.
    #[error("cannot start the relay: {0}")]
    Relay(std::io::Error),
    /// A node process could not be started.
    #[error(transparent)]
    Node(#[from] super::node_process::NodeProcessError),
    /// The report could not be written.
    #[error("cannot write the report: {0}")]
    Report(String),
}

/// What tasks tell the runner.
#[derive(Debug)]
pub(crate) enum Event {
    /// A line for the progress output.
    Note(String),
    /// A deposits upgrade was voted in by a majority at `height`.
    Upgrade {
        /// When it was proposed.
        at_ms: u64,
        /// Activation height.
        height: u64,
        /// The module.
        label: String,
    },
}

/// The running testnet.
pub(crate) struct Testnet {
    manifest: Manifest,
    options: RunOptions,
    started_at: Instant,
    nodes: Vec<NodeProcess>,
    /// Node `i` has been started at least once (the late joiner not before its time).
    ever_started: Vec<bool>,
    relay: Relay,
    schedule: Schedule,
    checker: Checker,
    events_tx: mpsc::Sender<Event>,
    upgrade_lead_blocks: u64,
    upgrade_listed_done: bool,
    /// Short (8 hex digit) node id → node, to read bans off log lines.
    short_ids: Vec<String>,
    banned: Vec<Vec<String>>,
    node_ids: Vec<String>,
    violations: Vec<String>,
    last: Vec<Option<Observation>>,
    last_heal_ms: Option<u64>,
    timeline: report::Timeline,
    applied: BTreeMap<String, u64>,
    max_rss: u64,
    converge_ms: Option<u64>,
    deposits_accepted: u64,
    known_deposits: std::collections::BTreeSet<u64>,
}

fn files(path: &Path) -> impl FnOnce(std::io::Error) -> RunnerError + '_ {
    move |source| RunnerError::Files {
        path: path.to_path_buf(),
        source,
    }
}

/// A port free now on 127.0.0.1 (UDP or TCP).
fn free_port(udp: bool) -> Result<SocketAddr, RunnerError> {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let bound = if udp {
        std::net::UdpSocket::bind(any).and_then(|s| s.local_addr())
    } else {
        std::net::TcpListener::bind(any).and_then(|s| s.local_addr())
    };
    bound.map_err(|e| RunnerError::Setup(format!("no free port on 127.0.0.1: {e}")))
}

/// Writes the genesis for `ids` (the first `authorities` produce); the chain starts on the
/// deposits version the manifest's upgrade does not name. Returns its path and itself.
fn write_genesis(
    manifest: &Manifest,
    dir: &Path,
    ids: &[String],
) -> Result<(PathBuf, Genesis), RunnerError> {
    let mut json = serde_json::json!({
        "chain_id": format!("modnode-testnet-{}", manifest.name),
        // Time for every process to start before slot 0.
        "genesis_time_ms": crate::clock::unix_ms().saturating_add(3_000),
        "slot_ms": manifest.slot_ms,
        "finality_depth": manifest.finality_depth,
        "authorities": ids.iter().take(manifest.authorities).collect::<Vec<_>>(),
        "generated_validators": { "count": 64, "seed": manifest.seed },
    });
    let starts_on = match manifest.upgrade.as_ref().map(|u| u.module.as_str()) {
        Some("deposits-v1") => "deposits-v2",
        _ => "deposits-v1",
    };
    let (hash, _) = embedded_hash(starts_on)
        .ok_or_else(|| RunnerError::Setup(format!("{starts_on} is not embedded")))?;
    if let Some(map) = json.as_object_mut() {
        map.insert("deposits_module".into(), hash.into());
    }
    let text = json.to_string();
    let path = dir.join("genesis.json");
    let genesis = Genesis::from_json(&text, &path.display().to_string())
        .map_err(|e| RunnerError::Setup(e.to_string()))?;
    std::fs::write(&path, &text).map_err(files(&path))?;
    Ok((path, genesis))
}

/// Runs `manifest` to the end and writes the report; violations are in the outcome.
pub async fn run(manifest: Manifest, options: RunOptions) -> Result<Outcome, RunnerError> {
    let out = options.out_dir.clone();
    std::fs::create_dir_all(out.join("logs")).map_err(files(&out))?;
    let n = manifest.nodes;
    let mut ids = Vec::with_capacity(n);
    let mut dirs = Vec::with_capacity(n);
    for i in 0..n {
        let dir = out.join(format!("node-{i}"));
        std::fs::create_dir_all(&dir).map_err(files(&dir))?;
        let identity = crate::net::identity::NodeIdentity::load_or_create(&dir)
            .map_err(|e| RunnerError::Setup(format!("node {i}'s identity: {e}")))?;
        ids.push(identity.node_id().to_string());
        dirs.push(dir);
    }
    let (genesis_file, genesis) = write_genesis(&manifest, &out, &ids)?;
    let (lead, fork) = (genesis.upgrade_lead_blocks, genesis.genesis_fork_version);
    let genesis_balance: u128 = genesis
        .validators
        .iter()
        .map(|v| u128::from(v.balance))
        .fold(0, u128::saturating_add);
    let listens: Vec<SocketAddr> = (0..n).map(|_| free_port(true)).collect::<Result<_, _>>()?;
    let contract = free_port(false)?;
    let contract_url = format!("http://{contract}");
    let relay = Relay::start(listens.clone(), manifest.seed)
        .await
        .map_err(RunnerError::Relay)?;
    let (log_tx, log_rx) = std_mpsc::sync_channel::<LogLine>(16_384);
    let mut nodes = Vec::with_capacity(n);
    for (i, dir) in dirs.iter().enumerate() {
        let bootstrap = (0..n)
            .filter(|j| *j != i)
            .filter_map(|j| Some(format!("{}@{}", ids.get(j)?, relay.addr(i, j)?)))
            .collect();
        let spec = NodeSpec {
            index: i,
            binary: options.binary.clone(),
            data_dir: dir.clone(),
            genesis_file: genesis_file.clone(),
            listen: *listens
                .get(i)
                .ok_or_else(|| RunnerError::Setup("ports".into()))?,
            bootstrap,
            deposits: if i == 0 {
                DepositRole::Host(contract)
            } else {
                DepositRole::Follow(contract_url.clone())
            },
            checkpoint_interval: manifest.checkpoint_interval,
            log_file: out.join("logs").join(format!("node-{i}.log")),
        };
        nodes.push(NodeProcess::new(spec, log_tx.clone()));
    }
    drop(log_tx);
    let (events_tx, events_rx) = mpsc::channel(256);
    let mut allowed = manifest.allowed_log_patterns.clone();
    allowed.extend(EXPLAINED_LOG_PATTERNS.iter().map(|p| p.to_string()));
    let checker = Checker::new(ids.clone(), vec![true; n])
        .with_allowed_errors(allowed)
        .with_rss_limit(manifest.max_rss_mb.saturating_mul(1 << 20))
        .with_genesis_balance(genesis_balance);
    let plan = perturb::plan(&manifest);
    let mut net = Testnet {
        short_ids: ids
            .iter()
            .map(|id| id.get(..8).unwrap_or_default().to_string())
            .collect(),
        banned: vec![Vec::new(); n],
        node_ids: ids,
        schedule: Schedule::new(plan),
        manifest,
        options,
        started_at: Instant::now(),
        nodes,
        ever_started: vec![false; n],
        relay,
        checker,
        events_tx,
        upgrade_lead_blocks: lead,
        upgrade_listed_done: false,
        violations: Vec::new(),
        last: vec![None; n],
        last_heal_ms: None,
        timeline: report::Timeline::default(),
        applied: BTreeMap::new(),
        max_rss: 0,
        converge_ms: None,
        deposits_accepted: 0,
        known_deposits: std::collections::BTreeSet::new(),
    };
    // On an error no process outlives the run: dropping a node kills it.
    let converged = net.drive(contract_url, fork, log_rx, events_rx).await?;
    net.finish(converged).await
}

/// Longest the first nodes may take to answer on their admin API.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);

/// Log patterns a perturbed network explains (a peer killed mid-stream, a connection cut by
/// the relay, a contract host paused); matched as substrings of ERROR lines.
const EXPLAINED_LOG_PATTERNS: &[&str] = &[];

impl Testnet {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn progress(&self, line: &str) {
        if self.options.progress {
            eprintln!("[{:>7.1} s] {line}", self.now_ms() as f64 / 1000.0);
        }
    }

    fn started(&self, node: usize) -> bool {
        self.ever_started.get(node).copied().unwrap_or(false)
    }

    fn late_start_ms(&self) -> Option<(usize, u64, String)> {
        let late = self.manifest.late_joiner.as_ref()?;
        let at = (late.at_s * 1000.0) as u64;
        Some((self.manifest.late_node()?, at, late.sync.clone()))
    }

    fn violation(&mut self, found: Vec<Violation>) {
        for v in found {
            let text = v.to_string();
            self.progress(&format!("VIOLATION: {text}"));
            self.violations.push(text);
        }
    }

    /// A perturbation ended: the network must converge again (measured by the checker).
    fn healed(&mut self, kind: PerturbationKind) {
        let now = self.now_ms();
        self.last_heal_ms = Some(now);
        self.checker.heal_after(now, Some(kind));
    }

    /// The main loop; Ok(converged).
    async fn drive(
        &mut self,
        contract_url: String,
        fork: [u8; 4],
        logs: std_mpsc::Receiver<LogLine>,
        mut events: mpsc::Receiver<Event>,
    ) -> Result<bool, RunnerError> {
        let n = self.nodes.len();
        let late = self.late_start_ms();
        for i in 0..n {
            if late.as_ref().is_some_and(|(node, _, _)| *node == i) {
                continue;
            }
            self.start_node(i, "full")?;
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let (obs_tx, mut observations) = mpsc::channel::<Observation>(1024);
        let mut pollers = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            pollers.push(tokio::spawn(poll::poll_node(
                i,
                node.data_dir().to_path_buf(),
                obs_tx.clone(),
                stop_rx.clone(),
            )));
        }
        drop(obs_tx);
        // The clock starts once every first node answers: loading and compiling the modules
        // takes a while on a loaded machine, and perturbations timed from a process's spawn
        // would hit nodes still starting.
        let wait_from = Instant::now();
        let mut ready = vec![false; n];
        while !(0..n).all(|i| ready.get(i) == Some(&true) || !self.started(i)) {
            if wait_from.elapsed() > STARTUP_TIMEOUT {
                return Err(RunnerError::Setup(format!(
                    "nodes {:?} did not answer on their admin API within {STARTUP_TIMEOUT:?}; \
                     see their logs in {}",
                    (0..n)
                        .filter(|i| ready.get(*i) == Some(&false) && self.started(*i))
                        .collect::<Vec<_>>(),
                    self.options.out_dir.join("logs").display()
                )));
            }
            while let Ok(line) = logs.try_recv() {
                self.log_line(line);
            }
            self.check_exits();
            if let Ok(Some(o)) =
                tokio::time::timeout(Duration::from_millis(200), observations.recv()).await
                && let Some(r) = ready.get_mut(o.node)
            {
                *r = true;
            }
        }
        self.started_at = Instant::now();
        self.progress(&format!(
            "every node answers ({:.1} s after starting them): the run begins",
            wait_from.elapsed().as_secs_f64()
        ));
        let (deposit_stop_tx, deposit_stop_rx) = watch::channel(false);
        let (accepted_tx, mut accepted) = mpsc::channel(1024);
        let mut reconciled = false;
        let mut depositor = tokio::spawn(deposits::submit_loop(
            contract_url.clone(),
            self.manifest.deposits_per_s,
            self.manifest.seed,
            fork,
            accepted_tx,
            deposit_stop_rx,
        ));
        let end_ms = (self.manifest.duration_s * 1000.0) as u64;
        let converge_ms = (self.manifest.converge_s * 1000.0) as u64;
        let mut phase_end = false;
        let mut converged_at: Option<u64> = None;
        let mut next_progress = 0u64;
        let mut ticker = tokio::time::interval(Duration::from_millis(200));
        loop {
            ticker.tick().await;
            let now = self.now_ms();
            // Perturbations and the late joiner.
            if !phase_end {
                for step in self.schedule.due(now) {
                    match step {
                        Step::Start(i) => {
                            let kind = self.schedule.plan().get(i).map(|p| p.kind);
                            if let Some(kind) = kind {
                                let count =
                                    self.applied.entry(kind.name().to_string()).or_default();
                                *count = count.saturating_add(1);
                            }
                            self.start_perturbation(i);
                            if let Some(p) = self.schedule.plan().get(i) {
                                self.timeline.perturbations.push((
                                    p.start_ms,
                                    p.end_ms,
                                    p.kind.name().to_string(),
                                    p.targets.clone(),
                                ));
                            }
                        }
                        Step::End(i) => self.end_perturbation(i),
                    }
                }
            }
            if let Some((node, at, sync)) = &late
                && !self.started(*node)
                && (now >= *at || phase_end)
            {
                self.progress(&format!("late joiner: node {node} starts (--sync {sync})"));
                self.start_node(*node, sync)?;
            }
            // What the tasks report.
            while let Ok(a) = accepted.try_recv() {
                let a: deposits::Accepted = a;
                self.deposits_accepted = self.deposits_accepted.saturating_add(1);
                self.known_deposits.insert(a.index);
                self.checker.deposit_submitted(a.index, a.amount_gwei);
            }
            while let Ok(event) = events.try_recv() {
                match event {
                    Event::Note(text) => self.progress(&text),
                    Event::Upgrade {
                        at_ms,
                        height,
                        label,
                    } => {
                        self.progress(&format!(
                            "deposits upgrade voted: {label} at height {height}"
                        ));
                        self.timeline.upgrades.push((at_ms, height, label));
                    }
                }
            }
            while let Ok(line) = logs.try_recv() {
                self.log_line(line);
            }
            while let Ok(o) = observations.try_recv() {
                self.observe(now, o);
            }
            self.check_exits();
            // The end: heal everything, stop deposits, wait for one head and every deposit.
            if !phase_end && now >= end_ms {
                phase_end = true;
                for i in self.schedule.open() {
                    self.end_perturbation(i);
                    self.schedule.mark_ended(i);
                }
                self.relay.heal();
                for node in &mut self.nodes {
                    node.resume();
                }
                let _ = deposit_stop_tx.send(true);
                let now = self.now_ms();
                self.last_heal_ms = Some(now);
                self.checker.heal_at(now);
                self.progress(
                    "run over: everything healed, deposits stopped; waiting for convergence",
                );
            }
            if phase_end && !reconciled && depositor.is_finished() {
                reconciled = true;
                let tally = (&mut depositor).await.unwrap_or_default();
                while let Ok(a) = accepted.try_recv() {
                    let a: deposits::Accepted = a;
                    self.deposits_accepted = self.deposits_accepted.saturating_add(1);
                    self.known_deposits.insert(a.index);
                    self.checker.deposit_submitted(a.index, a.amount_gwei);
                }
                self.reconcile_deposits(&contract_url, tally).await;
            }
            if phase_end && reconciled {
                let heal = self.last_heal_ms.unwrap_or(end_ms);
                if self.converged(self.deposits_accepted) {
                    converged_at = Some(now.saturating_sub(heal));
                    break;
                }
                if now > heal.saturating_add(converge_ms) {
                    self.progress("convergence deadline passed");
                    break;
                }
            }
            if now >= next_progress {
                next_progress = now.saturating_add(5_000);
                self.progress(&self.status_line(self.deposits_accepted));
            }
        }
        let _ = stop_tx.send(true);
        for p in pollers {
            let _ = p.await;
        }
        self.converge_ms = converged_at;
        Ok(converged_at.is_some())
    }

    /// After the deposits stopped: deposits whose answer was lost are still the contract's,
    /// so every index below the contract's own count is expected on every node.
    async fn reconcile_deposits(&mut self, contract_url: &str, tally: deposits::DepositTally) {
        if tally.unanswered == 0 {
            return;
        }
        match deposits::contract_count(contract_url).await {
            Some(count) => {
                for index in 0..count {
                    if self.known_deposits.insert(index) {
                        self.deposits_accepted = self.deposits_accepted.saturating_add(1);
                        self.checker
                            .deposit_submitted(index, deposits::DEPOSIT_GWEI);
                    }
                }
            }
            None => self.progress(&format!(
                "{} deposit submissions went unanswered and the contract's count could not be \
                 read: those deposits are not checked",
                tally.unanswered
            )),
        }
    }
}

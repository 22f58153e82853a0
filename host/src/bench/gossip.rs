//! `modnode bench gossip`: N gossip nodes with real quinn endpoints on loopback, in one
//! process, in a random degree-limited topology, publishing deposits and blocks from varying
//! origins — under gossip-policy-v1 (flood), gossip-policy-v2 and gossip-policy-v3 (stateful:
//! each node keeps its own state and hears its engine's events, as a node's slot does), then v2
//! and v3 again with 25% of the nodes throttled to a slow receive rate.
//!
//! Coverage latency of a (message, node) pair is the time from publication to the node's first
//! delivery. `tX` is the X-th percentile over all pairs; `missed` counts pairs never delivered;
//! `rmr` = block payload copies received / (N − 1) − 1, averaged over blocks;
//! `bytes_per_node` is framed gossip bytes received per node. `hp_p99_ms` is the p99 coverage
//! latency of high-priority messages (blocks) over the *unthrottled* nodes while the throttled
//! ones are present: slow peers must not slow everyone else.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;
use tokio::time::Instant;

use modnode::net::endpoint::{self, TransportLimits};
use modnode::net::gossip::{self, GossipConfig, GossipEvent, GossipHandle};
use modnode::net::identity::{NodeId, NodeIdentity};
use modnode::runtime::gossip_policy::{GossipPolicyModule, KeptPolicy};
use modnode::runtime::{LinkedModule, Runtime, RuntimeConfig};
use modnode_gossip::policy::MessageKind;
use modnode_gossip::{EngineConfig, MessageId};

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct GossipParams {
    /// Nodes.
    pub nodes: usize,
    /// Neighbours per node (at most).
    pub degree: usize,
    /// Deposits published (1 KiB each).
    pub deposits: usize,
    /// Blocks published (128 KiB each).
    pub blocks: usize,
    /// Publications are spread over this long.
    pub duration: Duration,
    /// Receive rate of throttled nodes, bits per second.
    pub slow_bps: u64,
    /// Seed of topology, origins, payloads and the throttled set.
    pub seed: u64,
    /// Runs of each scenario; the report gives per-metric medians (the machine is noisy).
    pub repeat: usize,
}

impl Default for GossipParams {
    fn default() -> Self {
        Self {
            nodes: 32,
            degree: 8,
            deposits: 200,
            blocks: 20,
            duration: Duration::from_secs(3),
            slow_bps: 8_000_000,
            seed: 7,
            repeat: 3,
        }
    }
}

/// Metrics of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Median coverage latency.
    pub t50_ms: f64,
    /// 90th percentile.
    pub t90_ms: f64,
    /// 99th percentile.
    pub t99_ms: f64,
    /// Pairs never delivered.
    pub missed: usize,
    /// Relative message redundancy of blocks.
    pub rmr: f64,
    /// Framed gossip bytes received per node.
    pub bytes_per_node: f64,
    /// p99 coverage latency of blocks over unthrottled nodes.
    pub hp_p99_ms: f64,
}

/// The slow-peer comparison.
#[derive(Debug, Clone, Serialize)]
pub struct SlowReport {
    /// p99 block coverage over unthrottled nodes, with 25% throttled nodes present (v2).
    pub hp_p99_ms: f64,
    /// The same metric without throttled nodes (the v2 run).
    pub hp_p99_ms_unthrottled: f64,
    /// Pairs never delivered in the throttled runs (throttled nodes included), summed.
    pub missed: usize,
    /// `hp_p99_ms / hp_p99_ms_unthrottled` of each repetition (the two runs back to back).
    pub ratios: Vec<f64>,
    /// Nodes throttled.
    pub throttled: usize,
    /// Their receive rate, bits per second.
    pub slow_bps: u64,
}

/// The report printed by `--json`: per-metric medians over the repetitions, `missed` summed.
#[derive(Debug, Clone, Serialize)]
pub struct GossipReport {
    /// Nodes.
    pub nodes: usize,
    /// Repetitions of each scenario.
    pub repeats: usize,
    /// gossip-policy-v1.
    pub flood: RunReport,
    /// gossip-policy-v2.
    pub v2: RunReport,
    /// v2 with 25% slow nodes.
    pub slow25: SlowReport,
    /// gossip-policy-v3.
    pub v3: RunReport,
    /// v3 with 25% slow nodes.
    pub slow25_v3: SlowReport,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile_ms(&values, 50.0)
}

/// Per-metric medians of `runs`; `missed` is summed so that any miss shows.
fn median_report(runs: &[RunReport]) -> RunReport {
    let of = |f: fn(&RunReport) -> f64| median(runs.iter().map(f).collect());
    RunReport {
        t50_ms: of(|r| r.t50_ms),
        t90_ms: of(|r| r.t90_ms),
        t99_ms: of(|r| r.t99_ms),
        missed: runs.iter().map(|r| r.missed).sum(),
        rmr: of(|r| r.rmr),
        bytes_per_node: of(|r| r.bytes_per_node),
        hp_p99_ms: of(|r| r.hp_p99_ms),
    }
}

fn percentile_ms(sorted: &[f64], pct: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64) * pct / 100.0).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len()) - 1)
        .copied()
        .unwrap_or(0.0)
}

struct Node {
    id: NodeId,
    addr: SocketAddr,
    endpoint: quinn::Endpoint,
    handle: GossipHandle,
}

async fn run_once(
    params: &GossipParams,
    policy: &GossipPolicyModule,
    throttled: &[bool],
) -> anyhow::Result<(RunReport, usize)> {
    let limits = TransportLimits::default();
    let n = params.nodes;
    let mut nodes = Vec::with_capacity(n);
    let (tx, mut deliveries) =
        tokio::sync::mpsc::unbounded_channel::<(usize, MessageId, Instant)>();
    for (i, slow) in throttled.iter().enumerate() {
        let identity = NodeIdentity::generate()?;
        let endpoint = endpoint::make_endpoint("127.0.0.1:0".parse()?, &identity, &limits)?;
        let config = GossipConfig {
            engine: EngineConfig {
                network_size: Some(u32::try_from(n)?),
                // As in a node: relay only after the application's verdict (here: at once).
                validate_before_relay: true,
                ..EngineConfig::default()
            },
            receive_rate_bps: slow.then_some(params.slow_bps),
            ..GossipConfig::default()
        };
        let (handle, mut events) = gossip::spawn(config, KeptPolicy::new(policy));
        let tx = tx.clone();
        let verdicts = handle.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                if let GossipEvent::Delivered { id, .. } = event {
                    let _ = tx.send((i, id, Instant::now()));
                    let _ = verdicts.validated(id, true);
                }
            }
        });
        nodes.push(Node {
            id: identity.node_id(),
            addr: endpoint.local_addr()?,
            endpoint,
            handle,
        });
    }

    // Wire the topology: the lower index dials, both sides hand the connection to gossip.
    let mut rng = rand::rngs::StdRng::seed_from_u64(params.seed);
    let adjacency = modnode_gossip::sim::topology(n, params.degree, &mut rng);
    let mut expected_incoming = vec![0usize; n];
    for (a, neighbours) in adjacency.iter().enumerate() {
        for &b in neighbours.iter().filter(|&&b| b > a) {
            expected_incoming[b] += 1;
        }
    }
    let mut acceptors = Vec::new();
    for (node, &count) in nodes.iter().zip(&expected_incoming) {
        let endpoint = node.endpoint.clone();
        let handle = node.handle.clone();
        let limits = limits.clone();
        acceptors.push(tokio::spawn(async move {
            for open in 0..count {
                let incoming = endpoint
                    .accept()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("endpoint closed"))?;
                let (conn, peer) = endpoint::accept(incoming, &limits, open).await?;
                handle.add_peer(peer, conn)?;
            }
            anyhow::Ok(())
        }));
    }
    for (a, neighbours) in adjacency.iter().enumerate() {
        for &b in neighbours.iter().filter(|&&b| b > a) {
            let (conn, _) = endpoint::connect(
                &nodes[a].endpoint,
                nodes[b].addr,
                Some(nodes[b].id),
                &limits,
            )
            .await?;
            nodes[a].handle.add_peer(nodes[b].id, conn)?;
        }
    }
    for acceptor in acceptors {
        acceptor.await??;
    }

    // Publish: deposits and blocks interleaved evenly over the duration, random origins.
    let total = params.deposits + params.blocks;
    let mut schedule = vec![MessageKind::Deposit; params.deposits];
    schedule.extend(std::iter::repeat_n(MessageKind::Block, params.blocks));
    schedule.shuffle(&mut rng);
    let blocks_planned = params.blocks;
    let mut published: HashMap<MessageId, (usize, MessageKind, Instant)> = HashMap::new();
    let gap = params.duration / u32::try_from(total.max(1))?;
    let start = Instant::now();
    for (i, kind) in schedule.iter().enumerate() {
        tokio::time::sleep_until(start + gap * u32::try_from(i)?).await;
        let origin = rng.random_range(0..n);
        let size = if *kind == MessageKind::Block {
            128 << 10
        } else {
            1 << 10
        };
        let mut payload = vec![0u8; size];
        rng.fill_bytes(&mut payload);
        let now = Instant::now();
        let id = nodes[origin].handle.publish(*kind, payload).await?;
        published.insert(id, (origin, *kind, now));
    }

    // Collect until quiet (no delivery for 2 s) or 30 s after the last publication.
    let mut first: HashMap<(MessageId, usize), Instant> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout(Duration::from_secs(2), deliveries.recv()).await {
            Ok(Some((node, id, at))) => {
                first.entry((id, node)).or_insert(at);
            }
            _ => break,
        }
        if Instant::now() > deadline {
            break;
        }
    }

    let mut latencies = Vec::new();
    let mut block_latencies_fast = Vec::new();
    let mut missed = 0;
    for (id, (origin, kind, at)) in &published {
        for node in (0..n).filter(|node| node != origin) {
            match first.get(&(*id, node)) {
                Some(t) => {
                    let ms = t.duration_since(*at).as_secs_f64() * 1e3;
                    latencies.push(ms);
                    if *kind == MessageKind::Block && !throttled[node] {
                        block_latencies_fast.push(ms);
                    }
                }
                None => missed += 1,
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    block_latencies_fast.sort_by(f64::total_cmp);
    let mut block_copies = 0u64;
    let mut bytes = 0u64;
    for node in &nodes {
        let (_, traffic) = node.handle.stats().await?;
        block_copies += traffic.block_copies;
        bytes += traffic.bytes_received;
    }
    for node in &nodes {
        node.endpoint.close(0u32.into(), b"bench done");
    }
    let rmr = if blocks_planned == 0 || n < 2 {
        0.0
    } else {
        block_copies as f64 / blocks_planned as f64 / (n - 1) as f64 - 1.0
    };
    Ok((
        RunReport {
            t50_ms: percentile_ms(&latencies, 50.0),
            t90_ms: percentile_ms(&latencies, 90.0),
            t99_ms: percentile_ms(&latencies, 99.0),
            missed,
            rmr,
            bytes_per_node: bytes as f64 / n as f64,
            hp_p99_ms: percentile_ms(&block_latencies_fast, 99.0),
        },
        missed,
    ))
}

fn policy(runtime: &Runtime, name: &str) -> anyhow::Result<GossipPolicyModule> {
    let bytes =
        modnode::artifacts::embedded(name).ok_or_else(|| anyhow::anyhow!("{name} not embedded"))?;
    match runtime.load(bytes)? {
        LinkedModule::GossipPolicy(m) => Ok(m),
        _ => anyhow::bail!("{name} is not a gossip policy"),
    }
}

/// Runs the benchmark.
pub fn run(params: &GossipParams) -> anyhow::Result<GossipReport> {
    anyhow::ensure!(params.nodes >= 2, "--nodes must be at least 2");
    anyhow::ensure!(params.degree >= 1, "--degree must be at least 1");
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let v1 = policy(&runtime, "gossip-policy-v1")?;
    let v2 = policy(&runtime, "gossip-policy-v2")?;
    let v3 = policy(&runtime, "gossip-policy-v3")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let none = vec![false; params.nodes];
        let mut rng = rand::rngs::StdRng::seed_from_u64(params.seed ^ 0x510);
        let mut slow = vec![false; params.nodes];
        let throttled = params.nodes / 4;
        while slow.iter().filter(|s| **s).count() < throttled {
            let i = rng.random_range(0..params.nodes);
            slow[i] = true;
        }
        let (mut floods, mut v2s, mut slows, mut ratios, mut slow_missed) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), 0);
        let (mut v3s, mut slows_v3, mut ratios_v3, mut slow_missed_v3) =
            (Vec::new(), Vec::new(), Vec::new(), 0);
        for round in 1..=params.repeat.max(1) {
            eprintln!("round {round}: flood (gossip-policy-v1) …");
            floods.push(run_once(params, &v1, &none).await?.0);
            eprintln!("round {round}: gossip-policy-v2 …");
            let (v2_report, _) = run_once(params, &v2, &none).await?;
            eprintln!("round {round}: gossip-policy-v2 with {throttled} throttled nodes …");
            let (slow_report, missed) = run_once(params, &v2, &slow).await?;
            ratios.push(slow_report.hp_p99_ms / v2_report.hp_p99_ms.max(f64::MIN_POSITIVE));
            slow_missed += missed;
            v2s.push(v2_report);
            slows.push(slow_report);
            eprintln!("round {round}: gossip-policy-v3 …");
            let (v3_report, _) = run_once(params, &v3, &none).await?;
            eprintln!("round {round}: gossip-policy-v3 with {throttled} throttled nodes …");
            let (slow_report, missed) = run_once(params, &v3, &slow).await?;
            ratios_v3.push(slow_report.hp_p99_ms / v3_report.hp_p99_ms.max(f64::MIN_POSITIVE));
            slow_missed_v3 += missed;
            v3s.push(v3_report);
            slows_v3.push(slow_report);
        }
        let v2_report = median_report(&v2s);
        let v3_report = median_report(&v3s);
        Ok(GossipReport {
            nodes: params.nodes,
            repeats: floods.len(),
            flood: median_report(&floods),
            slow25: SlowReport {
                hp_p99_ms: median(slows.iter().map(|r| r.hp_p99_ms).collect()),
                hp_p99_ms_unthrottled: v2_report.hp_p99_ms,
                missed: slow_missed,
                ratios,
                throttled,
                slow_bps: params.slow_bps,
            },
            v2: v2_report,
            slow25_v3: SlowReport {
                hp_p99_ms: median(slows_v3.iter().map(|r| r.hp_p99_ms).collect()),
                hp_p99_ms_unthrottled: v3_report.hp_p99_ms,
                missed: slow_missed_v3,
                ratios: ratios_v3,
                throttled,
                slow_bps: params.slow_bps,
            },
            v3: v3_report,
        })
    })
}

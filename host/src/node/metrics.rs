//! Counters of a running node and its status snapshot, rendered for the admin API (metrics
//! through `prometheus-client`). The node's own counters live here; each other part of a
//! scrape has its file, named for what it counts: [`state_cache`], [`checkpoints`],
//! [`modules`] (module versions, calls, faults, fuel, trials, breaker; build info),
//! [`deposits`] (a producer's deposit queue), [`disk`] (the data directory's bytes), [`gossip`] (duplicates, deliveries, traffic), [`import`] (block import latency) and [`sync`] (the
//! head against the slot clock, readiness); the `/status` snapshot is in [`status`].

mod checkpoints;
mod deposits;
mod disk;
mod gossip;
mod import;
mod modules;
mod state_cache;
mod status;
mod sync;

pub use checkpoints::render_checkpoints;
pub use deposits::render_deposit_queue;
pub use disk::{dir_bytes, render_disk};
pub use gossip::{GOSSIP_STATS_EVERY, GossipSnapshot, copy_gossip_stats, render_gossip};
pub use import::{observe_import, render_import};
pub use modules::{render_build_info, render_modules};
pub use state_cache::render_state_cache;
pub use status::{BanStatus, EquivocationStatus, NodeStatus, RestoreStatus};
pub use sync::{SyncFigures, render_sync};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::chain_worker::ChainView;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Monotonic counters and a few gauges, updated lock-free by the node's tasks.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Blocks this node produced.
    pub blocks_produced: AtomicU64,
    /// Blocks from gossip that extended or reorganised the chain.
    pub blocks_gossip_imported: AtomicU64,
    /// Blocks from range sync that were imported.
    pub blocks_synced: AtomicU64,
    /// Blocks refused (invalid, undecodable, from the future).
    pub blocks_rejected: AtomicU64,
    /// Hello exchanges that completed.
    pub handshakes_completed: AtomicU64,
    /// Peers refused because they are on another chain.
    pub wrong_chain_refusals: AtomicU64,
    /// Dials that failed (unreachable, wrong key, handshake failure).
    pub dial_failures: AtomicU64,
    /// Peers disconnected and banned for a protocol violation.
    pub peer_violations: AtomicU64,
    /// Of those, peers that sent a block from a slot beyond our clock plus the skew allowance
    /// (gossiped, or served for our range request).
    pub peer_future_blocks: AtomicU64,
    /// Of those, peers that answered one of our requests (range, module, peers, status) with a
    /// malformed answer: of the wrong kind, undecodable, over the size limit.
    pub peer_malformed_answers: AtomicU64,
    /// Peers whose handshake completed and that are still connected.
    pub peers_connected: AtomicU64,
    /// Entries of the largest per-peer table (range sync's heads, rejections and back-offs,
    /// the upgrade agent's readiness, fetch pacing and serve limits): never above the
    /// connected peers for long, whichever way peers leave.
    pub peer_table_entries: AtomicU64,
    /// Highest head any peer reported.
    pub sync_target_height: AtomicU64,
    /// Whether the node is behind its best peer by more than one block.
    pub syncing: AtomicBool,
    /// Whether the node has tried its known peers and synced from them since it started (or
    /// waited long enough): an authority produces only then.
    pub started_up: AtomicBool,
    /// Checkpoint requests this node answered.
    pub checkpoint_served: crate::checkpoint::ServeCounters,
    /// This node's own restore from a checkpoint.
    pub checkpoint_restore: RestoreCounters,
    /// The deposit follower's faults of its source (shared with the `DepositSource`).
    pub eth1_follower: std::sync::Arc<crate::deposit_source::FollowerCounters>,
    /// The gossip driver's counters as last copied ([`copy_gossip_stats`]).
    pub gossip: std::sync::Mutex<GossipSnapshot>,
    /// The peers this node bans, as recorded in its ban list ([`BanView`]).
    pub bans: BanView,
}

/// The peers a node bans and until when (unix ms): what `/status` lists, kept beside the ban
/// list on disk by every place that records a ban, so a scrape never reads the store. Holds at
/// most [`BanView::MAX`] entries (the earliest-ending dropped first) and drops expired ones as
/// it records.
#[derive(Debug, Default)]
pub struct BanView(std::sync::Mutex<std::collections::BTreeMap<[u8; 32], u64>>);

impl BanView {
    /// Most bans listed.
    pub const MAX: usize = 1_024;

    /// `node` is banned until `until_ms`; `now_ms` is now.
    pub fn record(&self, node: [u8; 32], until_ms: u64, now_ms: u64) {
        let Ok(mut bans) = self.0.lock() else {
            return;
        };
        bans.retain(|_, until| *until > now_ms);
        let until = bans.entry(node).or_insert(until_ms);
        *until = (*until).max(until_ms);
        while bans.len() > Self::MAX {
            let Some(first) = bans.iter().min_by_key(|(_, u)| **u).map(|(n, _)| *n) else {
                break;
            };
            bans.remove(&first);
        }
    }

    /// The bans still running at `now_ms`: (node, until unix ms), by node.
    pub fn live(&self, now_ms: u64) -> Vec<([u8; 32], u64)> {
        self.0.lock().map_or_else(
            |_| Vec::new(),
            |bans| {
                bans.iter()
                    .filter(|(_, until)| **until > now_ms)
                    .map(|(n, u)| (*n, *u))
                    .collect()
            },
        )
    }
}

/// Progress of restoring from a checkpoint (all zero when the node did not restore).
#[derive(Debug, Default)]
pub struct RestoreCounters {
    /// Height of the checkpoint being (or last) restored.
    pub height: AtomicU64,
    /// Chunks in it.
    pub chunks_total: AtomicU64,
    /// Chunks verified and stored, resumed ones included.
    pub chunks_verified: AtomicU64,
    /// Chunks found verified in the local progress at start (not fetched again).
    pub chunks_resumed: AtomicU64,
    /// Chunks fetched from peers and handed to verification (a chunk refused as bad and
    /// fetched again counts twice); answers not needed count in `chunks_duplicate`.
    pub chunks_fetched: AtomicU64,
    /// Chunk answers not needed: the chunk was already verified, or another peer's answer for
    /// it was being verified (a late answer to a request that timed out or was taken over).
    pub chunks_duplicate: AtomicU64,
    /// Verified chunks kept when the restore switched to another checkpoint (their bytes are
    /// listed by it and verify against it).
    pub chunks_carried_over: AtomicU64,
    /// Times the restore switched to another checkpoint (the one in progress was no longer
    /// offered, or was found bad).
    pub switches: AtomicU64,
    /// Chunk bytes fetched from peers (duplicate answers included).
    pub bytes_fetched: AtomicU64,
    /// Chunks refused (bad bytes); each penalised its sender.
    pub chunks_refused: AtomicU64,
    /// Peers penalised for serving bad chunks or malformed answers.
    pub peers_penalised: AtomicU64,
    /// Chunk requests that reached their deadline unanswered (the chunk went to another peer).
    pub requests_timed_out: AtomicU64,
    /// Chunks an idle faster peer took over from a slower one before its deadline.
    pub chunks_taken_over: AtomicU64,
    /// Peers offering the checkpoint being restored.
    pub peers: AtomicU64,
    /// Fetch rate over the restore so far, bytes per second.
    pub bytes_per_second: AtomicU64,
    /// Whether the restore finished and the chain starts from it.
    pub done: AtomicBool,
}

/// Adds one to a counter.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
    /// The counters and the chain view in the OpenMetrics text format (served with
    /// [`METRICS_CONTENT_TYPE`]), encoded by `prometheus-client`. Counter names end in `_total`.
    pub fn render(&self, view: &ChainView) -> String {
        use crate::modules_store::upload::refusals;
        use crate::runtime::Kind;
        use crate::runtime::bounds::over_bound;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let snapshot = Snapshot {
            counters: [
                (
                    "blocks_produced",
                    "Blocks this node produced",
                    load(&self.blocks_produced),
                ),
                (
                    "blocks_gossip_imported",
                    "Gossiped blocks imported",
                    load(&self.blocks_gossip_imported),
                ),
                (
                    "blocks_synced",
                    "Blocks imported by range sync",
                    load(&self.blocks_synced),
                ),
                (
                    "blocks_rejected",
                    "Blocks refused",
                    load(&self.blocks_rejected),
                ),
                (
                    "handshakes_completed",
                    "Peer handshakes completed",
                    load(&self.handshakes_completed),
                ),
                (
                    "wrong_chain_refusals",
                    "Peers refused for another chain id or genesis",
                    load(&self.wrong_chain_refusals),
                ),
                ("dial_failures", "Failed dials", load(&self.dial_failures)),
                (
                    "peer_violations",
                    "Peers banned for protocol violations",
                    load(&self.peer_violations),
                ),
                (
                    "peer_future_blocks",
                    "Peers banned for a block from a slot starting more than FAR_FUTURE_MS (10 s) beyond our clock",
                    load(&self.peer_future_blocks),
                ),
                (
                    "peer_malformed_answers",
                    "Peers banned for a malformed answer to one of our requests",
                    load(&self.peer_malformed_answers),
                ),
                (
                    "eth1_head_went_back",
                    "Polls at which the eth1 deposit source's head was lower than before",
                    load(&self.eth1_follower.head_went_back),
                ),
                (
                    "eth1_answers_too_large",
                    "eth1 endpoint answers refused as over the bound of what was asked for",
                    load(&self.eth1_follower.answers_too_large),
                ),
                (
                    "equivocations",
                    "Authorities found signing two blocks for one slot (evidence recorded)",
                    view.equivocations,
                ),
                (
                    "module_output_over_bound_deposits",
                    "Deposits module outputs refused as over the kind's bound",
                    over_bound(Kind::Deposits),
                ),
                (
                    "module_output_over_bound_checkpoint",
                    "Checkpoint module outputs refused as over the kind's bound",
                    over_bound(Kind::Checkpoint),
                ),
                (
                    "module_output_over_bound_gossip_policy",
                    "Gossip policy outputs refused as over the kind's bound",
                    over_bound(Kind::GossipPolicy),
                ),
                (
                    "module_refused_code_too_large",
                    "Modules refused before compiling: over a code limit read off the bytes",
                    refusals("code-too-large"),
                ),
                (
                    "module_refused_compile_too_slow",
                    "Modules whose compile was stopped at its deadline",
                    refusals("compile-too-slow"),
                ),
                (
                    "module_refused_wrong_signature",
                    "Modules whose exports do not match their world's function types",
                    refusals("wrong-signature"),
                ),
            ],
            gauges: [
                ("reorgs", "Branch switches since start", view.reorgs),
                ("head_height", "Height of the head", view.head.height),
                (
                    "finalized_height",
                    "Finalized height",
                    view.finalized_height,
                ),
                (
                    "validators",
                    "Validators in the head state",
                    u64::from(view.validators),
                ),
                (
                    "eth1_deposit_index",
                    "Deposits of the deposit contract applied by the head state",
                    view.deposit_index,
                ),
                (
                    "peers_connected",
                    "Connected peers",
                    load(&self.peers_connected),
                ),
                (
                    "peer_table_entries",
                    "Entries of the largest per-peer table",
                    load(&self.peer_table_entries),
                ),
                (
                    "sync_target_height",
                    "Highest head reported by a peer",
                    load(&self.sync_target_height),
                ),
                (
                    "syncing",
                    "1 while catching up",
                    u64::from(self.syncing.load(Ordering::Relaxed)),
                ),
            ]
            .map(|(name, help, value)| (name, help, as_i64(value))),
        };
        snapshot.encode_with_prefix("modnode")
    }
}
/// Content type of [`Metrics::render`]'s output (the admin API serves it with this type).
pub use crate::admin::METRICS_CONTENT_TYPE;

/// The values of one scrape (name, help, value) of one section of the scrape; the node's, the
/// state cache's, the checkpoints', the gossip, deposit-queue and disk sections all go through
/// it. Their `prometheus-client` metrics are registered once per section (see [`Families`]);
/// a scrape only sets the values and encodes.
#[derive(Debug)]
struct Snapshot<const C: usize, const G: usize> {
    counters: [(&'static str, &'static str, u64); C],
    gauges: [(&'static str, &'static str, i64); G],
}

impl<const C: usize, const G: usize> Snapshot<C, G> {
    /// These figures as OpenMetrics text under `prefix`, ending with `# EOF`: the section's
    /// families (registered on its first scrape) set to these values, then encoded. One lock
    /// covers setting and encoding, so concurrent scrapes (of one node or of several nodes in
    /// one process) each encode their own values.
    fn encode_with_prefix(self, prefix: &'static str) -> String {
        let key = SectionKey {
            prefix,
            names: self
                .counters
                .iter()
                .map(|(name, ..)| *name)
                .chain(self.gauges.iter().map(|(name, ..)| *name))
                .collect(),
        };
        let mut sections = SECTIONS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let families = sections
            .entry(key)
            .or_insert_with(|| Families::new(prefix, &self));
        families.encode(&self)
    }
}

/// Which section a set of [`Families`] belongs to: its prefix and its metric names in order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SectionKey {
    prefix: &'static str,
    names: Vec<&'static str>,
}

/// Every section's families, registered on the section's first scrape.
static SECTIONS: std::sync::Mutex<std::collections::BTreeMap<SectionKey, Families>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Sections registered so far in this process (each once).
#[cfg(test)]
fn registered_sections() -> usize {
    SECTIONS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .len()
}

/// One section's counters and gauges, registered once in its own `Registry`; a scrape sets
/// their values ([`Families::encode`]) and encodes the registry.
#[derive(Debug)]
struct Families {
    registry: Registry,
    counters: Vec<Counter>,
    gauges: Vec<Gauge>,
}

impl Families {
    /// A registry under `prefix` holding one counter or gauge per figure of `snapshot` (its
    /// values are set at each scrape).
    fn new<const C: usize, const G: usize>(prefix: &str, snapshot: &Snapshot<C, G>) -> Self {
        let described = Described {
            counters: snapshot
                .counters
                .iter()
                .map(|&(name, help, _)| (name, help, Counter::default()))
                .collect(),
            gauges: snapshot
                .gauges
                .iter()
                .map(|&(name, help, _)| (name, help, Gauge::default()))
                .collect(),
        };
        let counters = described.counters.iter().map(|(.., c)| c.clone()).collect();
        let gauges = described.gauges.iter().map(|(.., g)| g.clone()).collect();
        let mut registry = Registry::with_prefix(prefix);
        registry.register_collector(Box::new(described));
        Families {
            registry,
            counters,
            gauges,
        }
    }

    /// The registry as OpenMetrics text after setting every figure to `snapshot`'s value.
    fn encode<const C: usize, const G: usize>(&self, snapshot: &Snapshot<C, G>) -> String {
        for (counter, &(.., value)) in self.counters.iter().zip(&snapshot.counters) {
            counter.inner().store(value, Ordering::Relaxed);
        }
        for (gauge, &(.., value)) in self.gauges.iter().zip(&snapshot.gauges) {
            gauge.set(value);
        }
        let mut out = String::new();
        // Writing into a String cannot fail; the encoder only fails when its writer does.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// A section's metrics with their names and help texts, as the one collector of its registry
/// (a collector so that the help texts are written as given, as before).
#[derive(Debug)]
struct Described {
    counters: Vec<(&'static str, &'static str, Counter)>,
    gauges: Vec<(&'static str, &'static str, Gauge)>,
}

/// `text` without its closing `# EOF`: one section of the node's scrape, which carries the one
/// closing `# EOF` at its end.
pub(crate) fn without_eof(mut text: String) -> String {
    if let Some(at) = text.rfind("# EOF") {
        text.truncate(at);
    }
    text
}

/// A gauge value as `prometheus-client` takes it (clamped at `i64::MAX`).
fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Collector for Described {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, counter) in &self.counters {
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        for (name, help, gauge) in &self.gauges {
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Head;
    use crate::hashes::{BlockHash, StateRoot};

    #[test]
    fn the_ban_view_lists_running_bans_keeps_the_later_end_and_stays_bounded() {
        let view = BanView::default();
        view.record([1; 32], 2_000, 1_000);
        view.record([2; 32], 1_500, 1_000);
        // A shorter ban recorded later does not shorten a running one.
        view.record([1; 32], 1_200, 1_100);
        assert_eq!(view.live(1_000), vec![([1; 32], 2_000), ([2; 32], 1_500)]);
        // Expired bans are not listed, and are dropped at the next record.
        assert_eq!(view.live(1_600), vec![([1; 32], 2_000)]);
        view.record([3; 32], 3_000, 1_600);
        assert_eq!(view.live(0).len(), 2);
        // Never more than MAX: the earliest-ending goes first.
        for i in 0..BanView::MAX + 10 {
            let mut node = [9u8; 32];
            node[..8].copy_from_slice(&(i as u64).to_le_bytes());
            view.record(node, 10_000 + i as u64, 1_600);
        }
        let live = view.live(1_600);
        assert_eq!(live.len(), BanView::MAX);
        assert!(
            live.iter().all(|(_, until)| *until >= 10_010),
            "earliest ends dropped"
        );
    }

    #[test]
    fn render_is_openmetrics_with_every_counter_and_gauge() {
        let metrics = Metrics::default();
        bump(&metrics.blocks_produced);
        bump(&metrics.blocks_produced);
        metrics.syncing.store(true, Ordering::Relaxed);
        let view = ChainView {
            head: Head {
                hash: BlockHash::default(),
                height: 42,
                slot: 50,
                state_root: StateRoot::default(),
            },
            finalized_height: 10,
            served_from: 1,
            validators: 5,
            last_block_unix_ms: 0,
            deposit_index: 3,
            reorgs: 1,
            equivocations: 2,
            recent_evidence: [None; crate::chain::RECENT_EVIDENCE],
            import_stopped: None,
        };
        let text = metrics.render(&view);
        for line in [
            "# TYPE modnode_blocks_produced counter",
            "modnode_blocks_produced_total 2",
            "modnode_peer_violations_total 0",
            "modnode_peer_future_blocks_total 0",
            "modnode_peer_malformed_answers_total 0",
            "modnode_eth1_head_went_back_total 0",
            "modnode_eth1_answers_too_large_total 0",
            "modnode_equivocations_total 2",
            "# TYPE modnode_module_output_over_bound_gossip_policy counter",
            "# TYPE modnode_head_height gauge",
            "modnode_head_height 42",
            "modnode_finalized_height 10",
            "modnode_eth1_deposit_index 3",
            "modnode_syncing 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    /// `/status` says where import stopped and whose migration stopped it, and says nothing
    /// when it did not.
    #[test]
    fn status_shows_the_height_and_module_import_stopped_at() {
        let metrics = Metrics::default();
        let mut view = ChainView {
            head: Head {
                hash: BlockHash::default(),
                height: 5,
                slot: 5,
                state_root: StateRoot::default(),
            },
            finalized_height: 0,
            served_from: 1,
            validators: 1,
            last_block_unix_ms: 0,
            deposit_index: 0,
            reorgs: 0,
            equivocations: 0,
            recent_evidence: [None; crate::chain::RECENT_EVIDENCE],
            import_stopped: None,
        };
        let status = metrics.status("n".into(), "a".into(), &view);
        assert_eq!(status.import_stopped, None);
        let json = serde_json::to_value(&status).unwrap();
        assert!(json.get("import_stopped").is_none(), "{json}");
        view.import_stopped = Some(super::super::chain_worker::ImportStopped {
            height: 6,
            module: crate::hashes::ModuleHash([0xab; 32]),
        });
        let status = metrics.status("n".into(), "a".into(), &view);
        let stopped = status.import_stopped.clone().unwrap();
        assert_eq!(stopped.height, 6);
        assert_eq!(stopped.module.to_hex(), "ab".repeat(32));
        assert!(stopped.reason.contains("migration"), "{}", stopped.reason);
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["import_stopped"]["height"], 6);
    }

    /// A scrape registers nothing new after the first: each section's metrics are registered
    /// once and only set and encoded afterwards. Two nodes in one process, scraped in turn,
    /// each get their own values. (Before: every scrape built a new `Registry`.)
    #[test]
    fn scrapes_register_each_section_once_and_encode_their_own_values() {
        let view = |height| ChainView {
            head: Head {
                hash: BlockHash::default(),
                height,
                slot: height,
                state_root: StateRoot::default(),
            },
            finalized_height: 0,
            served_from: 1,
            validators: 1,
            last_block_unix_ms: 0,
            deposit_index: 0,
            reorgs: 0,
            equivocations: 0,
            recent_evidence: [None; crate::chain::RECENT_EVIDENCE],
            import_stopped: None,
        };
        let (a, b) = (Metrics::default(), Metrics::default());
        bump(&a.blocks_produced);
        let first = a.render(&view(7));
        render_disk(1);
        let registered = registered_sections();
        assert!(registered >= 2, "{registered} sections registered");
        for round in 0..3u64 {
            let text_b = b.render(&view(100 + round));
            let text_a = a.render(&view(7));
            assert!(
                text_b
                    .lines()
                    .any(|l| l == "modnode_blocks_produced_total 0")
            );
            assert!(text_b.contains(&format!("modnode_head_height {}\n", 100 + round)));
            assert_eq!(text_a, first);
            let disk = render_disk(round);
            assert!(
                disk.contains(&format!("modnode_data_dir_bytes {round}\n")),
                "{disk}"
            );
        }
        assert_eq!(
            registered_sections(),
            registered,
            "a scrape registered a section again"
        );
    }
}

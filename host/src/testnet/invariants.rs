//! [`Checker`]: the testnet's invariants, checked continuously on samples of every node.
//!
//! Pure bookkeeping, no I/O: the runner polls each node (head, finalized height, recent
//! canonical blocks, deposits, balances, bans, RSS), feeds the samples in as they come, and
//! acts on the [`Violation`]s each call returns. What is checked:
//!
//! - **Safety**: the first block any node reports at or below its finalized height becomes
//!   *the* finalized block of that height; a different block reported there later by any node at
//!   or below *its* finalized height (another node, or the same one reverting) is a
//!   [`Violation::FinalizedConflict`]. Unfinalized disagreement is a fork, counted, not a
//!   violation (a partitioned minority builds its own branch and must abandon it at the heal).
//!   One block hash with two state roots is a [`Violation::StateRootMismatch`] wherever seen.
//! - **Deposits**: the balance sum of a state that applied deposits `[0, count)` must not exceed
//!   the genesis balance plus their accepted amounts (more means a deposit applied twice); at
//!   [`Checker::finish`] every node's count must equal the submitted count (fewer: lost; more:
//!   applied deposits nobody submitted).
//! - **Bans, exits, logs, memory**: an honest node banning an honest node, an exit the runner did
//!   not cause, a panic or an ERROR line matching no allowed pattern, RSS over the bound.
//! - **Liveness**: after [`Checker::heal_at`], the time until every live node is on the same
//!   head (see [`Checker::record`]) is one convergence sample; a heal not converged within the
//!   bound (or by `finish` when the deadline was reached) is [`Violation::NotConverged`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::manifest::PerturbationKind;

mod checks;
mod violation;
pub use violation::Violation;

/// RSS a node may use before [`Violation::RssOverLimit`], unless [`Checker::with_rss_limit`].
pub const DEFAULT_RSS_LIMIT_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The log levels of `tracing`'s formatter.
const LEVELS: [&str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

/// One canonical block a node reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSeen {
    /// Its height.
    pub height: u64,
    /// Its hash (hex).
    pub hash: String,
    /// The state root after it (hex).
    pub state_root: String,
}

/// What one node reported at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When (ms since the run started, the runner's clock).
    pub at_ms: u64,
    /// Which node (index into the checker's node list).
    pub node: usize,
    /// Head height.
    pub head: u64,
    /// Finalized height.
    pub finalized: u64,
    /// Canonical blocks the node reports now; must include its head block for convergence, and
    /// the blocks at or below `finalized` it includes are checked for safety.
    pub blocks: Vec<BlockSeen>,
    /// Deposits applied in the node's head state.
    pub deposit_count: u64,
    /// Sum of validator balances in the head state.
    pub balance_sum_gwei: u128,
    /// Node ids this node has banned.
    pub banned: Vec<String>,
    /// Resident set size, if measured.
    pub rss_bytes: Option<u64>,
}

/// The checker's figures for the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckerSummary {
    /// Samples recorded.
    pub samples: u64,
    /// Highest head any node reported.
    pub max_head: u64,
    /// Highest finalized height any node reported.
    pub max_finalized: u64,
    /// Deposits the contract accepted.
    pub deposits_submitted: u64,
    /// The lowest latest deposit count over the nodes (what every node has applied).
    pub deposits_applied_everywhere: u64,
    /// Heights at which nodes reported two or more different canonical blocks.
    pub forks_seen: u64,
    /// Of those, heights since finalized (one block left, no conflict).
    pub forks_resolved: u64,
    /// Every convergence time after a heal, in ms, in order.
    pub convergence_ms: Vec<u64>,
    /// Median convergence time.
    pub convergence_p50_ms: Option<u64>,
    /// 99th percentile convergence time.
    pub convergence_p99_ms: Option<u64>,
    /// Every convergence after a heal split into its two parts, in order.
    pub convergences: Vec<Convergence>,
    /// Median time from catching up to agreeing (see [`Convergence::settle_ms`]).
    pub settle_p50_ms: Option<u64>,
    /// 99th percentile time from catching up to agreeing.
    pub settle_p99_ms: Option<u64>,
    /// Highest RSS of each node (None where never measured).
    pub max_rss_bytes: Vec<Option<u64>>,
    /// Distinct (banning node, banned node id) pairs seen.
    pub bans: u64,
    /// ERROR lines matched by an allowed pattern.
    pub explained_errors: u64,
    /// Violations by [`Violation::kind`].
    pub violations_by_kind: BTreeMap<String, u64>,
    /// Every violation's message, in order.
    pub violations: Vec<String>,
}

/// One convergence after a heal, split into the time the nodes needed to fetch what they missed
/// and the time they then needed to agree: the target "agree within a few slots of syncing what
/// was missed" is a bound on [`Convergence::settle_ms`], not on the total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Convergence {
    /// Heal to agreement (ms): `sync_ms + settle_ms`.
    pub total_ms: u64,
    /// Heal until every live node's head reached the highest head any node reported before the
    /// heal (ms): the blocks it missed, fetched and imported.
    pub sync_ms: u64,
    /// From then until every live node reported the same chain (ms): fork choice settling.
    pub settle_ms: u64,
    /// Highest head before the heal minus the lowest: the most blocks one node had to fetch.
    pub blocks_missed: u64,
    /// The perturbation that had just ended (absent for the final heal of the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<PerturbationKind>,
}

/// A heal whose convergence is being measured.
#[derive(Debug, Clone, Copy)]
struct Heal {
    at_ms: u64,
    /// The perturbation whose end this is (`None`: the final heal of everything).
    after: Option<PerturbationKind>,
    /// The highest head any live node reported before the heal.
    target: u64,
    /// The lowest one.
    lowest: u64,
    /// When every live node first reported a head at or above `target`.
    caught_up_ms: Option<u64>,
}

/// Per-node bookkeeping.
#[derive(Debug, Default)]
struct NodeState {
    latest: Option<Sample>,
    /// The node is down on purpose (killed or stopped by the runner) until its next sample.
    down: bool,
    max_rss: Option<u64>,
    rss_flagged: bool,
}

/// The finalized block of one height and who reported it first.
#[derive(Debug)]
struct Finalized {
    node: usize,
    hash: String,
}

/// Continuous invariant checker over the samples of a testnet's nodes.
#[derive(Debug)]
pub struct Checker {
    node_ids: Vec<String>,
    honest: Vec<bool>,
    nodes: Vec<NodeState>,
    allowed_errors: Vec<String>,
    rss_limit: u64,
    convergence_bound_ms: Option<u64>,
    genesis_balance: Option<u128>,
    /// `deposit_prefix[i]` = sum of accepted amounts of deposits `[0, i)`, while contiguous.
    deposit_prefix: Vec<u128>,
    /// Accepted deposits beyond a gap, waiting for it to fill.
    deposits_pending: BTreeMap<u64, u64>,
    finalized: BTreeMap<u64, Finalized>,
    /// First (node, root) seen for each block hash.
    roots: BTreeMap<String, (usize, String)>,
    /// Distinct hashes seen at each height.
    hashes_at: BTreeMap<u64, BTreeSet<String>>,
    bans_seen: BTreeSet<(usize, String)>,
    heal: Option<Heal>,
    heal_flagged: bool,
    convergence_ms: Vec<u64>,
    convergences: Vec<Convergence>,
    samples: u64,
    max_head: u64,
    max_finalized: u64,
    explained_errors: u64,
    violations: Vec<Violation>,
}

impl Checker {
    /// A checker for nodes `0..node_ids.len()`; `honest[i]` says whether node i is honest (a
    /// missing entry counts as honest).
    pub fn new(node_ids: Vec<String>, honest: Vec<bool>) -> Self {
        let nodes = (0..node_ids.len()).map(|_| NodeState::default()).collect();
        Self {
            node_ids,
            honest,
            nodes,
            allowed_errors: Vec::new(),
            rss_limit: DEFAULT_RSS_LIMIT_BYTES,
            convergence_bound_ms: None,
            genesis_balance: None,
            deposit_prefix: vec![0],
            deposits_pending: BTreeMap::new(),
            finalized: BTreeMap::new(),
            roots: BTreeMap::new(),
            hashes_at: BTreeMap::new(),
            bans_seen: BTreeSet::new(),
            heal: None,
            heal_flagged: false,
            convergence_ms: Vec::new(),
            convergences: Vec::new(),
            samples: 0,
            max_head: 0,
            max_finalized: 0,
            explained_errors: 0,
            violations: Vec::new(),
        }
    }

    /// ERROR lines containing any of these substrings are explained (e.g. the error a node
    /// logs when a peer the runner killed drops its connection).
    pub fn with_allowed_errors(mut self, patterns: Vec<String>) -> Self {
        self.allowed_errors = patterns;
        self
    }

    /// The RSS bound per node (default [`DEFAULT_RSS_LIMIT_BYTES`]).
    pub fn with_rss_limit(mut self, bytes: u64) -> Self {
        self.rss_limit = bytes;
        self
    }

    /// Flag [`Violation::NotConverged`] as soon as a heal is this old without convergence
    /// (default: only at [`Checker::finish`]).
    pub fn with_convergence_bound(mut self, ms: u64) -> Self {
        self.convergence_bound_ms = Some(ms);
        self
    }

    /// The genesis state's balance sum; without it the double-deposit check learns it from the
    /// first sample with no deposits applied (and is off until then).
    pub fn with_genesis_balance(mut self, gwei: u128) -> Self {
        self.genesis_balance = Some(gwei);
        self
    }

    /// The contract accepted deposit `index` of `amount_gwei`. Repeats of an index are ignored.
    pub fn deposit_submitted(&mut self, index: u64, amount_gwei: u64) {
        let next = u64::try_from(self.deposit_prefix.len().saturating_sub(1)).unwrap_or(u64::MAX);
        if index < next {
            return;
        }
        self.deposits_pending.entry(index).or_insert(amount_gwei);
        while let Some(amount) = self.deposits_pending.remove(&self.submitted()) {
            let sum = self.deposit_prefix.last().copied().unwrap_or(0);
            self.deposit_prefix
                .push(sum.saturating_add(u128::from(amount)));
        }
    }

    /// Deposits accepted so far without a gap.
    pub fn submitted(&self) -> u64 {
        u64::try_from(self.deposit_prefix.len().saturating_sub(1)).unwrap_or(u64::MAX)
    }

    /// The runner healed every fault at `at_ms`: convergence is measured from here.
    pub fn heal_at(&mut self, at_ms: u64) {
        self.heal_after(at_ms, None);
    }

    /// As [`Checker::heal_at`], after a perturbation of kind `after` ended: its convergence
    /// names the kind, so a slow one can be told apart.
    pub fn heal_after(&mut self, at_ms: u64, after: Option<PerturbationKind>) {
        let heads = self
            .nodes
            .iter()
            .filter(|n| !n.down)
            .filter_map(|n| n.latest.as_ref().map(|s| s.head));
        let (target, lowest) = heads.fold((0, u64::MAX), |(hi, lo), h| (hi.max(h), lo.min(h)));
        self.heal = Some(Heal {
            at_ms,
            after,
            target,
            lowest: lowest.min(target),
            caught_up_ms: None,
        });
        self.heal_flagged = false;
    }

    /// Checks one sample against everything seen so far. A sample for an unknown node is
    /// ignored.
    pub fn record(&mut self, s: &Sample) -> Vec<Violation> {
        let mut found = Vec::new();
        if s.node >= self.nodes.len() {
            return found;
        }
        self.samples = self.samples.saturating_add(1);
        self.max_head = self.max_head.max(s.head);
        self.max_finalized = self.max_finalized.max(s.finalized);
        self.check_blocks(s, &mut found);
        self.check_deposits(s, &mut found);
        self.check_bans(s, &mut found);
        self.check_rss(s, &mut found);
        if let Some(state) = self.nodes.get_mut(s.node) {
            state.latest = Some(s.clone());
            state.down = false;
        }
        self.check_convergence(s.at_ms, &mut found);
        self.violations.extend(found.iter().cloned());
        found
    }

    /// Node `node`'s process ended; `expected` when the runner ended it.
    pub fn node_exited(&mut self, node: usize, expected: bool) -> Vec<Violation> {
        if let Some(state) = self.nodes.get_mut(node) {
            state.down = true;
        }
        if expected {
            return Vec::new();
        }
        self.push(vec![Violation::UnexpectedExit {
            node: self.name(node),
        }])
    }

    /// One line of node `node`'s log.
    pub fn log_line(&mut self, node: usize, line: &str) -> Vec<Violation> {
        let plain = strip_ansi(line);
        if plain.contains("panicked at") {
            return self.push(vec![Violation::Panic {
                node: self.name(node),
                line: plain,
            }]);
        }
        // The level is the first level word near the start (after the timestamp).
        let level = plain
            .split_whitespace()
            .take(3)
            .find(|word| LEVELS.contains(word));
        if level != Some("ERROR") {
            return Vec::new();
        }
        if self.allowed_errors.iter().any(|p| plain.contains(p)) {
            self.explained_errors = self.explained_errors.saturating_add(1);
            return Vec::new();
        }
        self.push(vec![Violation::UnexplainedError {
            node: self.name(node),
            line: plain,
        }])
    }

    /// The end of the run: lost or unknown deposits on every node, and a heal not converged when
    /// `converge_deadline_reached` (the runner waited the whole bound).
    pub fn finish(&mut self, converge_deadline_reached: bool) -> Vec<Violation> {
        let mut found = Vec::new();
        let submitted = self.submitted();
        for (node, state) in self.nodes.iter().enumerate() {
            let Some(latest) = &state.latest else {
                continue;
            };
            let count = latest.deposit_count;
            if count < submitted {
                found.push(Violation::DepositLost {
                    node: self.name(node),
                    count,
                    submitted,
                });
            } else if count > submitted {
                found.push(Violation::DepositUnknown {
                    node: self.name(node),
                    count,
                    submitted,
                });
            }
        }
        if converge_deadline_reached
            && !self.heal_flagged
            && let Some(heal_ms) = self.heal.map(|h| h.at_ms)
        {
            let now = self.latest_at_ms();
            found.push(self.not_converged(heal_ms, now));
            self.heal_flagged = true;
        }
        self.push(found)
    }

    /// Every violation found so far, in order.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// The figures for the report.
    pub fn summary(&self) -> CheckerSummary {
        let mut by_kind = BTreeMap::new();
        for v in &self.violations {
            let count: &mut u64 = by_kind.entry(v.kind().to_string()).or_default();
            *count = count.saturating_add(1);
        }
        let forks: Vec<u64> = self
            .hashes_at
            .iter()
            .filter(|(_, hashes)| hashes.len() > 1)
            .map(|(height, _)| *height)
            .collect();
        let resolved = forks
            .iter()
            .filter(|h| self.finalized.contains_key(h))
            .count();
        let mut sorted = self.convergence_ms.clone();
        sorted.sort_unstable();
        let mut settle: Vec<u64> = self.convergences.iter().map(|c| c.settle_ms).collect();
        settle.sort_unstable();
        CheckerSummary {
            samples: self.samples,
            max_head: self.max_head,
            max_finalized: self.max_finalized,
            deposits_submitted: self.submitted(),
            deposits_applied_everywhere: self
                .nodes
                .iter()
                .filter_map(|n| n.latest.as_ref().map(|s| s.deposit_count))
                .min()
                .unwrap_or(0),
            forks_seen: u64::try_from(forks.len()).unwrap_or(u64::MAX),
            forks_resolved: u64::try_from(resolved).unwrap_or(u64::MAX),
            convergence_ms: self.convergence_ms.clone(),
            convergence_p50_ms: percentile(&sorted, 50),
            convergence_p99_ms: percentile(&sorted, 99),
            convergences: self.convergences.clone(),
            settle_p50_ms: percentile(&settle, 50),
            settle_p99_ms: percentile(&settle, 99),
            max_rss_bytes: self.nodes.iter().map(|n| n.max_rss).collect(),
            bans: u64::try_from(self.bans_seen.len()).unwrap_or(u64::MAX),
            explained_errors: self.explained_errors,
            violations_by_kind: by_kind,
            violations: self.violations.iter().map(ToString::to_string).collect(),
        }
    }

    fn push(&mut self, found: Vec<Violation>) -> Vec<Violation> {
        self.violations.extend(found.iter().cloned());
        found
    }

    /// `node 3 (ab12cd34)`: index and the start of its id.
    fn name(&self, node: usize) -> String {
        match self.node_ids.get(node) {
            Some(id) => format!("node {node} ({})", id.get(..8).unwrap_or(id)),
            None => format!("node {node}"),
        }
    }

    fn is_honest(&self, node: usize) -> bool {
        self.honest.get(node).copied().unwrap_or(true)
    }
}

/// Whether the samples agree on the block at their lowest head, with heads at most one apart.
fn same_chain(samples: &[&Sample]) -> bool {
    let Some(low) = samples.iter().map(|s| s.head).min() else {
        return false;
    };
    let high = samples.iter().map(|s| s.head).max().unwrap_or(low);
    if high.saturating_sub(low) > 1 {
        return false;
    }
    let mut hashes = samples.iter().map(|s| {
        s.blocks
            .iter()
            .find(|b| b.height == low)
            .map(|b| b.hash.as_str())
    });
    let Some(Some(first)) = hashes.next() else {
        return false;
    };
    hashes.all(|h| h == Some(first))
}

/// The `p`th percentile (nearest rank) of sorted values.
pub fn percentile(sorted: &[u64], p: u64) -> Option<u64> {
    let n = u64::try_from(sorted.len()).ok()?;
    if n == 0 {
        return None;
    }
    // Nearest rank: ceil(p/100 * n), at least 1.
    let rank = p.checked_mul(n)?.div_ceil(100).max(1);
    let index = usize::try_from(rank.checked_sub(1)?).ok()?;
    sorted.get(index).or(sorted.last()).copied()
}

/// The line without terminal colour codes (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;

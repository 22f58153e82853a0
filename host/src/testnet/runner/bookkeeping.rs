//! What the runner does with what it observes: samples into the checker (with RSS and the bans
//! each node lists in `/status`, plus any a log line announced since), log lines, process
//! exits, convergence, progress lines and the report.

use super::poll::Observation;
use super::{Outcome, RunnerError, Testnet};
use crate::testnet::invariants::{BlockSeen, Sample};
use crate::testnet::report;

/// How long a node gets to stop cleanly at the end before `kill -9`.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

impl Testnet {
    /// Starts node `i` (first start: `sync`).
    pub(super) fn start_node(&mut self, i: usize, sync: &str) -> Result<(), RunnerError> {
        if let Some(node) = self.nodes.get_mut(i) {
            node.start(sync, 0)?;
        }
        if let Some(started) = self.ever_started.get_mut(i) {
            *started = true;
        }
        Ok(())
    }

    /// One poll's observation of a node, checked at once.
    pub(super) fn observe(&mut self, now: u64, o: Observation) {
        let node = o.node;
        let rss = self.nodes.get(node).and_then(|n| n.rss_bytes());
        if let Some(rss) = rss {
            self.max_rss = self.max_rss.max(rss);
        }
        let sample = Sample {
            at_ms: now,
            node,
            head: o.head,
            finalized: o.finalized,
            blocks: o
                .blocks
                .iter()
                .map(|b| BlockSeen {
                    height: b.height,
                    hash: b.hash.clone(),
                    state_root: b.state_root.clone(),
                })
                .collect(),
            deposit_count: o.deposit_count,
            balance_sum_gwei: o.balance_sum_gwei,
            banned: {
                // The bans the node lists, and those its log announced (a ban lifted between
                // two polls is still seen).
                let mut banned = o.banned.clone();
                for id in self.banned.get(node).into_iter().flatten() {
                    if !banned.contains(id) {
                        banned.push(id.clone());
                    }
                }
                banned
            },
            rss_bytes: rss,
        };
        let found = self.checker.record(&sample);
        self.violation(found);
        self.timeline.samples.push((now, node, o.head));
        if let Some(last) = self.last.get_mut(node) {
            *last = Some(o);
        }
    }

    /// A node's log line: to the checker, and bans read off it.
    pub(super) fn log_line(&mut self, line: crate::testnet::node_process::LogLine) {
        if line.line.contains("banning peer")
            && let Some(short) = line
                .line
                .split("peer=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            && let Some(banned) = self.short_ids.iter().position(|s| s == short)
            && let (Some(id), Some(list)) = (
                self.node_ids.get(banned).cloned(),
                self.banned.get_mut(line.node),
            )
            && !list.contains(&id)
        {
            list.push(id);
        }
        let found = self.checker.log_line(line.node, &line.line);
        self.violation(found);
    }

    /// A process that exited without the runner killing it is a violation.
    pub(super) fn check_exits(&mut self) {
        let mut exited = Vec::new();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if let Some(status) = node.exited() {
                exited.push((i, status));
            }
        }
        for (i, status) in exited {
            self.progress(&format!("node {i} exited on its own: {status}"));
            let found = self.checker.node_exited(i, false);
            self.violation(found);
        }
    }

    /// Every running node's latest observation, taken after the last heal, shows one block
    /// at the lowest head among them, heads at most two apart, and every accepted deposit.
    pub(super) fn converged(&self, deposits_accepted: u64) -> bool {
        let running: Vec<&Observation> = self
            .nodes
            .iter()
            .zip(&self.last)
            .filter(|(n, _)| n.is_running())
            .filter_map(|(_, o)| o.as_ref())
            .collect();
        if running.len() != self.nodes.iter().filter(|n| n.is_running()).count()
            || running.is_empty()
        {
            return false;
        }
        let Some(low) = running.iter().map(|o| o.head).min() else {
            return false;
        };
        let high = running.iter().map(|o| o.head).max().unwrap_or(low);
        let at_low: Vec<Option<&str>> = running
            .iter()
            .map(|o| {
                o.blocks
                    .iter()
                    .find(|b| b.height == low)
                    .map(|b| b.hash.as_str())
            })
            .collect();
        let same = at_low
            .iter()
            .all(|h| h.is_some() && *h == at_low.first().copied().flatten());
        same && high.saturating_sub(low) <= 2
            && running.iter().all(|o| o.deposit_count >= deposits_accepted)
    }

    /// One progress line: heads, deposits, violations, relay traffic.
    pub(super) fn status_line(&self, deposits_accepted: u64) -> String {
        let heads: Vec<String> = self
            .last
            .iter()
            .zip(&self.nodes)
            .map(|(o, n)| match (o, n.is_running(), n.is_paused()) {
                (_, false, _) => "-".to_string(),
                (_, true, true) => "z".to_string(),
                (Some(o), true, false) => format!("{}", o.head),
                (None, true, false) => "?".to_string(),
            })
            .collect();
        let applied = self
            .last
            .iter()
            .flatten()
            .map(|o| o.deposit_count)
            .min()
            .unwrap_or(0);
        let stats = self.relay.stats();
        format!(
            "heads [{}] deposits accepted {deposits_accepted} applied (min) {applied} \
             violations {} relay forwarded {} dropped {}",
            heads.join(" "),
            self.violations.len(),
            stats.total.forwarded,
            stats.total.dropped
        )
    }

    /// Stops every node, finishes the checks and writes the report.
    pub(super) async fn finish(mut self, converged: bool) -> Result<Outcome, RunnerError> {
        let found = self.checker.finish(!converged);
        self.violation(found);
        let mut active_deposits = Vec::new();
        for node in &self.nodes {
            active_deposits.push(if node.is_running() {
                active_deposits_module(node.data_dir()).await
            } else {
                None
            });
        }
        let relay_stats = self.relay.stats();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if node.is_running() && node.stop(STOP_GRACE).is_none() {
                eprintln!("node {i} did not stop within {STOP_GRACE:?}; killed");
            }
        }
        let summary = self.checker.summary();
        let duration_ms = u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut rep = report::Report::new(
            self.nodes.len(),
            self.manifest.seed,
            duration_ms,
            &self.timeline,
            &summary,
        );
        rep.relay = Some(relay_stats.total);
        // The runner's own findings (a violation found outside the checker) are the same list.
        rep.violations.clone_from(&self.violations);
        let out = self.options.out_dir.clone();
        let json_path = rep
            .write(&out, &self.timeline)
            .map_err(|e| RunnerError::Report(e.to_string()))?;
        let png_path = rep
            .timeline_png
            .clone()
            .unwrap_or_else(|| out.join("timeline.png"));
        self.relay.shutdown().await;
        Ok(Outcome {
            violations: self.violations,
            converged,
            converge_ms: self.converge_ms,
            deposits_accepted: self.deposits_accepted,
            final_nodes: self
                .last
                .iter()
                .map(|o| o.as_ref().map(|o| (o.head, o.deposit_count)))
                .collect(),
            perturbations: self.applied,
            upgrades: self
                .timeline
                .upgrades
                .iter()
                .map(|(_, height, label)| (*height, label.clone()))
                .collect(),
            active_deposits,
            relay: relay_stats,
            report_json: json_path,
            report_png: png_path,
        })
    }
}

/// The deposits module the node on `dir` runs now: its embedded name, else its hash.
async fn active_deposits_module(dir: &std::path::Path) -> Option<String> {
    let target = crate::admin::client::Target::data_dir(dir).ok()?;
    let listing = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        crate::admin::client::modules(&target),
    )
    .await
    .ok()?
    .ok()?;
    let hash = super::actions::active_hash(&listing, "deposits")?;
    Some(
        ["deposits-v1", "deposits-v2"]
            .into_iter()
            .find(|m| super::embedded_hash(m).is_some_and(|(h, _)| h == hash))
            .map_or(hash, str::to_string),
    )
}

//! Applying perturbations: what starting and ending each kind does to the processes, the
//! relay and the chain (a deposits upgrade voted by a majority of the authorities, a
//! gossip-policy live swap).

use std::path::PathBuf;
use std::time::Duration;

use super::{Event, Testnet};
use crate::admin::client::{self, Target};
use crate::runtime::Mode;
use crate::testnet::manifest::PerturbationKind;
use crate::testnet::relay::LinkFaults;
use sha2::Digest as _;

/// Faults on a node's links during [`PerturbationKind::BadLinks`].
fn bad_link() -> LinkFaults {
    LinkFaults {
        delay: Duration::from_millis(40),
        jitter: Duration::from_millis(30),
        loss: 0.1,
        duplicate: 0.05,
        reorder: 0.1,
        blocked: false,
    }
}

/// `sync` a restarted node uses: `auto` restores a checkpoint when far behind.
const RESTART_SYNC: &str = "auto";

/// The sha256 (hex) of an embedded module.
pub fn embedded_hash(name: &str) -> Option<(String, &'static [u8])> {
    let bytes = crate::artifacts::embedded(name)?;
    Some((hex::encode(sha2::Sha256::digest(bytes)), bytes))
}

impl Testnet {
    /// Starts perturbation `index` of the plan.
    pub(super) fn start_perturbation(&mut self, index: usize) {
        let Some(p) = self.schedule.plan().get(index).cloned() else {
            return;
        };
        self.progress(&format!(
            "start {} on {:?} for {:.1} s",
            p.kind.name(),
            p.targets,
            p.end_ms.saturating_sub(p.start_ms) as f64 / 1000.0
        ));
        match p.kind {
            PerturbationKind::Kill => {
                for t in &p.targets {
                    self.with_node(*t, |n| n.kill());
                    self.checker.node_exited(*t, true);
                }
            }
            PerturbationKind::Pause => {
                for t in &p.targets {
                    self.with_node(*t, |n| n.pause());
                }
            }
            PerturbationKind::PartitionMinority
            | PerturbationKind::PartitionMajority
            | PerturbationKind::PartitionAuthority => self.relay.partition(&p.targets),
            PerturbationKind::Wipe => {
                for t in &p.targets {
                    if let Some(node) = self.nodes.get_mut(*t)
                        && let Err(e) = node.wipe()
                    {
                        self.progress(&format!("wipe failed (ours): {e}"));
                    }
                    self.checker.node_exited(*t, true);
                }
            }
            PerturbationKind::ClockSkew => {
                for t in &p.targets {
                    self.restart(*t, p.skew_ms);
                }
            }
            PerturbationKind::BadLinks => {
                for t in &p.targets {
                    for other in (0..self.nodes.len()).filter(|o| o != t) {
                        self.relay.set(*t, other, bad_link());
                        self.relay.set(other, *t, bad_link());
                    }
                }
            }
            PerturbationKind::DepositsUpgrade => self.deposits_upgrade(),
            PerturbationKind::PolicySwap => self.policy_swap(&p.targets),
        }
    }

    /// Ends perturbation `index`: heals, resumes, restarts.
    pub(super) fn end_perturbation(&mut self, index: usize) {
        let Some(p) = self.schedule.plan().get(index).cloned() else {
            return;
        };
        match p.kind {
            PerturbationKind::Kill | PerturbationKind::Wipe => {
                for t in &p.targets {
                    if self.started(*t) {
                        self.restart(*t, 0);
                    }
                }
            }
            PerturbationKind::Pause => {
                for t in &p.targets {
                    self.with_node(*t, |n| n.resume());
                }
            }
            PerturbationKind::PartitionMinority
            | PerturbationKind::PartitionMajority
            | PerturbationKind::PartitionAuthority => self.relay.heal(),
            PerturbationKind::ClockSkew => {
                for t in &p.targets {
                    self.restart(*t, 0);
                }
            }
            PerturbationKind::BadLinks => {
                for t in &p.targets {
                    for other in (0..self.nodes.len()).filter(|o| o != t) {
                        self.relay.set(*t, other, LinkFaults::default());
                        self.relay.set(other, *t, LinkFaults::default());
                    }
                }
            }
            // Effects on chain or in a slot: nothing to undo.
            PerturbationKind::DepositsUpgrade | PerturbationKind::PolicySwap => return,
        }
        self.healed(p.kind);
    }

    /// `kill -9` node `t` if running and start it again (`skew_ms` on its clock).
    pub(super) fn restart(&mut self, t: usize, skew_ms: i64) {
        if !self.started(t) {
            return;
        }
        let outcome = self.nodes.get_mut(t).map(|n| {
            n.kill();
            n.start(RESTART_SYNC, skew_ms)
        });
        // Down on purpose until its next sample.
        self.checker.node_exited(t, true);
        if let Some(Err(e)) = outcome {
            self.progress(&format!("restart of node {t} failed (ours): {e}"));
        }
    }

    fn with_node(
        &mut self,
        t: usize,
        f: impl FnOnce(&mut crate::testnet::node_process::NodeProcess),
    ) {
        if self.started(t)
            && let Some(node) = self.nodes.get_mut(t)
        {
            f(node);
        }
    }

    /// A deposits upgrade: the module the manifest names, or (random ones) the version the
    /// chain does not run now, uploaded to a majority of the authorities and proposed by each
    /// at a height `after_blocks` ahead. Runs as a task; reports through events.
    fn deposits_upgrade(&mut self) {
        let spec = self.manifest.upgrade.clone();
        let majority = (self.manifest.authorities / 2).saturating_add(1);
        let lead = self.upgrade_lead_blocks;
        let first_listed = !self.upgrade_listed_done && spec.is_some();
        self.upgrade_listed_done = true;
        let (module, height, after) = match (&spec, first_listed) {
            (Some(spec), true) => (Some(spec.module.clone()), spec.height, spec.after_blocks),
            // Alternate: the task reads the active one and proposes the other.
            _ => (None, None, Some(lead.saturating_mul(2).saturating_add(8))),
        };
        // Running authorities, in order (a paused or killed one cannot vote now).
        let dirs: Vec<PathBuf> = (0..self.manifest.authorities)
            .filter(|a| {
                self.nodes
                    .get(*a)
                    .is_some_and(|n| n.is_running() && !n.is_paused())
            })
            .filter_map(|a| self.nodes.get(a).map(|n| n.data_dir().to_path_buf()))
            .collect();
        let events = self.events_tx.clone();
        let at_ms = self.now_ms();
        tokio::spawn(async move {
            let outcome =
                propose_upgrade(&dirs, majority, module, height, after.unwrap_or(0), lead).await;
            let event = match outcome {
                Ok((label, height)) => Event::Upgrade {
                    at_ms,
                    height,
                    label,
                },
                Err(why) => Event::Note(format!("deposits upgrade not proposed: {why}")),
            };
            let _ = events.send(event).await;
        });
    }

    /// A live swap of the gossip policy on `targets`: each switches to the embedded version it
    /// does not run now.
    fn policy_swap(&mut self, targets: &[usize]) {
        let dirs: Vec<(usize, PathBuf)> = targets
            .iter()
            .filter(|t| {
                self.nodes
                    .get(**t)
                    .is_some_and(|n| n.is_running() && !n.is_paused())
            })
            .filter_map(|t| self.nodes.get(*t).map(|n| (*t, n.data_dir().to_path_buf())))
            .collect();
        let first = self
            .manifest
            .policy_swap
            .as_ref()
            .map(|s| s.module.clone())
            .unwrap_or_else(|| "gossip-policy-v1".into());
        let events = self.events_tx.clone();
        tokio::spawn(async move {
            for (node, dir) in dirs {
                let note = match swap_policy(&dir, &first).await {
                    Ok(module) => format!("node {node} now gossips with {module}"),
                    Err(why) => format!("policy swap on node {node} failed: {why}"),
                };
                let _ = events.send(Event::Note(note)).await;
            }
        });
    }
}

/// Uploads and proposes on the first `majority` of `dirs` that accept; (label, height).
async fn propose_upgrade(
    dirs: &[PathBuf],
    majority: usize,
    module: Option<String>,
    height: Option<u64>,
    after_blocks: u64,
    lead: u64,
) -> Result<(String, u64), String> {
    let first = dirs.first().ok_or("no authority is running")?;
    let target = Target::data_dir(first).map_err(|e| e.to_string())?;
    let module = match module {
        Some(m) => m,
        None => {
            let listing = client::modules(&target).await.map_err(|e| e.to_string())?;
            let active = active_hash(&listing, "deposits").unwrap_or_default();
            let v1 = embedded_hash("deposits-v1")
                .map(|h| h.0)
                .unwrap_or_default();
            if active == v1 {
                "deposits-v2"
            } else {
                "deposits-v1"
            }
            .to_string()
        }
    };
    let (hash, bytes) = embedded_hash(&module).ok_or(format!("{module} is not embedded"))?;
    // Uploads first, all at once (each node validates, compiles and warms it: seconds), so
    // the height counted from the head below is still ahead when the votes are cast.
    let mut uploads = tokio::task::JoinSet::new();
    for dir in dirs.iter().cloned() {
        uploads.spawn(async move {
            let target = Target::data_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            tokio::time::timeout(
                Duration::from_secs(120),
                client::upload_module(&target, bytes.to_vec()),
            )
            .await
            .map_err(|_| format!("upload to {}: no answer within 120 s", dir.display()))?
            .map_err(|e| format!("upload to {}: {e}", dir.display()))?;
            Ok::<_, String>(dir)
        });
    }
    let mut ready = Vec::new();
    let mut refusals = Vec::new();
    while let Some(joined) = uploads.join_next().await {
        match joined {
            Ok(Ok(dir)) => ready.push(dir),
            Ok(Err(why)) => refusals.push(why),
            Err(e) => refusals.push(format!("upload task failed: {e}")),
        }
    }
    ready.sort();
    let height = match height {
        Some(h) => h,
        None => {
            let status = client::node_status(&target)
                .await
                .map_err(|e| e.to_string())?;
            let head = status.get("height").and_then(|h| h.as_u64()).unwrap_or(0);
            head.saturating_add(lead).saturating_add(after_blocks)
        }
    };
    let mut voted = 0usize;
    for dir in &ready {
        if voted >= majority {
            break;
        }
        let Ok(target) = Target::data_dir(dir) else {
            continue;
        };
        match client::propose_upgrade(&target, "upgrade", "deposits", &hash, height).await {
            Ok(_) => voted = voted.saturating_add(1),
            Err(e) => refusals.push(format!("{}: {e}", dir.display())),
        }
    }
    if voted < majority {
        return Err(format!(
            "{voted} of the {majority} votes needed for {module} at {height}: {}",
            refusals.join("; ")
        ));
    }
    Ok((module, height))
}

/// The active module's hash of `kind` in a `GET /modules` listing.
pub(super) fn active_hash(listing: &serde_json::Value, kind: &str) -> Option<String> {
    listing
        .get("kinds")?
        .as_array()?
        .iter()
        .find(|k| k.get("kind").and_then(|v| v.as_str()) == Some(kind))?
        .get("slot")?
        .get("active")?
        .get("hash")?
        .as_str()
        .map(str::to_string)
}

/// Activates live the embedded policy the node on `dir` does not run (`preferred` first).
async fn swap_policy(dir: &std::path::Path, preferred: &str) -> Result<String, String> {
    let target = Target::data_dir(dir).map_err(|e| e.to_string())?;
    let listing = client::modules(&target).await.map_err(|e| e.to_string())?;
    let active = active_hash(&listing, "gossip-policy").unwrap_or_default();
    let other = if preferred.ends_with("v1") {
        "gossip-policy-v2"
    } else {
        "gossip-policy-v1"
    };
    let module = [preferred, other]
        .into_iter()
        .find(|m| embedded_hash(m).is_some_and(|(h, _)| h != active))
        .ok_or("no other embedded gossip policy")?;
    let (hash, _) = embedded_hash(module).ok_or("not embedded")?;
    client::activate_module(&target, &hash, Mode::Live)
        .await
        .map_err(|e| e.to_string())?;
    Ok(module.to_string())
}

//! The testnet manifest (TOML): the network, how long it runs, what goes wrong and when.
//!
//! ```toml
//! nodes = 5
//! authorities = 3
//! slot_ms = 500
//! finality_depth = 48
//! duration_s = 120
//! seed = 7
//! deposits_per_s = 1.0
//!
//! [late_joiner]            # optional: the last node starts late, by checkpoint sync
//! at_s = 40
//!
//! [[perturbation]]         # listed perturbations …
//! at_s = 20
//! kind = "kill"
//! targets = [1]
//! duration_s = 5
//!
//! [random]                 # … and/or seeded random ones
//! every_s = [20, 30]
//! duration_s = [5, 12]
//! kinds = ["kill", "pause", "partition-minority"]
//!
//! [upgrade]                # a deposits upgrade voted by a majority of the authorities
//! at_s = 30
//! module = "deposits-v2"
//! after_blocks = 12        # or: height = 80
//!
//! [policy_swap]            # a gossip-policy live swap on half the nodes
//! at_s = 50
//! module = "gossip-policy-v1"
//! ```
//!
//! Unknown keys are refused with the key named (`serde(deny_unknown_fields)`), so a typo never
//! silently turns a perturbation off.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Why a manifest was refused (the manifest author's fault; the message says what to change).
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("cannot read the testnet manifest {path}: {source}")]
    Read {
        /// The manifest.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML does not parse or has an unknown or missing key (the message names it).
    #[error("testnet manifest {origin}: {message}")]
    Parse {
        /// The file (or `<inline>`).
        origin: String,
        /// The parser's message, naming the key and line.
        message: String,
    },
    /// The values parse but cannot describe a run.
    #[error("testnet manifest {origin}: {message}")]
    Invalid {
        /// The file (or `<inline>`).
        origin: String,
        /// What is wrong and what to change.
        message: String,
    },
}

/// What can be done to the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PerturbationKind {
    /// `kill -9` the targets, restart them after the duration.
    Kill,
    /// `SIGSTOP` the targets for the duration, then `SIGCONT`.
    Pause,
    /// Cut a minority of the nodes (the targets, or a seeded choice) off the rest.
    PartitionMinority,
    /// Cut a majority of the nodes off the rest.
    PartitionMajority,
    /// Cut one authority off every other node.
    PartitionAuthority,
    /// `kill -9`, delete the data directory (keeping the node key), restart: back by sync.
    Wipe,
    /// Restart the target with its clock skewed (`--clock-skew-ms`), then restart it normally.
    ClockSkew,
    /// Delay, jitter, loss, duplication and reordering on every link of the targets.
    BadLinks,
    /// The authorities vote a deposits module switch at a height (alternating versions).
    DepositsUpgrade,
    /// A live gossip-policy swap on half the nodes (alternating versions).
    PolicySwap,
}

impl PerturbationKind {
    /// The manifest's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Pause => "pause",
            Self::PartitionMinority => "partition-minority",
            Self::PartitionMajority => "partition-majority",
            Self::PartitionAuthority => "partition-authority",
            Self::Wipe => "wipe",
            Self::ClockSkew => "clock-skew",
            Self::BadLinks => "bad-links",
            Self::DepositsUpgrade => "deposits-upgrade",
            Self::PolicySwap => "policy-swap",
        }
    }

    /// Whether it blocks links between nodes. A partition may last any time: a side without a
    /// majority of the authorities finalizes nothing it builds alone (`chain::finality`).
    pub fn is_partition(self) -> bool {
        matches!(
            self,
            Self::PartitionMinority | Self::PartitionMajority | Self::PartitionAuthority
        )
    }
}

/// One listed perturbation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListedPerturbation {
    /// Seconds after the start.
    pub at_s: f64,
    /// What.
    pub kind: PerturbationKind,
    /// Which nodes (a seeded choice fitting the kind if omitted).
    #[serde(default)]
    pub targets: Option<Vec<usize>>,
    /// How long, in seconds (kill: until the restart; ignored by upgrades and swaps).
    #[serde(default = "default_duration_s")]
    pub duration_s: f64,
}

fn default_duration_s() -> f64 {
    5.0
}

/// Seeded random perturbations.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomPerturbations {
    /// Seconds between two perturbations' starts, drawn uniformly from `[min, max]`.
    pub every_s: [f64; 2],
    /// Each one's duration, drawn uniformly from `[min, max]` seconds.
    #[serde(default = "default_random_duration")]
    pub duration_s: [f64; 2],
    /// The kinds drawn from (uniformly).
    pub kinds: Vec<PerturbationKind>,
}

fn default_random_duration() -> [f64; 2] {
    [5.0, 12.0]
}

/// The deposits upgrade.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpgradeSpec {
    /// When the authorities are asked to vote, seconds after the start.
    pub at_s: f64,
    /// Embedded module name (`deposits-v1`, `deposits-v2`); the chain starts on the other.
    #[serde(default = "default_upgrade_module")]
    pub module: String,
    /// Activation height.
    #[serde(default)]
    pub height: Option<u64>,
    /// Or: this many blocks after the head when the vote is asked (beyond the genesis lead).
    #[serde(default)]
    pub after_blocks: Option<u64>,
}

fn default_upgrade_module() -> String {
    "deposits-v2".into()
}

/// The gossip-policy live swap on half the nodes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySwapSpec {
    /// When, seconds after the start.
    pub at_s: f64,
    /// Embedded module name the half switches to (the nodes start on the default policy).
    #[serde(default = "default_policy_module")]
    pub module: String,
}

fn default_policy_module() -> String {
    "gossip-policy-v1".into()
}

/// A node that starts late.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LateJoiner {
    /// When it starts, seconds after the start.
    pub at_s: f64,
    /// Which node (default: the last one; never an authority).
    #[serde(default)]
    pub node: Option<usize>,
    /// `--sync` of its first start: `checkpoint`, `auto` or `full`.
    #[serde(default = "default_late_sync")]
    pub sync: String,
}

fn default_late_sync() -> String {
    "checkpoint".into()
}

/// A whole testnet run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Name used in the report.
    #[serde(default = "default_name")]
    pub name: String,
    /// Number of `modnode` processes.
    pub nodes: usize,
    /// How many of them (the first ones) produce blocks.
    pub authorities: usize,
    /// Slot length.
    #[serde(default = "default_slot_ms")]
    pub slot_ms: u64,
    /// Blocks below the head that are final (genesis `finality_depth`).
    #[serde(default = "default_finality_depth")]
    pub finality_depth: u64,
    /// Checkpoint every this many blocks (the late joiner restores one).
    #[serde(default = "default_checkpoint_interval")]
    pub checkpoint_interval: u64,
    /// How long the perturbed part runs, seconds (then everything heals and must converge).
    pub duration_s: f64,
    /// After the last heal, all nodes must reach one head within this, seconds.
    #[serde(default = "default_converge_s")]
    pub converge_s: f64,
    /// Seed of every random choice (targets, random perturbations, deposits, relay).
    #[serde(default)]
    pub seed: u64,
    /// Deposits submitted to the dev contract per second (0: none).
    #[serde(default)]
    pub deposits_per_s: f64,
    /// RSS bound per node, MiB.
    #[serde(default = "default_max_rss_mb")]
    pub max_rss_mb: u64,
    /// Log lines (substrings) that are explained by the perturbations and not violations.
    #[serde(default)]
    pub allowed_log_patterns: Vec<String>,
    /// The late joiner.
    #[serde(default)]
    pub late_joiner: Option<LateJoiner>,
    /// Listed perturbations.
    #[serde(default, rename = "perturbation")]
    pub perturbations: Vec<ListedPerturbation>,
    /// Seeded random perturbations.
    #[serde(default)]
    pub random: Option<RandomPerturbations>,
    /// The deposits upgrade.
    #[serde(default)]
    pub upgrade: Option<UpgradeSpec>,
    /// The gossip-policy swap.
    #[serde(default)]
    pub policy_swap: Option<PolicySwapSpec>,
}

fn default_name() -> String {
    "testnet".into()
}
fn default_slot_ms() -> u64 {
    500
}
fn default_finality_depth() -> u64 {
    64
}
fn default_checkpoint_interval() -> u64 {
    32
}
fn default_converge_s() -> f64 {
    60.0
}
fn default_max_rss_mb() -> u64 {
    1024
}

impl Manifest {
    /// Reads and validates a manifest file.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates manifest text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ManifestError> {
        let manifest: Self = toml::from_str(text).map_err(|e| ManifestError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        manifest
            .validate()
            .map_err(|message| ManifestError::Invalid {
                origin: origin.to_string(),
                message,
            })?;
        Ok(manifest)
    }

    /// The late joiner's index, if any.
    pub fn late_node(&self) -> Option<usize> {
        let late = self.late_joiner.as_ref()?;
        Some(late.node.unwrap_or(self.nodes.saturating_sub(1)))
    }

    fn validate(&self) -> Result<(), String> {
        if self.nodes < 2 || self.nodes > 32 {
            return Err(format!("nodes = {}: give 2 to 32", self.nodes));
        }
        if self.authorities == 0 || self.authorities > self.nodes {
            return Err(format!(
                "authorities = {}: give 1 to nodes ({})",
                self.authorities, self.nodes
            ));
        }
        if self.slot_ms < 100 {
            return Err(format!("slot_ms = {}: give at least 100", self.slot_ms));
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0) {
            return Err("duration_s must be a positive number of seconds".into());
        }
        if !(self.deposits_per_s.is_finite() && self.deposits_per_s >= 0.0) {
            return Err("deposits_per_s must be 0 or more".into());
        }
        if let Some(late) = self.late_node() {
            if late < self.authorities || late >= self.nodes {
                return Err(format!(
                    "late_joiner.node = {late}: give a follower (index {} to {})",
                    self.authorities,
                    self.nodes.saturating_sub(1)
                ));
            }
            let sync = self.late_joiner.as_ref().map(|l| l.sync.as_str());
            if !matches!(sync, Some("checkpoint" | "auto" | "full")) {
                return Err(format!(
                    "late_joiner.sync = {sync:?}: give \"checkpoint\", \"auto\" or \"full\""
                ));
            }
        }
        for (i, p) in self.perturbations.iter().enumerate() {
            if !(p.at_s >= 0.0 && p.at_s < self.duration_s) {
                return Err(format!(
                    "perturbation {i}: at_s = {} is outside the run (0 to duration_s = {})",
                    p.at_s, self.duration_s
                ));
            }
            if let Some(bad) = p.targets.iter().flatten().find(|t| **t >= self.nodes) {
                return Err(format!(
                    "perturbation {i}: target {bad} is not a node (0 to {})",
                    self.nodes.saturating_sub(1)
                ));
            }
            if p.kind == PerturbationKind::Wipe && p.targets.iter().flatten().any(|t| *t == 0) {
                return Err(format!(
                    "perturbation {i}: node 0 hosts the dev deposit contract; wiping it would \
                     lose the contract, not test the chain: target another node"
                ));
            }
        }
        if let Some(random) = &self.random {
            let [lo, hi] = random.every_s;
            if !(lo > 0.0 && lo <= hi) {
                return Err(format!(
                    "random.every_s = [{lo}, {hi}]: give 0 < min <= max"
                ));
            }
            let [dlo, dhi] = random.duration_s;
            if !(dlo > 0.0 && dlo <= dhi) {
                return Err(format!(
                    "random.duration_s = [{dlo}, {dhi}]: give 0 < min <= max"
                ));
            }
            if dhi >= lo {
                return Err(format!(
                    "random.duration_s max {dhi} must be below random.every_s min {lo}, so \
                     perturbations do not overlap"
                ));
            }
            if random.kinds.is_empty() {
                return Err("random.kinds is empty: list at least one kind".into());
            }
        }
        if let Some(upgrade) = &self.upgrade {
            if !matches!(upgrade.module.as_str(), "deposits-v1" | "deposits-v2") {
                return Err(format!(
                    "upgrade.module = {:?}: give \"deposits-v1\" or \"deposits-v2\"",
                    upgrade.module
                ));
            }
            if upgrade.height.is_some() == upgrade.after_blocks.is_some() {
                return Err("upgrade: give exactly one of height and after_blocks".into());
            }
        }
        if let Some(swap) = &self.policy_swap
            && !matches!(
                swap.module.as_str(),
                "gossip-policy-v1" | "gossip-policy-v2"
            )
        {
            return Err(format!(
                "policy_swap.module = {:?}: give \"gossip-policy-v1\" or \"gossip-policy-v2\"",
                swap.module
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: &str = r#"
        nodes = 5
        authorities = 3
        duration_s = 100
        seed = 3
        deposits_per_s = 1.0
        [[perturbation]]
        at_s = 10
        kind = "kill"
        targets = [1]
        [random]
        every_s = [20, 30]
        kinds = ["pause", "partition-minority"]
        [upgrade]
        at_s = 20
        after_blocks = 10
    "#;

    #[test]
    fn a_manifest_parses_with_defaults() {
        let m = Manifest::parse(SHORT, "<inline>").unwrap();
        assert_eq!(m.nodes, 5);
        assert_eq!(m.slot_ms, 500);
        assert_eq!(m.perturbations.len(), 1);
        assert_eq!(m.perturbations[0].kind, PerturbationKind::Kill);
        assert_eq!(m.upgrade.as_ref().unwrap().module, "deposits-v2");
        assert_eq!(m.random.as_ref().unwrap().kinds.len(), 2);
    }

    #[test]
    fn unknown_keys_are_refused_with_the_key_named() {
        let text = SHORT.replace("seed = 3", "seed = 3\nsede = 4");
        let e = Manifest::parse(&text, "<inline>").unwrap_err().to_string();
        assert!(e.contains("sede"), "{e}");
        let text = SHORT.replace("targets = [1]", "targets = [1]\ndurration_s = 3");
        let e = Manifest::parse(&text, "<inline>").unwrap_err().to_string();
        assert!(e.contains("durration_s"), "{e}");
        let text = SHORT.replace("\"kill\"", "\"explode\"");
        let e = Manifest::parse(&text, "<inline>").unwrap_err().to_string();
        assert!(e.contains("explode"), "{e}");
    }

    #[test]
    fn impossible_runs_are_refused_saying_what_to_change() {
        for (from, to, says) in [
            ("authorities = 3", "authorities = 6", "authorities"),
            ("targets = [1]", "targets = [9]", "target 9"),
            (
                "kind = \"kill\"\n        targets = [1]",
                "kind = \"wipe\"\n        targets = [0]",
                "dev deposit contract",
            ),
            (
                "after_blocks = 10",
                "after_blocks = 10\nheight = 30",
                "exactly one",
            ),
            ("every_s = [20, 30]", "every_s = [5, 30]", "overlap"),
        ] {
            assert!(SHORT.contains(from), "{from}");
            let e = Manifest::parse(&SHORT.replace(from, to), "<inline>")
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{to}: {e}");
        }
    }
}

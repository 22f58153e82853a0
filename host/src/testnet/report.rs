//! The testnet's report: [`Report`], JSON figures of a run, and [`draw_timeline`], a PNG of
//! every node's head over time with the perturbations and upgrades on it.
//!
//! The PNG carries no text: plotters' text needs system fonts (or a font bundled into the
//! binary) and the figures belong in the JSON anyway. What it shows, left to right in run time:
//! one line per node (head height, colours from plotters' `Palette99` in node order, node 0
//! widest and underneath so that coinciding lines stay visible), a shaded
//! band per perturbation (one colour per kind), and a vertical line per module upgrade with a
//! dot at the height it activated.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordu64;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::invariants::{CheckerSummary, Convergence};
use super::relay::LinkStats;

/// Size of the timeline PNG [`Report::write`] draws.
pub const TIMELINE_SIZE: (u32, u32) = (1600, 900);

/// Pixels left around the plot.
const MARGIN: i32 = 20;

/// Band colours, picked per perturbation kind in order of first appearance.
const BAND_COLOURS: [RGBColor; 6] = [
    RGBColor(230, 60, 60),
    RGBColor(60, 120, 230),
    RGBColor(240, 170, 30),
    RGBColor(150, 60, 200),
    RGBColor(40, 170, 120),
    RGBColor(120, 120, 120),
];

/// What happened over a run, for the PNG.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// `(at_ms, node, head height)`.
    pub samples: Vec<(u64, usize, u64)>,
    /// `(start_ms, end_ms, kind, nodes affected)`.
    pub perturbations: Vec<(u64, u64, String, Vec<usize>)>,
    /// `(at_ms, activation height, label)`.
    pub upgrades: Vec<(u64, u64, String)>,
}

impl Timeline {
    /// The last moment anything on the timeline happened.
    pub fn end_ms(&self) -> u64 {
        let samples = self.samples.iter().map(|s| s.0);
        let bands = self.perturbations.iter().map(|p| p.1.max(p.0));
        let upgrades = self.upgrades.iter().map(|u| u.0);
        samples.chain(bands).chain(upgrades).max().unwrap_or(0)
    }

    /// Perturbations counted by kind.
    pub fn perturbations_by_kind(&self) -> BTreeMap<String, u64> {
        let mut by_kind = BTreeMap::new();
        for (_, _, kind, _) in &self.perturbations {
            let count: &mut u64 = by_kind.entry(kind.clone()).or_default();
            *count = count.saturating_add(1);
        }
        by_kind
    }
}

/// The figures of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Nodes in the network.
    pub nodes: usize,
    /// How long the run lasted.
    pub minutes: f64,
    /// The seed of the run's random choices (relay decisions, random perturbations).
    pub seed: u64,
    /// Perturbations applied, by kind.
    pub perturbations_by_kind: BTreeMap<String, u64>,
    /// Perturbations applied in all.
    pub perturbations: u64,
    /// Module upgrades that activated, `label@height`.
    pub upgrades: Vec<String>,
    /// Highest head height reached.
    pub blocks: u64,
    /// Highest finalized height reached.
    pub finalized: u64,
    /// Deposits the contract accepted.
    pub deposits_submitted: u64,
    /// Deposits every node applied by the end.
    pub deposits_applied: u64,
    /// Heights where nodes disagreed on the canonical block.
    pub forks_seen: u64,
    /// Of those, the ones since finalized without conflict.
    pub forks_resolved: u64,
    /// Every convergence time after a heal (ms).
    pub convergence_ms: Vec<u64>,
    /// Median convergence time after a heal (ms).
    pub convergence_p50_ms: Option<u64>,
    /// 99th percentile convergence time after a heal (ms).
    pub convergence_p99_ms: Option<u64>,
    /// Each convergence split into syncing the missed blocks and settling on one chain.
    pub convergences: Vec<Convergence>,
    /// Median settle time: from every node holding the blocks it missed to one chain (ms).
    pub settle_p50_ms: Option<u64>,
    /// 99th percentile settle time (ms); the target is a few slots.
    pub settle_p99_ms: Option<u64>,
    /// Highest RSS of any node.
    pub max_rss_bytes: Option<u64>,
    /// Highest RSS of each node.
    pub max_rss_bytes_per_node: Vec<Option<u64>>,
    /// Distinct (node, banned id) pairs seen.
    pub bans: u64,
    /// The relay's counters over all links, if a relay ran.
    pub relay: Option<LinkStats>,
    /// Violations by kind.
    pub violations_by_kind: BTreeMap<String, u64>,
    /// Every violation's message.
    pub violations: Vec<String>,
    /// Where the timeline PNG was written.
    pub timeline_png: Option<PathBuf>,
}

impl Report {
    /// The report of a run of `nodes` nodes lasting `duration_ms`, from its timeline and the
    /// checker's summary.
    pub fn new(
        nodes: usize,
        seed: u64,
        duration_ms: u64,
        timeline: &Timeline,
        summary: &CheckerSummary,
    ) -> Self {
        let perturbations_by_kind = timeline.perturbations_by_kind();
        // Milliseconds to minutes for display; the precision lost is below a microsecond.
        #[allow(clippy::cast_precision_loss, clippy::arithmetic_side_effects)]
        let minutes = duration_ms as f64 / 60_000.0;
        Self {
            nodes,
            minutes,
            seed,
            perturbations: perturbations_by_kind.values().copied().sum(),
            perturbations_by_kind,
            upgrades: timeline
                .upgrades
                .iter()
                .map(|(_, height, label)| format!("{label}@{height}"))
                .collect(),
            blocks: summary.max_head,
            finalized: summary.max_finalized,
            deposits_submitted: summary.deposits_submitted,
            deposits_applied: summary.deposits_applied_everywhere,
            forks_seen: summary.forks_seen,
            forks_resolved: summary.forks_resolved,
            convergence_ms: summary.convergence_ms.clone(),
            convergence_p50_ms: summary.convergence_p50_ms,
            convergence_p99_ms: summary.convergence_p99_ms,
            convergences: summary.convergences.clone(),
            settle_p50_ms: summary.settle_p50_ms,
            settle_p99_ms: summary.settle_p99_ms,
            max_rss_bytes: summary.max_rss_bytes.iter().flatten().copied().max(),
            max_rss_bytes_per_node: summary.max_rss_bytes.clone(),
            bans: summary.bans,
            relay: None,
            violations_by_kind: summary.violations_by_kind.clone(),
            violations: summary.violations.clone(),
            timeline_png: None,
        }
    }

    /// Whether the run broke no invariant.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// Draws `timeline` into `dir/timeline.png` and writes this report (naming the PNG) to
    /// `dir/report.json`; returns the JSON's path.
    pub fn write(&mut self, dir: &Path, timeline: &Timeline) -> Result<PathBuf, ReportError> {
        let png = dir.join("timeline.png");
        draw_timeline(timeline, &png, TIMELINE_SIZE)?;
        self.timeline_png = Some(png);
        let json = dir.join("report.json");
        let text = serde_json::to_string_pretty(self).map_err(ReportError::Json)?;
        std::fs::write(&json, text).map_err(|source| ReportError::Write {
            path: json.clone(),
            source,
        })?;
        Ok(json)
    }
}

/// Why a report could not be written (ours: a file-system problem, or plotters failing).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The JSON file could not be written.
    #[error("cannot write the testnet report {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The report could not be serialised (a bug: every field is plain data).
    #[error("cannot serialise the testnet report: {0}")]
    Json(serde_json::Error),
    /// Plotters failed to draw or encode the PNG.
    #[error("cannot draw the timeline {}: {reason}", path.display())]
    Draw {
        /// The PNG file.
        path: PathBuf,
        /// Plotters' message.
        reason: String,
    },
}

/// Draws `timeline` as a `size` PNG at `path`.
pub fn draw_timeline(
    timeline: &Timeline,
    path: &Path,
    size: (u32, u32),
) -> Result<(), ReportError> {
    let failed = |reason: String| ReportError::Draw {
        path: path.to_path_buf(),
        reason,
    };
    let root = BitMapBackend::new(path, size).into_drawing_area();
    draw_on(&root, timeline).map_err(|e| failed(e.to_string()))?;
    root.present().map_err(|e| failed(e.to_string()))
}

/// Draws `timeline` on any drawing area (the PNG file, or an RGB buffer in tests).
pub fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    timeline: &Timeline,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let x_end = timeline.end_ms().saturating_add(1);
    let y_end = timeline
        .samples
        .iter()
        .map(|s| s.2)
        .chain(timeline.upgrades.iter().map(|u| u.1))
        .max()
        .unwrap_or(0)
        .saturating_add(1);
    let area = root.margin(MARGIN, MARGIN, MARGIN, MARGIN);
    let (px, py) = area.get_pixel_range();
    // Heights grow upwards: the y pixel range runs bottom to top.
    let flipped = Range {
        start: py.end,
        end: py.start,
    };
    let plot = area.apply_coord_spec(Cartesian2d::<RangedCoordu64, RangedCoordu64>::new(
        0..x_end,
        0..y_end,
        (px, flipped),
    ));

    let mut kinds: Vec<&str> = Vec::new();
    for (start, end, kind, _) in &timeline.perturbations {
        let index = kinds.iter().position(|k| k == kind).unwrap_or_else(|| {
            kinds.push(kind);
            kinds.len().saturating_sub(1)
        });
        let colour = BAND_COLOURS
            .get(index.checked_rem(BAND_COLOURS.len()).unwrap_or(0))
            .copied()
            .unwrap_or(BLACK);
        plot.draw(&Rectangle::new(
            [(*start, 0), ((*end).max(*start), y_end)],
            colour.mix(0.25).filled(),
        ))?;
    }

    // Axes, and a faint line every tenth of the height.
    let grid = BLACK.mix(0.1);
    let step = (y_end / 10).max(1);
    for height in (0..y_end).step_by(usize::try_from(step).unwrap_or(usize::MAX)) {
        plot.draw(&PathElement::new(vec![(0, height), (x_end, height)], grid))?;
    }
    plot.draw(&PathElement::new(vec![(0, 0), (x_end, 0)], BLACK))?;
    plot.draw(&PathElement::new(vec![(0, 0), (0, y_end)], BLACK))?;

    let mut per_node: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    for (at, node, head) in &timeline.samples {
        per_node.entry(*node).or_default().push((*at, *head));
    }
    // Where nodes agree their lines coincide: each is drawn 2 px narrower than the one before
    // (node 0 widest, underneath), so agreeing nodes show as one striped cable, not one colour.
    let lines = u32::try_from(per_node.len()).unwrap_or(u32::MAX);
    for (rank, (node, mut points)) in (0u32..).zip(per_node) {
        points.sort_unstable();
        let width = lines.saturating_sub(rank).saturating_mul(2);
        plot.draw(&PathElement::new(
            points,
            Palette99::pick(node).stroke_width(width),
        ))?;
    }

    for (at, height, _) in &timeline.upgrades {
        plot.draw(&PathElement::new(
            vec![(*at, 0), (*at, y_end)],
            BLACK.stroke_width(2),
        ))?;
        plot.draw(&Circle::new((*at, *height), 6, BLACK.filled()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

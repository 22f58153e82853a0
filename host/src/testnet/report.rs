//! The testnet's report: [`Report`], JSON figures of a run, and [`draw_timeline`], a PNG of
//! every node's head over time with the perturbations and upgrades on it.
//!
//! Its text (title, time and height labels, a legend) is drawn with a bitmap font compiled in
//! (`text`): plotters' own text needs system fonts. What it shows, left to right in run time:
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

mod text;

/// Size of the timeline PNG [`Report::write`] draws.
pub const TIMELINE_SIZE: (u32, u32) = (1600, 900);

/// Pixels left around the plot of a small image (no labels).
const MARGIN: i32 = 20;

/// Pixels left of the plot of a labelled image: the height labels and the axis name.
const LABELLED_LEFT: i32 = 110;
/// Pixels right of it: the legend.
const LABELLED_RIGHT: i32 = 360;
/// Pixels above it: the title, and the height axis's name under it.
const LABELLED_TOP: i32 = 60;
/// Pixels below it: the time labels and the axis name.
const LABELLED_BOTTOM: i32 = 52;
/// Smallest image that gets labels and a legend; a smaller one is the bare plot.
const LABELLED_FROM: (u32, u32) = (1000, 500);
/// Text scale on the PNG: 16-pixel glyphs.
const TEXT: i32 = 2;
/// Height of one legend row, pixels.
const ROW: i32 = 20;

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

/// A round step (1, 2 or 5 × 10^k) that cuts `span` into at most about `ticks` pieces.
fn nice_step(span: u64, ticks: u64) -> u64 {
    let raw = span.checked_div(ticks.max(1)).unwrap_or(span).max(1);
    let mut magnitude = 1u64;
    loop {
        for m in [1u64, 2, 5] {
            let step = magnitude.saturating_mul(m);
            if step >= raw {
                return step;
            }
        }
        if magnitude > u64::MAX / 10 {
            return u64::MAX;
        }
        magnitude = magnitude.saturating_mul(10);
    }
}

/// Draws `timeline` on any drawing area (the PNG file, or an RGB buffer in tests). An image
/// of at least `LABELLED_FROM` (1000×500) also gets a title, time and height labels and a legend
/// (perturbation kinds by colour, nodes by colour, upgrades by number).
pub fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    timeline: &Timeline,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (w, h) = root.dim_in_pixel();
    let labelled = w >= LABELLED_FROM.0 && h >= LABELLED_FROM.1;
    let (top, bottom, left, right) = if labelled {
        (LABELLED_TOP, LABELLED_BOTTOM, LABELLED_LEFT, LABELLED_RIGHT)
    } else {
        (MARGIN, MARGIN, MARGIN, MARGIN)
    };
    let x_end = timeline.end_ms().saturating_add(1);
    let y_end = timeline
        .samples
        .iter()
        .map(|s| s.2)
        .chain(timeline.upgrades.iter().map(|u| u.1))
        .max()
        .unwrap_or(0)
        .saturating_add(1);
    let area = root.margin(top, bottom, left, right);
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

    let mut kinds: Vec<(&str, RGBColor)> = Vec::new();
    for (start, end, kind, _) in &timeline.perturbations {
        let colour = match kinds.iter().find(|(k, _)| k == kind) {
            Some((_, colour)) => *colour,
            None => {
                let colour = BAND_COLOURS
                    .get(kinds.len().checked_rem(BAND_COLOURS.len()).unwrap_or(0))
                    .copied()
                    .unwrap_or(BLACK);
                kinds.push((kind, colour));
                colour
            }
        };
        plot.draw(&Rectangle::new(
            [(*start, 0), ((*end).max(*start), y_end)],
            colour.mix(0.25).filled(),
        ))?;
    }

    // Axes, and a faint line at each round height.
    let grid = BLACK.mix(0.1);
    let step = nice_step(y_end, 10);
    let heights: Vec<u64> = (0..y_end)
        .step_by(usize::try_from(step).unwrap_or(usize::MAX))
        .collect();
    for height in &heights {
        plot.draw(&PathElement::new(
            vec![(0, *height), (x_end, *height)],
            grid,
        ))?;
    }
    plot.draw(&PathElement::new(vec![(0, 0), (x_end, 0)], BLACK))?;
    plot.draw(&PathElement::new(vec![(0, 0), (0, y_end)], BLACK))?;

    let mut per_node: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    for (at, node, head) in &timeline.samples {
        per_node.entry(*node).or_default().push((*at, *head));
    }
    let nodes: Vec<usize> = per_node.keys().copied().collect();
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
    if !labelled {
        return Ok(());
    }

    // Title, axis labels, upgrade numbers.
    let at = |x: u64, y: u64| plot.as_coord_spec().translate(&(x, y));
    text::draw(
        root,
        (left, 8),
        "head height of each node over run time; shaded: perturbations; lines: upgrades",
        TEXT,
        &BLACK,
    )?;
    text::draw(root, (8, 36), "height", TEXT, &BLACK)?;
    let half = text::height(TEXT) / 2;
    for height in &heights {
        let label = height.to_string();
        let (_, y) = at(0, *height);
        let x = left
            .saturating_sub(8)
            .saturating_sub(text::width(&label, TEXT));
        text::draw(root, (x, y.saturating_sub(half)), &label, TEXT, &BLACK)?;
    }
    let (_, axis_y) = at(0, 0);
    let step_s = nice_step(x_end / 1000, 8);
    let mut second = 0u64;
    while second.saturating_mul(1000) < x_end {
        let (x, _) = at(second.saturating_mul(1000), 0);
        root.draw(&PathElement::new(
            vec![(x, axis_y), (x, axis_y.saturating_add(5))],
            BLACK,
        ))?;
        let label = second.to_string();
        let x = x.saturating_sub(text::width(&label, TEXT) / 2);
        text::draw(root, (x, axis_y.saturating_add(8)), &label, TEXT, &BLACK)?;
        second = second.saturating_add(step_s);
    }
    let name = "run time (s)";
    let (end_x, _) = at(x_end, 0);
    text::draw(
        root,
        (
            end_x.saturating_sub(text::width(name, TEXT)),
            axis_y.saturating_add(30),
        ),
        name,
        TEXT,
        &BLACK,
    )?;
    let (_, plot_top) = at(0, y_end);
    for (i, (at_ms, _, _)) in (1u32..).zip(&timeline.upgrades) {
        let (x, _) = at(*at_ms, 0);
        // Alternating rows, so neighbouring upgrades' numbers do not overlap.
        let row = if i % 2 == 0 { ROW } else { 0 };
        text::draw(
            root,
            (
                x.saturating_add(4),
                plot_top.saturating_add(4).saturating_add(row),
            ),
            &i.to_string(),
            TEXT,
            &BLACK,
        )?;
    }

    // The legend.
    let x0 = i32::try_from(w)
        .unwrap_or(i32::MAX)
        .saturating_sub(right)
        .saturating_add(12);
    let bottom_y = i32::try_from(h).unwrap_or(i32::MAX).saturating_sub(ROW);
    let mut y = top;
    let mut rows: Vec<(Option<ShapeStyle>, String)> = Vec::new();
    rows.push((None, "perturbations".into()));
    rows.extend(
        kinds
            .iter()
            .map(|(kind, colour)| (Some(colour.mix(0.25).filled()), (*kind).to_string())),
    );
    rows.push((None, "nodes".into()));
    rows.extend(nodes.iter().map(|node| {
        (
            Some(Palette99::pick(*node).filled()),
            format!("node {node}"),
        )
    }));
    if !timeline.upgrades.is_empty() {
        rows.push((None, "upgrades".into()));
        rows.extend(
            (1u32..)
                .zip(&timeline.upgrades)
                .map(|(i, (_, height, label))| (None, format!("{i} {label}@{height}"))),
        );
    }
    for (swatch, label) in rows {
        if y > bottom_y {
            break;
        }
        let x = match swatch {
            Some(style) => {
                root.draw(&Rectangle::new(
                    [(x0, y), (x0.saturating_add(15), y.saturating_add(15))],
                    style,
                ))?;
                x0.saturating_add(24)
            }
            None => x0,
        };
        text::draw(root, (x, y), &label, TEXT, &BLACK)?;
        y = y.saturating_add(ROW);
    }
    Ok(())
}

#[cfg(test)]
mod tests;

//! The PNG is a real PNG showing what the timeline holds; the JSON round-trips.

use super::*;
use crate::testnet::invariants::{BlockSeen, Checker, Sample};

fn timeline() -> Timeline {
    let mut samples = Vec::new();
    for second in 0..=60u64 {
        for node in 0..3usize {
            // Node 2 stalls during its partition (20 s to 30 s), node 1 while killed (40 s to
            // 45 s); node 0 is drawn first, under the others, where they agree.
            let head = match node {
                2 if (20..30).contains(&second) => 20,
                1 if (40..45).contains(&second) => 40,
                _ => second,
            };
            samples.push((second * 1000, node, head));
        }
    }
    Timeline {
        samples,
        perturbations: vec![
            (20_000, 30_000, "partition".into(), vec![2]),
            (40_000, 45_000, "kill".into(), vec![1]),
        ],
        upgrades: vec![(50_000, 50, "deposits-v2".into())],
    }
}

/// The pixel `(x, y)` of an RGB buffer of width `w`.
fn pixel(buf: &[u8], w: u32, (x, y): (u32, u32)) -> (u8, u8, u8) {
    let i = ((y * w + x) * 3) as usize;
    (buf[i], buf[i + 1], buf[i + 2])
}

#[test]
fn the_timeline_shows_nodes_bands_and_upgrades() {
    let (w, h) = (400u32, 200u32);
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        draw_on(&root, &timeline()).unwrap();
        root.present().unwrap();
    }
    let colour_of = |node: usize| {
        let c = Palette99::pick(node).to_rgba();
        (c.0, c.1, c.2)
    };
    for node in 0..3 {
        let count = buf
            .chunks(3)
            .filter(|p| (p[0], p[1], p[2]) == colour_of(node))
            .count();
        assert!(count > 20, "node {node}'s line has {count} pixels");
    }
    // x of a moment: the plot spans MARGIN..w-MARGIN for 0..=60 s.
    let x_at = |ms: u64| {
        let span = u64::from(w) - 2 * MARGIN as u64;
        (MARGIN as u64 + ms * span / 60_001) as u32
    };
    // Near the top, above every line: the partition band is shaded red, outside it white or grid grey.
    let top = MARGIN as u32 + 3;
    let (r, g, b) = pixel(&buf, w, (x_at(25_000), top));
    assert!(r > g && r > b && g < 250, "band pixel {:?}", (r, g, b));
    let (r, g, b) = pixel(&buf, w, (x_at(35_000), top));
    assert!(r == g && g == b, "outside the bands {:?}", (r, g, b));
    // The upgrade's vertical line.
    assert_eq!(pixel(&buf, w, (x_at(50_000), top)), (0, 0, 0));
}

#[test]
fn the_png_file_is_a_png_of_the_requested_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.png");
    draw_timeline(&timeline(), &path, (640, 360)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 1000, "{} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (640, 360));
}

#[test]
fn an_empty_timeline_still_draws() {
    let dir = tempfile::tempdir().unwrap();
    draw_timeline(&Timeline::default(), &dir.path().join("e.png"), (100, 100)).unwrap();
}

#[test]
fn the_report_holds_the_figures_and_round_trips_through_json() {
    let mut checker = Checker::new(vec!["a".into(), "b".into()], vec![true, true]);
    checker.deposit_submitted(0, 5);
    checker.heal_at(0);
    for node in 0..2 {
        checker.record(&Sample {
            at_ms: 1_500,
            node,
            head: 4,
            finalized: 2,
            blocks: vec![BlockSeen {
                height: 4,
                hash: "h4".into(),
                state_root: "r4".into(),
            }],
            deposit_count: 1,
            balance_sum_gwei: 105,
            banned: vec![],
            rss_bytes: Some(1000 * (node as u64 + 1)),
        });
    }
    checker.log_line(1, "2026-11-26T14:00:00Z ERROR modnode: boom");
    let timeline = timeline();
    let mut report = Report::new(2, 9, 150_000, &timeline, &checker.summary());
    assert_eq!(report.minutes, 2.5);
    assert_eq!(report.perturbations, 2);
    assert_eq!(report.perturbations_by_kind["kill"], 1);
    assert_eq!(report.upgrades, ["deposits-v2@50"]);
    assert_eq!((report.blocks, report.finalized), (4, 2));
    assert_eq!((report.deposits_submitted, report.deposits_applied), (1, 1));
    assert_eq!(report.convergence_p99_ms, Some(1_500));
    assert_eq!(report.max_rss_bytes, Some(2000));
    assert_eq!(report.violations_by_kind["unexplained_error"], 1);
    assert!(!report.passed());

    let dir = tempfile::tempdir().unwrap();
    let json = report.write(dir.path(), &timeline).unwrap();
    assert_eq!(report.timeline_png, Some(dir.path().join("timeline.png")));
    assert!(dir.path().join("timeline.png").metadata().unwrap().len() > 0);
    let back: Report = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(back, report);
}

#[test]
fn a_full_size_timeline_has_a_title_axis_labels_and_a_legend() {
    let (w, h) = TIMELINE_SIZE;
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        draw_on(&root, &timeline()).unwrap();
        root.present().unwrap();
    }
    let black_in = |xs: std::ops::Range<u32>, ys: std::ops::Range<u32>| {
        ys.flat_map(|y| xs.clone().map(move |x| (x, y)))
            .filter(|&p| pixel(&buf, w, p) == (0, 0, 0))
            .count()
    };
    let (left, right, top, bottom) = (
        LABELLED_LEFT as u32,
        LABELLED_RIGHT as u32,
        LABELLED_TOP as u32,
        LABELLED_BOTTOM as u32,
    );
    // The title above the plot, height labels left of it, time labels below it.
    assert!(black_in(left..w - right, 0..top - 30) > 200, "no title");
    assert!(
        black_in(0..left - 8, top..h - bottom) > 100,
        "no height labels"
    );
    assert!(
        black_in(left..w - right, h - bottom + 6..h) > 100,
        "no time labels"
    );
    // The legend: the first kind's swatch in its band colour (as drawn on the plot), then,
    // after the kinds and the "nodes" heading, node 0's swatch in its line colour.
    let x = w - right + 12 + 8;
    let band = pixel(&buf, w, (left + 3, top + 3)); // left of every band: white
    assert_eq!(band, (255, 255, 255));
    let partition_swatch = pixel(&buf, w, (x, top + ROW as u32 + 8));
    let partition_band = {
        // x of 25 s on a 0..=60 s plot spanning left..w-right.
        let span = u64::from(w - left - right);
        let x = left as u64 + 25_000 * span / 60_001;
        pixel(&buf, w, (x as u32, top + 3))
    };
    // The same colour, blended onto white the same way (within rounding).
    let close = |a: (u8, u8, u8), b: (u8, u8, u8)| {
        a.0.abs_diff(b.0) <= 2 && a.1.abs_diff(b.1) <= 2 && a.2.abs_diff(b.2) <= 2
    };
    assert!(
        close(partition_swatch, partition_band) && partition_band != (255, 255, 255),
        "{partition_swatch:?} vs {partition_band:?}"
    );
    let node0 = Palette99::pick(0).to_rgba();
    // Rows: heading, 2 kinds, heading, node 0.
    assert_eq!(
        pixel(&buf, w, (x, top + 4 * ROW as u32 + 8)),
        (node0.0, node0.1, node0.2)
    );
    // Legend text beside the swatches.
    assert!(black_in(x + 16..w, top..top + 8 * ROW as u32) > 300);
}

#[test]
fn round_steps_cut_a_span_into_about_the_asked_pieces() {
    // 1,800 s in 8: 225 rounds up to 500.
    assert_eq!(nice_step(1_800, 8), 500);
    assert_eq!(nice_step(3_300, 10), 500);
    assert_eq!(nice_step(60, 8), 10);
    assert_eq!(nice_step(0, 8), 1);
    assert_eq!(nice_step(7, 10), 1);
}

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

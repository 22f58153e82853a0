//! What `modnode upgrade-check` prints for a person: a trap in a few lines, each fuel ratio
//! saying which cases it is over, and what PASS means for a gossip policy whose plans differ.

use std::path::Path;
use std::process::Command;

fn upgrade_check(args: &[&str], cwd: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .arg("upgrade-check")
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn module(name: &str) -> String {
    modnode::artifacts::path(name).display().to_string()
}

#[test]
fn a_trap_is_a_few_lines_naming_the_module_and_the_trap() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "deposits",
            "deposits-v2",
            "fixture-write-trap",
            "unreachable",
        ),
        (
            "gossip-policy",
            "gossip-policy-v2",
            "fixture-policy-trap",
            "unreachable",
        ),
        // Stack exhaustion is a host failure, not the module's fault, but as short.
        ("deposits", "deposits-v2", "fixture-recursion", "stack"),
    ];
    for (kind, from, to, trap) in cases {
        let (code, text) = upgrade_check(
            &[
                kind,
                "--from",
                &module(from),
                "--to",
                &module(to),
                "--cases",
                "4",
                "--seed",
                "1",
            ],
            dir.path(),
        );
        assert_ne!(code, 0, "{text}");
        assert!(text.contains(trap), "{to}: {text}");
        assert!(
            text.contains("v900") || text.contains("v910"),
            "{to}: {text}"
        );
        assert!(!text.contains("Caused by"), "{to}: {text}");
        let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
        assert!(lines <= 6, "{to}: {lines} lines:\n{text}");
    }
}

#[test]
fn the_summary_and_the_counterexample_say_which_cases_each_fuel_ratio_is_over() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = upgrade_check(
        &[
            "deposits",
            "--from",
            &module("deposits-v2"),
            "--to",
            &module("fixture-deposits-linear-scan"),
            "--cases",
            "16",
            "--seed",
            "1",
        ],
        dir.path(),
    );
    assert_ne!(code, 0, "{text}");
    let summary = text
        .lines()
        .find(|l| l.contains("FAIL"))
        .unwrap_or_else(|| panic!("no verdict line:\n{text}"));
    assert!(
        summary.contains("highest fuel ratio of the") && summary.contains("cases run"),
        "{text}"
    );
    let counterexample = text
        .lines()
        .find(|l| l.starts_with("counterexample"))
        .unwrap_or_else(|| panic!("no counterexample:\n{text}"));
    assert!(
        counterexample.contains("smallest failing case"),
        "{counterexample}"
    );
}

#[test]
fn a_gossip_policy_pass_says_its_plans_may_differ_as_a_shadow_would_count() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = upgrade_check(
        &[
            "gossip-policy",
            "--from",
            &module("gossip-policy-v2"),
            "--to",
            &module("example-gossip-policy-custom"),
            "--cases",
            "8",
            "--seed",
            "1",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("PASS"), "{text}");
    assert!(
        text.contains("plans may differ") && text.contains("shadow"),
        "{text}"
    );
}

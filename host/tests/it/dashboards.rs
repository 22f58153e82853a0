//! The example Grafana dashboard and Prometheus alert rules name only metrics a node exports:
//! a real node runs, its `/metrics` is read, and every metric a query of
//! `examples/grafana/modnode.json` or `examples/prometheus/alerts.yml` names must be one of
//! its series (a renamed or removed metric fails here, not on an operator's screen).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use modnode::admin::client::{self, Target};
use modnode::node::DepositSourceConfig;
use modnode::runtime::{Kind, Mode};
use sha2::{Digest as _, Sha256};
use tempfile::TempDir;

use super::artifact;
use super::health::http_get;
use super::network::{LIVENESS, dirs, eventually, genesis, hosting, start_with};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// The sample names a scrape can carry, from its `# TYPE` lines: a counter's `_total`, a
/// histogram's `_bucket`, `_sum` and `_count`, an info's `_info`, a gauge's own name. Families
/// registered without samples yet (no upgrade scheduled) are exported all the same.
fn exported_names(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "info" => &["_info"],
            _ => &[""],
        };
        for s in suffixes {
            names.insert(format!("{name}{s}"));
        }
    }
    names
}

/// PromQL words that are not metric names: aggregations, set operators and modifiers.
const NOT_METRICS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
];

/// The index of the bracket closing the one at `open` (quotes respected).
fn closing(chars: &[char], open: usize) -> usize {
    let (o, c) = (chars[open], matching(chars[open]));
    let mut depth = 0;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = string_end(chars, i),
            ch if ch == o => depth += 1,
            ch if ch == c => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unbalanced {o} in {:?}", chars.iter().collect::<String>());
}

fn matching(open: char) -> char {
    match open {
        '(' => ')',
        '{' => '}',
        '[' => ']',
        _ => unreachable!(),
    }
}

/// The index of the quote closing the string opened at `start`.
fn string_end(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    i
}

/// The metric names a PromQL expression reads: identifiers used bare or followed by a label
/// matcher `{…}` or a range `[…]`, not functions (followed by `(`), aggregations, operators,
/// or the label lists of `by`/`without`/`on`/`ignoring`/`group_*`. Grafana's
/// `label_values(metric, label)` counts its first argument only.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = string_end(&chars, i) + 1;
        } else if c == '{' || c == '[' {
            // Label matchers and ranges hold label names, values and durations only.
            i = closing(&chars, i) + 1;
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A Grafana variable, a number or a duration.
            i += 1;
            while i < chars.len() && (ident(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let call = chars.get(next) == Some(&'(');
            let lower = word.to_ascii_lowercase();
            if matches!(
                lower.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) && call
            {
                i = closing(&chars, next) + 1;
            } else if word == "label_values" && call {
                let end = closing(&chars, next);
                let inner: String = chars[next + 1..end].iter().collect();
                let first = inner.split(',').next().unwrap_or_default();
                names.extend(metric_names(first));
                i = end + 1;
            } else if !call && !NOT_METRICS.contains(&lower.as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Every query string of a Grafana dashboard: each panel target's `expr` and each templating
/// variable's `query`, at any depth (rows nest panels).
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dashboard];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(e)) = map.get("expr") {
                    out.push(e.clone());
                }
                stack.extend(map.values());
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    if let Some(vars) = dashboard["templating"]["list"].as_array() {
        out.extend(
            vars.iter()
                .filter_map(|v| v["query"].as_str().map(str::to_string)),
        );
    }
    out
}

/// The `expr:` of every rule in a Prometheus rule file: written on its line, or as a `|`
/// block of the lines indented below it. Any other form is refused, so none is skipped.
fn alert_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut alert = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            alert = name.trim().to_string();
        }
        if let Some(value) = trimmed.strip_prefix("expr:") {
            let value = value.trim();
            if value == "|" {
                let indent = line.len() - trimmed.len();
                let mut block = Vec::new();
                i += 1;
                while i < lines.len() {
                    let l = lines[i];
                    let t = l.trim_start();
                    if !t.is_empty() && l.len() - t.len() <= indent {
                        break;
                    }
                    block.push(t);
                    i += 1;
                }
                out.push((alert.clone(), block.join(" ")));
                continue;
            }
            assert!(
                !value.is_empty() && !value.starts_with(['>', '|']),
                "alerts.yml: unsupported form of expr for {alert}: {value:?}"
            );
            out.push((alert.clone(), value.trim_matches('"').to_string()));
        }
        i += 1;
    }
    out
}

#[test]
fn the_promql_reader_finds_metrics_and_skips_functions_labels_and_durations() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, instance) (rate(modnode_a_bucket{instance=~"$instance", x="y}"}[$__rate_interval])))
           / on (instance) group_left (kind) modnode_b and modnode_c[5m] offset 1h > 5 * 1024"#,
    );
    assert_eq!(
        names,
        ["modnode_a_bucket", "modnode_b", "modnode_c"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        metric_names("label_values(modnode_build_info, instance)"),
        ["modnode_build_info".to_string()].into()
    );
    let rules = "    - alert: A\n      expr: |\n        modnode_x < 2\n          and on (kind)\n        modnode_y == 0\n      for: 1m\n    - alert: B\n      expr: modnode_z > 0\n";
    let exprs = alert_exprs(rules);
    assert_eq!(exprs.len(), 2, "{exprs:?}");
    assert_eq!(
        metric_names(&exprs[0].1),
        ["modnode_x", "modnode_y"].map(String::from).into()
    );
}

/// `/metrics` of a node holding a sample of every family: blocks imported, a shadow trial,
/// a pending upgrade vote and a scheduled upgrade (families without samples are not in a
/// scrape at all).
async fn full_scrape() -> String {
    let tmp: Vec<TempDir> = dirs(2);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    // Two authorities: one vote is pending, both schedule.
    let mut genesis = genesis("modnode-it-dashboards", &paths, 2);
    genesis.deposits_module = Some(Sha256::digest(artifact("deposits-v1")).into());
    let a = start_with(paths[0], &genesis, vec![], hosting()).await;
    let follow = DepositSourceConfig::follow_dev(a.deposit_contract_url().unwrap().to_string());
    let b = start_with(paths[1], &genesis, vec![a.peer_addr().unwrap()], follow).await;
    eventually("both authorities at height 2", || {
        a.status().height >= 2 && b.status().height >= 2
    })
    .await;

    let v2 = hex::encode(Sha256::digest(artifact("deposits-v2")));
    let propose = |dir: &Path, height: u64| {
        let target = Target::data_dir(dir).unwrap();
        let v2 = v2.clone();
        async move {
            client::propose_upgrade(&target, "upgrade", "deposits", &v2, height)
                .await
                .unwrap();
        }
    };
    let far = a.status().height + genesis.upgrade_lead_blocks + 60;
    propose(paths[0], far).await;
    propose(paths[0], far + 1).await;
    propose(paths[1], far + 1).await;

    let policy = a
        .modules()
        .kind_status(Kind::GossipPolicy)
        .active
        .hash
        .to_hex();
    let other = a
        .modules()
        .prepared()
        .into_iter()
        .find(|p| p.kind == Kind::GossipPolicy && hex::encode(p.hash) != policy)
        .expect("a second gossip policy prepared");
    a.modules()
        .activate(Kind::GossipPolicy, other.hash, Mode::Shadow)
        .unwrap();

    let admin = a.admin_addr().unwrap();
    let deadline = tokio::time::Instant::now() + LIVENESS;
    let scrape = loop {
        let scrape = http_get(admin, "/metrics").await.1;
        let has = |prefix: &str| scrape.lines().any(|l| l.starts_with(prefix));
        if has("modnode_upgrade_pending_votes{")
            && has("modnode_upgrade_ready_here{")
            && has("modnode_module_shadow_compared_total{")
            && scrape.lines().any(|l| {
                l.starts_with(r#"modnode_module_calls_total{kind="deposits""#) && !l.ends_with(" 0")
            })
        {
            break scrape;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no scrape with every family within {LIVENESS:?}; the last:\n{scrape}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    a.shutdown().await;
    b.shutdown().await;
    scrape
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_name_only_metrics_a_running_node_exports() {
    let scrape = full_scrape().await;
    let exported = exported_names(&scrape);
    for kind in ["deposits", "checkpoint", "gossip-policy"] {
        assert!(
            scrape
                .lines()
                .any(|l| l.starts_with("modnode_module_version_info{")
                    && l.contains(&format!(r#"kind="{kind}",role="active""#))),
            "no active {kind} version in\n{scrape}"
        );
    }
    assert!(exported.contains("modnode_build_info"), "{scrape}");

    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(examples().join("grafana/modnode.json")).unwrap(),
    )
    .unwrap();
    let queries = dashboard_queries(&dashboard);
    let rules = std::fs::read_to_string(examples().join("prometheus/alerts.yml")).unwrap();
    let alerts = alert_exprs(&rules);
    for name in [
        "ModnodeFallingBehind",
        "ModnodeNoPeers",
        "ModnodeBreakerTripped",
        "ModnodeShadowDivergence",
        "ModnodeUpgradeNotReady",
        "ModnodeDiskGrowth",
    ] {
        assert!(
            alerts.iter().any(|(a, _)| a == name),
            "alerts.yml has no {name}"
        );
    }

    let mut named = BTreeSet::new();
    let mut missing = Vec::new();
    let sources = queries
        .iter()
        .map(|q| ("grafana/modnode.json".to_string(), q.clone()))
        .chain(
            alerts
                .iter()
                .map(|(a, e)| (format!("prometheus/alerts.yml {a}"), e.clone())),
        );
    for (file, query) in sources {
        for name in metric_names(&query) {
            if !exported.contains(&name) {
                missing.push(format!("{file}: {name} in {query}"));
            }
            named.insert(name);
        }
    }
    assert!(
        missing.is_empty(),
        "queries name metrics the node does not export:\n{}",
        missing.join("\n")
    );
    // Not vacuous: the files were read and their queries found.
    assert!(
        named.len() >= 40,
        "only {} metrics named: {named:?}",
        named.len()
    );
    // And the check can fail: a misspelt metric is caught against the same scrape.
    assert!(
        metric_names("rate(modnode_blocks_producd_total[5m])")
            .iter()
            .any(|n| !exported.contains(n))
    );
}

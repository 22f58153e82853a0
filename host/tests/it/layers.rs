//! The library's layering, checked: every `crate::<module>` path in non-test code of
//! `host/src/<module>` must point to a module of the same or a lower layer (ARCHITECTURE.md,
//! "Layers"). The arrows that still point up are listed below, each with why it exists; the
//! test fails when a new one appears *and* when a listed one is gone (then take it off the
//! list), so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of the library and its layer, lowest first. A module may import from
/// its own layer's modules only where the order below allows it (`RANK`), never from a higher
/// one.
const RANK: &[(&str, u32)] = &[
    // Utilities that import nothing from the crate.
    ("clock", 0),
    ("files", 0),
    ("crypto", 0),
    ("alloc_stats", 0),
    // Carrying a node's log span onto its threads.
    ("log_span", 0),
    // How long work shows its progress (a bar or log lines).
    ("progress", 0),
    // HTTP/1.1 serving with bounded connections (the admin API and the dev contract's
    // endpoint).
    ("http_server", 0),
    // Running background threads at the lowest priority.
    ("thread_priority", 0),
    // The module kinds' names and scopes.
    ("kind", 0),
    // One type per kind of 32-byte hash (block, state root, module).
    ("hashes", 0),
    // The state value and the key-value store it is saved in.
    ("state", 1),
    // The chain's own deposit types (over `state`'s eth1 data and registry), which the runtime
    // converts the deposits modules' WIT types to.
    ("deposit", 1),
    // Checkpoint chunking's own types (leaf ranges, plan parameters, chunk contents and
    // errors), which the runtime converts the checkpoint modules' WIT types to.
    ("chunk", 1),
    ("store", 2),
    // The wasm engine, the module kinds and their host interfaces.
    ("runtime", 3),
    // What every node computes alike: blocks, genesis, eth1 state, deposits engines, the
    // transition.
    ("consensus", 4),
    // Every state the node keeps, and the per-block state records they are rebuilt from.
    ("state_cache", 5),
    // Fork choice, import and commit, the store of blocks.
    ("chain", 6),
    // Checkpoints, the module store, the deposit contract's side.
    ("checkpoint", 7),
    ("modules_store", 7),
    ("deposit_source", 7),
    // QUIC transport and wire types (carry blocks and checkpoint chunks).
    ("net", 8),
    // Tools over the above, and the admin API's types and server.
    ("upgrade_check", 9),
    ("admin", 9),
    ("testnet", 10),
    // The node: wires everything.
    ("node", 11),
];

/// Arrows that still point up: `(from, to, why)`. Remove a line when its arrow is gone.
const KNOWN_UPWARD: &[(&str, &str, &str)] = &[];

fn rank(module: &str) -> Option<u32> {
    RANK.iter().find(|(m, _)| *m == module).map(|(_, r)| *r)
}

/// Every `.rs` file of the module `name` (its `name.rs` and `name/`), test files excluded.
fn files_of(src: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src.join(format!("{name}.rs"));
    if file.exists() {
        files.push(file);
    }
    let mut dirs = vec![src.join(name)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let file_name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if file_name != "tests" {
                    dirs.push(path);
                }
            } else if file_name.ends_with(".rs") && file_name != "tests.rs" {
                files.push(path);
            }
        }
    }
    files
}

/// The code of `source` without comments and without an inline `#[cfg(test)] mod tests { … }`
/// at its end.
fn code_of(source: &str) -> String {
    let source = match source.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &source[..at],
        None => source,
    };
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `crate::<module>` targets named in `code`.
fn targets(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn no_module_imports_from_a_layer_above_it_except_the_listed_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut upward: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (module, from_rank) in RANK {
        let files = files_of(&src, module);
        assert!(!files.is_empty(), "no source for module `{module}`");
        for file in files {
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            for target in targets(&code) {
                let Some(to_rank) = rank(&target) else {
                    continue;
                };
                if target != *module && to_rank > *from_rank {
                    let shown = file.strip_prefix(&src).unwrap().display().to_string();
                    upward
                        .entry((module.to_string(), target))
                        .or_default()
                        .push(shown);
                }
            }
        }
    }
    let known: BTreeSet<(String, String)> = KNOWN_UPWARD
        .iter()
        .map(|(from, to, _)| (from.to_string(), to.to_string()))
        .collect();
    let new: Vec<String> = upward
        .iter()
        .filter(|(arrow, _)| !known.contains(*arrow))
        .map(|((from, to), files)| format!("{from} -> {to} in {}", files.join(", ")))
        .collect();
    assert!(
        new.is_empty(),
        "new imports from a higher layer (see ARCHITECTURE.md, Layers): {new:#?}"
    );
    let gone: Vec<&(String, String)> = known.iter().filter(|a| !upward.contains_key(*a)).collect();
    assert!(
        gone.is_empty(),
        "these arrows are gone: take them off KNOWN_UPWARD: {gone:?}"
    );
}

#[test]
fn every_library_module_has_a_layer() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').trim_end_matches(" {"))
        .filter(|m| *m != "artifacts")
        .collect();
    assert!(declared.len() >= RANK.len(), "{declared:?}");
    for module in declared {
        assert!(
            rank(module).is_some(),
            "`{module}` has no layer in RANK (and in ARCHITECTURE.md)"
        );
    }
}

/// What a block's transition is made of, below `consensus::apply_block`: its steps (the
/// `transition` module, private to `consensus`, so naming it does not compile outside) and
/// the parts of it `consensus` keeps public for their own tests (deposits@3's queue step, a
/// migration's run). Naming one of them outside `consensus` is running a transition that is
/// not `apply_block`.
const TRANSITION_STEPS: &[&str] = &[
    "transition::",
    "engine_for(",
    "deposits_v3::run(",
    "migration::run(",
    "migration::rebase(",
];

/// The code of every non-test file of `module`, one string per file with its path.
fn module_code(src: &Path, module: &str) -> Vec<(String, String)> {
    files_of(src, module)
        .into_iter()
        .map(|file| {
            let shown = file.strip_prefix(src).unwrap().display().to_string();
            (shown, code_of(&std::fs::read_to_string(&file).unwrap()))
        })
        .collect()
}

#[test]
fn apply_block_is_the_only_transition_the_chain_cache_checkpoint_and_upgrade_check_run() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for module in ["chain", "state_cache", "checkpoint", "upgrade_check"] {
        for (file, code) in module_code(&src, module) {
            for step in TRANSITION_STEPS {
                if code.contains(step) {
                    found.push(format!("{file}: {step}"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "transition steps run outside consensus::apply_block: {found:#?}"
    );
    // Import, side-branch execution and regeneration go through it; `upgrade-check --replay`
    // through `Chain::import`; checkpoint creation and restore execute no block.
    let calls = |module: &str, what: &str| {
        module_code(&src, module)
            .into_iter()
            .filter(|(_, code)| code.contains(what))
            .map(|(file, _)| file)
            .collect::<Vec<_>>()
    };
    assert_eq!(calls("chain", "apply_block("), ["chain/import.rs"]);
    assert_eq!(calls("chain", "consensus::build_block("), ["chain.rs"]);
    assert_eq!(
        calls("state_cache", "apply_block("),
        ["state_cache/regen.rs"]
    );
    assert!(calls("upgrade_check", ".import(").contains(&"upgrade_check/replay.rs".to_string()));
    assert!(calls("checkpoint", "apply_block(").is_empty());
}

/// What the deposits modules' bindings export, by the names and paths `runtime::deposits`
/// offers them under (its `@2.0.0` types, `v3`'s and `migration`'s, and the functions that
/// build or read them). Outside `runtime/` the chain's own types (`crate::deposit`) stand for
/// them: the runtime converts at the call.
const DEPOSITS_WIT_NAMES: &[&str] = &[
    // `runtime::deposits`
    "BlockContext",
    "Deposit",
    "WitEth1Data",
    "Outcome",
    "ProcessError",
    "RegistryError",
    "SignatureSet",
    "registry_error",
    "bindings",
    // `runtime::deposits::convert`: the conversions to them.
    "convert",
    // `runtime::deposits::v3`
    "BlockContextV3",
    "DepositV3",
    "EpochContext",
    "EpochProcessed",
    "EpochOutcome",
    "WitPendingDeposit",
    "ProcessErrorV3",
    "QueueError",
    "Queued",
    "RegistryErrorV3",
    "V3Result",
    "from_wit",
    "to_wit",
    "block_context",
    "deposit",
    // `runtime::deposits::migration`
    "Migrated",
    "MigrationContext",
    "MigrationResult",
];

/// What the checkpoint modules' bindings export, by the names and paths `runtime::checkpoint`
/// could offer them under. Outside `runtime/` checkpoint chunking's own types (`crate::chunk`)
/// stand for them.
const CHECKPOINT_WIT_NAMES: &[&str] = &[
    "LeafRange",
    "PlanParams",
    "ChunkContents",
    "ChunkError",
    "bindings",
    "types",
    "state_reader",
    "chunker",
    "convert",
];

/// What the gossip policies' bindings export (`@1.0.0`'s, the host's plan types, and
/// `@2.0.0`'s), by the names and paths `runtime::gossip_policy` offers them under, and the
/// conversions to and from them. Outside `runtime/` the gossip engine's types
/// (`modnode_gossip::policy`) stand for them; its `PolicyEvent` is the runtime's.
const GOSSIP_POLICY_WIT_NAMES: &[&str] = &[
    "MessageKind",
    "MessageMeta",
    "PeerStats",
    "Priority",
    "SendMode",
    "SendPlan",
    "Target",
    "bindings",
    "bindings_v2",
    "v2",
    "convert",
    "to_wit_kind",
    "to_wit_meta",
    "to_wit_peers",
    "to_wit_event",
    "from_wit_plan",
];

/// Each runtime module with bindgen types, as the path others would name it by, and the WIT
/// names under it that no file outside `runtime/` may take.
const WIT_NAMES: &[(&str, &[&str])] = &[
    ("runtime::deposits::", DEPOSITS_WIT_NAMES),
    ("runtime::checkpoint::", CHECKPOINT_WIT_NAMES),
    ("runtime::gossip_policy::", GOSSIP_POLICY_WIT_NAMES),
];

/// Files outside `runtime/` that still call a module through its WIT types:
/// `(file, why)`. Remove a line when the file no longer does.
/// (`bench host-call`'s WIT-level deposits call is `runtime::deposits::bench_support`'s.)
const KNOWN_WIT_CALLERS: &[(&str, &str)] = &[];

/// Every non-test `.rs` file under `dir`, as (path shown from `src`, code).
fn sources_under(src: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let shown = path.strip_prefix(src).unwrap().display().to_string();
        let file_name = path.file_name().unwrap().to_string_lossy().to_string();
        if shown == "runtime" || shown == "runtime.rs" || file_name == "tests" {
            continue;
        }
        if path.is_dir() {
            sources_under(src, &path, out);
        } else if file_name.ends_with(".rs") && file_name != "tests.rs" {
            out.push((shown, code_of(&std::fs::read_to_string(&path).unwrap())));
        }
    }
}

/// The names `code` takes from the runtime module `prefix` names (or a module under it): each
/// path after `prefix` (`"runtime::deposits::"`), a `{ … }` group read whole, split into
/// identifiers.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        let mut depth = 0usize;
        let path: String = rest
            .chars()
            .take_while(|&c| match c {
                '{' => {
                    depth += 1;
                    true
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    true
                }
                _ if depth > 0 => true,
                c => c.is_alphanumeric() || c == '_' || c == ':',
            })
            .collect();
        for name in path.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[test]
fn no_file_outside_the_runtime_names_a_wit_type() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources_under(&src, &src, &mut files);
    for scanned in [
        "consensus/deposit_engine.rs",
        "checkpoint/create.rs",
        "upgrade_check/versions.rs",
        "net/gossip.rs",
        "bench/host_call.rs",
    ] {
        assert!(
            files.iter().any(|(f, _)| f == scanned),
            "{scanned} not scanned"
        );
    }
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, code) in &files {
        let mut names: Vec<String> = WIT_NAMES
            .iter()
            .flat_map(|(prefix, wit)| {
                names_after(code, prefix)
                    .into_iter()
                    .filter(|n| wit.contains(&n.as_str()))
            })
            .collect();
        if code.contains("bindgen!") {
            names.push("bindgen!".to_string());
        }
        if !names.is_empty() {
            found.insert(file.clone(), names);
        }
    }
    let known: BTreeSet<&str> = KNOWN_WIT_CALLERS.iter().map(|(f, _)| *f).collect();
    let new: Vec<String> = found
        .iter()
        .filter(|(file, _)| !known.contains(file.as_str()))
        .map(|(file, names)| format!("{file}: {}", names.join(", ")))
        .collect();
    assert!(
        new.is_empty(),
        "WIT types of modules named outside runtime/ (use the chain's types in crate::deposit, \
         chunking's in crate::chunk, the gossip engine's in modnode_gossip and the runtime's calls \
         in them): {new:#?}"
    );
    let gone: Vec<&&str> = known.iter().filter(|f| !found.contains_key(**f)).collect();
    assert!(
        gone.is_empty(),
        "these files no longer name a WIT type: take them off KNOWN_WIT_CALLERS: {gone:?}"
    );
}

#[test]
fn the_wit_scan_reads_grouped_and_nested_imports() {
    let names = names_after(
        "use crate::runtime::deposits::{DepositsModule, v3::{EpochContext, V3Output}};\n\
         fn f(c: crate::runtime::deposits::migration::MigrationContext) {}",
        "runtime::deposits::",
    );
    for name in [
        "DepositsModule",
        "EpochContext",
        "V3Output",
        "migration",
        "MigrationContext",
    ] {
        assert!(names.contains(name), "{names:?}");
    }
    assert!(!names.contains("fn"), "{names:?}");
}

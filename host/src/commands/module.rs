//! `modnode module …`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use modnode::admin::AdminToken;
use modnode::admin::client::{self, Target};
use modnode::runtime::{Kind, Mode, Runtime, RuntimeConfig, inspect};
use serde_json::{Value, json};

/// Which node a module command talks to.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// Data directory of the running node (its admin address and token are read there).
    #[arg(long, default_value = "modnode-data", conflicts_with = "node")]
    pub data_dir: PathBuf,
    /// The node's admin API as `http://<ip>:<port>`, instead of `--data-dir`.
    #[arg(long, value_name = "URL")]
    pub node: Option<String>,
    /// With `--node`: the file holding the admin token (the node's `admin.token`); without
    /// it the node refuses every request but `/metrics`.
    #[arg(long, requires = "node")]
    pub token_file: Option<PathBuf>,
}

impl NodeArgs {
    pub(crate) fn target(&self) -> anyhow::Result<Target> {
        match &self.node {
            Some(url) => {
                let token = self
                    .token_file
                    .as_deref()
                    .map(AdminToken::load_file)
                    .transpose()?;
                Ok(Target::url(url, token)?)
            }
            None => Target::data_dir(&self.data_dir).with_context(|| {
                format!(
                    "cannot find a running node in {} (pass --data-dir or --node)",
                    self.data_dir.display()
                )
            }),
        }
    }
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// `modnode module upload <file>`: sends the module to the node, which validates, compiles and
/// warms it before answering.
pub fn upload(file: &Path, node: &NodeArgs, json: bool) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::upload_module(&target, bytes))
        .with_context(|| {
            format!(
                "the node at {} did not accept {}",
                target.addr(),
                file.display()
            )
        })?;
    if json {
        println!("{answer}");
        return warn_of_namesakes(&target, at(&answer, "/module"));
    }
    let module = at(&answer, "/module");
    let status = at(&answer, "/status").as_str().unwrap_or("?");
    let what = if status == "already-stored" {
        "already stored; nothing to do"
    } else {
        "stored, compiled and warmed: ready"
    };
    println!(
        "{}: {}-v{} sha256 {} — {what}",
        file.display(),
        at(module, "/kind").as_str().unwrap_or("?"),
        at(module, "/module_version"),
        at(module, "/sha256").as_str().unwrap_or("?"),
    );
    if status != "already-stored" {
        println!(
            "  compiled in {} ms ({} bytes of machine code), warmed in {} µs ({} fuel, {} recent real inputs)",
            at(module, "/compile_ms"),
            at(module, "/compiled_size"),
            at(module, "/warm_us"),
            at(module, "/warm_fuel"),
            at(module, "/warm_real_inputs")
        );
    }
    warn_of_namesakes(&target, module)
}

/// Warns on stderr of each other module the node holds under the name of the one just
/// uploaded (a copied template still describing itself as the original); best effort, the
/// upload itself succeeded.
fn warn_of_namesakes(target: &Target, module: &Value) -> anyhow::Result<()> {
    if let (Some(kind), Some(version), Some(sha256)) = (
        at(module, "/kind").as_str(),
        at(module, "/module_version").as_u64(),
        at(module, "/sha256").as_str(),
    ) && let Ok(listing) = runtime()?.block_on(client::modules(target))
    {
        for warning in super::module_namesakes::listed(kind, version, sha256, &listing) {
            eprintln!("{warning}");
        }
    }
    Ok(())
}

/// `modnode module list`: per kind, the slot (active, scheduled, shadow, canary, previous,
/// circuit breaker), every version ready to activate and every stored version.
pub fn list(node: &NodeArgs, json: bool) -> anyhow::Result<()> {
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::modules(&target))
        .with_context(|| format!("cannot list the modules of the node at {}", target.addr()))?;
    if json {
        println!("{answer}");
        return Ok(());
    }
    let empty = Vec::new();
    for kind in at(&answer, "/kinds").as_array().unwrap_or(&empty) {
        print_kind(kind, &empty);
    }
    for s in at(&answer, "/scheduled").as_array().unwrap_or(&empty) {
        println!(
            "{}\n  scheduled: sha256 {} at height {}; ready here: {}, peers ready {}/{}, authorities ready {}/{}",
            at(s, "/kind").as_str().unwrap_or("?"),
            at(s, "/sha256").as_str().unwrap_or("?"),
            at(s, "/height"),
            at(s, "/ready_here"),
            at(s, "/peers_ready"),
            at(s, "/peers_connected"),
            at(s, "/authorities_ready"),
            at(s, "/authorities"),
        );
    }
    print_governance(at(&answer, "/governance"), &empty);
    Ok(())
}

/// The on-chain tally: pending votes, readiness attestations against the gate, latest drops.
fn print_governance(g: &Value, empty: &Vec<Value>) {
    if !g.is_object() {
        return;
    }
    let count = |v: &Value| v.as_array().map_or(0, Vec::len);
    let needed = at(g, "/votes_needed");
    let op = |v: &Value| {
        format!(
            "{} {} at height {}",
            str_of(at(v, "/kind")),
            str_of(at(v, "/sha256")),
            at(v, "/height")
        )
    };
    for s in at(g, "/scheduled").as_array().unwrap_or(empty) {
        println!(
            "  on chain:  {}: attested ready by {}/{} authorities needed by the gate at height {}",
            op(s),
            count(at(s, "/attested")),
            needed,
            at(s, "/gate_at"),
        );
    }
    for p in at(g, "/pending").as_array().unwrap_or(empty) {
        println!(
            "  voting:    {} {}: {}/{} votes, expires at height {}",
            str_of(at(p, "/action")),
            op(p),
            count(at(p, "/votes")),
            needed,
            at(p, "/expires_at"),
        );
    }
    for d in at(g, "/dropped").as_array().unwrap_or(empty) {
        println!(
            "  dropped:   {} ({} at height {}, {} attested ready)",
            op(d),
            str_of(at(d, "/reason")),
            at(d, "/at"),
            at(d, "/attested"),
        );
    }
}

/// The value at JSON `pointer` (`"/slot/active/name"`) in an admin API answer, `null` when it
/// is missing: answers are printed leniently, and a missing field prints as `null` or `?`.
pub(super) fn at<'a>(value: &'a Value, pointer: &str) -> &'a Value {
    value.pointer(pointer).unwrap_or(&Value::Null)
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

fn warmup(w: &Value) -> String {
    let real = at(w, "/real_inputs").as_u64().unwrap_or(0);
    let inputs = if real == 0 {
        "built-in inputs".to_string()
    } else {
        format!("built-in + {real} recent real inputs")
    };
    format!(
        "warm-up {} fuel in {} µs on {inputs}",
        at(w, "/fuel"),
        at(w, "/latency_us")
    )
}

/// ` on modnode:<kind>@<version>` (and the state kept for it, if any) for a version in a slot
/// or ready; empty for an answer from a node that does not report contracts.
fn contract(v: &Value) -> String {
    let Some(contract) = at(v, "/contract").as_str() else {
        return String::new();
    };
    let migration = if at(v, "/migration").as_bool() == Some(true) {
        ", migrates the state at its activation"
    } else {
        ""
    };
    match at(v, "/state_bytes").as_u64() {
        Some(n) if n > 0 => format!(" on {contract}{migration}, {n} bytes of state kept"),
        _ => format!(" on {contract}{migration}"),
    }
}

fn print_kind(kind: &Value, empty: &Vec<Value>) {
    let slot = at(kind, "/slot");
    println!(
        "{} ({})",
        str_of(at(kind, "/kind")),
        at(slot, "/scope").as_str().unwrap_or("no slot")
    );
    match at(slot, "/active/name").as_str() {
        Some(name) => {
            let probation = match at(slot, "/active_faults").as_u64() {
                Some(f) => format!(
                    "; on probation, {f}/{} faults",
                    at(slot, "/breaker_threshold")
                ),
                None => String::new(),
            };
            println!(
                "  active:    {name}{} ({}{probation})",
                contract(at(slot, "/active")),
                warmup(at(slot, "/active/warmup"))
            );
        }
        None => println!(
            "  active:    {}",
            at(kind, "/active/name").as_str().unwrap_or("(none)")
        ),
    }
    let s = at(slot, "/scheduled");
    if s.is_object() {
        let ready = |v: &Value| {
            v.as_u64()
                .map_or("not reported yet".into(), |n| n.to_string())
        };
        println!(
            "  scheduled: {} at height {} (peers ready: {}, authorities ready: {})",
            str_of(at(s, "/hash")),
            at(s, "/height"),
            ready(at(s, "/peers_ready")),
            ready(at(s, "/authorities_ready"))
        );
    }
    let sh = at(slot, "/shadow");
    if sh.is_object() {
        println!(
            "  shadow:    {}{} — {} compared, {} divergences, {} faults, {} skipped",
            str_of(at(sh, "/version/name")),
            contract(at(sh, "/version")),
            at(sh, "/compared"),
            at(sh, "/divergences"),
            at(sh, "/faults"),
            at(sh, "/skipped")
        );
        if let Some(d) = at(sh, "/recent_divergences")
            .as_array()
            .and_then(|d| d.last())
        {
            println!("    last divergence on input {}", str_of(at(d, "/input")));
            println!("      active: {}", str_of(at(d, "/active")));
            println!("      shadow: {}", str_of(at(d, "/shadow")));
        }
    }
    let c = at(slot, "/canary");
    if c.is_object() {
        println!(
            "  canary:    {}{} — {}% of calls, {} calls, {} faults",
            str_of(at(c, "/version/name")),
            contract(at(c, "/version")),
            at(c, "/percent"),
            at(c, "/calls"),
            at(c, "/faults")
        );
    }
    if let Some(name) = at(slot, "/previous/name").as_str() {
        println!(
            "  previous:  {name}{} (a rollback returns to it at once)",
            contract(at(slot, "/previous"))
        );
    }
    if slot.is_object() {
        println!(
            "  breaker:   rolls back after {} faults; {} automatic rollbacks; {} failed calls",
            at(slot, "/breaker_threshold"),
            at(slot, "/breaker_trips"),
            at(slot, "/failed_calls")
        );
        for t in at(slot, "/recent_trips").as_array().unwrap_or(empty) {
            println!(
                "    rolled back {} ({}) after {} faults: {}",
                str_of(at(t, "/module")),
                str_of(at(t, "/mode")),
                at(t, "/faults"),
                str_of(at(t, "/last_fault"))
            );
        }
    }
    for v in at(kind, "/ready").as_array().unwrap_or(empty) {
        println!(
            "  ready:     {}{} sha256 {} ({}), from {}",
            str_of(at(v, "/name")),
            contract(v),
            str_of(at(v, "/sha256")),
            warmup(at(v, "/warmup")),
            str_of(at(v, "/from"))
        );
    }
    // The answer to `activate` / `rollback` carries the slot only.
    let Some(stored) = at(kind, "/stored").as_array() else {
        return;
    };
    if stored.is_empty() {
        println!("  stored:    (none uploaded)");
    }
    for m in stored {
        println!(
            "  stored:    v{} sha256 {} {} bytes, contract {}, first seen {} ms, from {}",
            at(m, "/module_version"),
            str_of(at(m, "/sha256")),
            at(m, "/size"),
            str_of(at(m, "/contract")),
            at(m, "/first_seen_unix_ms"),
            str_of(at(m, "/source")),
        );
    }
}

/// Prints the answer of a slot operation: JSON as is, or `headline(slot)` and the slot.
fn show_slot(answer: &Value, json: bool, headline: impl FnOnce(&Value) -> String) {
    if json {
        println!("{answer}");
        return;
    }
    let slot = at(answer, "/slot");
    println!("{}: {}", str_of(at(answer, "/kind")), headline(slot));
    print_kind(
        &json!({"kind": at(answer, "/kind"), "slot": slot}),
        &Vec::new(),
    );
}

/// `modnode module activate <hash> [--shadow | --canary P]`.
pub fn activate(hash: &str, mode: Mode, node: &NodeArgs, json: bool) -> anyhow::Result<()> {
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::activate_module(&target, hash, mode))
        .with_context(|| {
            format!(
                "the node at {} did not activate {hash} ({mode})",
                target.addr()
            )
        })?;
    show_slot(&answer, json, |slot| {
        let name = match mode {
            Mode::Live => str_of(at(slot, "/active/name")),
            Mode::Shadow => str_of(at(slot, "/shadow/version/name")),
            Mode::Canary(_) => str_of(at(slot, "/canary/version/name")),
        };
        format!("{name} is now {mode}")
    });
    Ok(())
}

/// `modnode module rollback <kind>`.
pub fn rollback(kind: Kind, node: &NodeArgs, json: bool) -> anyhow::Result<()> {
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::rollback_module(&target, kind))
        .with_context(|| format!("the node at {} did not roll {kind} back", target.addr()))?;
    show_slot(&answer, json, |slot| {
        format!("rolled back to {}", str_of(at(slot, "/active/name")))
    });
    Ok(())
}

/// `modnode module cancel <kind>`.
pub fn cancel(kind: Kind, node: &NodeArgs, json: bool) -> anyhow::Result<()> {
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::cancel_candidate(&target, kind))
        .with_context(|| {
            format!(
                "the node at {} did not stop {kind}'s shadow or canary",
                target.addr()
            )
        })?;
    show_slot(&answer, json, |slot| {
        format!(
            "shadow / canary stopped; {} serves every call",
            str_of(at(slot, "/active/name"))
        )
    });
    Ok(())
}

/// `modnode module propose <sha256> --kind <kind> --activate-at <height>`.
pub fn propose(
    sha256: &str,
    kind: &str,
    activate_at: u64,
    node: &NodeArgs,
    json: bool,
) -> anyhow::Result<()> {
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::propose_upgrade(
            &target,
            "upgrade",
            kind,
            sha256,
            activate_at,
        ))
        .with_context(|| format!("the node at {} refused the proposal", target.addr()))?;
    if json {
        println!("{answer}");
    } else {
        println!(
            "proposed: {kind} -> {sha256} at height {activate_at}; this node's blocks vote for it \
             and attest it ready until a majority of the authorities has. It activates only if a \
             majority of the authorities attests it ready upgrade_lead_blocks blocks before the \
             height (`modnode module list` shows the tally)"
        );
    }
    Ok(())
}

/// `modnode module revoke <sha256> --kind <kind> --height <height>`.
pub fn revoke(
    sha256: &str,
    kind: &str,
    height: u64,
    node: &NodeArgs,
    json: bool,
) -> anyhow::Result<()> {
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::propose_upgrade(
            &target, "cancel", kind, sha256, height,
        ))
        .with_context(|| format!("the node at {} refused the revocation", target.addr()))?;
    if json {
        println!("{answer}");
    } else {
        println!(
            "revocation proposed: {kind} -> {sha256} at height {height}; this node's blocks vote \
             to cancel it until a majority of the authorities has (it must be carried more than \
             upgrade_lead_blocks before the height)"
        );
    }
    Ok(())
}

/// `modnode module inspect <file>`.
pub fn inspect(file: &Path, json: bool) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let info = inspect::validate(&bytes)
        .with_context(|| format!("{} is not a usable modnode module", file.display()))?;
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let module = runtime
        .load(&bytes)
        .with_context(|| format!("{} failed to load", file.display()))?;
    let meta = module.meta();
    // On stderr: `--json` output stays one object.
    for warning in super::module_namesakes::built_in(
        &info.kind.to_string(),
        meta.info.version,
        info.sha256.as_bytes(),
    ) {
        eprintln!("{warning}");
    }
    let world = format!("modnode:{}/{}", info.kind.package(), info.kind.package());
    let contract = format!("modnode:{}@{}", info.kind.package(), info.contract);
    if json {
        let value = serde_json::json!({
            "file": file.display().to_string(),
            "kind": info.kind.package(),
            "world": world,
            "contract": contract,
            "migration": info.has_migration(),
            "module_version": meta.info.version,
            "description": meta.info.description,
            "params": meta.info.params.iter().map(|(k, v)| serde_json::json!([k, v])).collect::<Vec<_>>(),
            "sha256": hex::encode(info.sha256),
            "size": info.size,
            "imports": info.imports,
            "exports": info.exports,
        });
        println!("{value}");
        return Ok(());
    }
    println!("file:        {}", file.display());
    println!("kind:        {} (world {world})", info.kind);
    println!("contract:    {contract}");
    println!(
        "migration:   {}",
        if info.has_migration() {
            "yes (runs once, at its activation height, on the state before it)"
        } else {
            "no"
        }
    );
    println!(
        "module:      {}-v{} — {}",
        info.kind, meta.info.version, meta.info.description
    );
    for (k, v) in &meta.info.params {
        println!("  param:     {k} = {v}");
    }
    println!("sha256:      {}", hex::encode(info.sha256));
    println!("size:        {} bytes", info.size);
    println!("imports:     {}", join(&info.imports));
    println!("exports:     {}", join(&info.exports));
    Ok(())
}

fn join(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".into()
    } else {
        items.join(", ")
    }
}

/// `modnode module componentize <core.wasm> -o <out.wasm>`.
pub fn componentize(core: &Path, output: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(core).with_context(|| format!("cannot read {}", core.display()))?;
    if wasmparser::Parser::is_component(&bytes) {
        anyhow::bail!(
            "{} is already a component; `modnode module inspect` it instead",
            core.display()
        );
    }
    if !wasmparser::Parser::is_core_wasm(&bytes) {
        anyhow::bail!("{} is not a core WebAssembly module", core.display());
    }
    let component = modnode_guest_build::componentize(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e}\nhint: build the crate with wit-bindgen's `generate!` for one of the modnode worlds",
            core.display()
        )
    })?;
    let info = inspect::validate(&component).with_context(|| {
        format!(
            "the component made from {} is not a usable modnode module",
            core.display()
        )
    })?;
    let tmp = output.with_extension("wasm.tmp");
    std::fs::write(&tmp, &component).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, output).with_context(|| format!("cannot write {}", output.display()))?;
    let kind: Kind = info.kind;
    println!(
        "wrote {} ({kind} module, contract {}, {} bytes, sha256 {})",
        output.display(),
        info.contract,
        component.len(),
        hex::encode(info.sha256)
    );
    Ok(())
}

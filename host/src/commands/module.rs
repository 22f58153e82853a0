//! `modnode module …`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use modnode::admin::AdminToken;
use modnode::admin::client::{self, Target};
use modnode::runtime::{Kind, Runtime, RuntimeConfig, inspect};

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
        return Ok(());
    }
    let module = &answer["module"];
    let status = answer["status"].as_str().unwrap_or("?");
    let what = if status == "already-stored" {
        "already stored; nothing to do"
    } else {
        "stored, compiled and warmed: ready"
    };
    println!(
        "{}: {}-v{} sha256 {} — {what}",
        file.display(),
        module["kind"].as_str().unwrap_or("?"),
        module["module_version"],
        module["sha256"].as_str().unwrap_or("?"),
    );
    if status != "already-stored" {
        println!(
            "  compiled in {} ms ({} bytes of machine code), warmed in {} µs",
            module["compile_ms"], module["compiled_size"], module["warm_us"]
        );
    }
    Ok(())
}

/// `modnode module list`: per kind, the active module and every stored version.
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
    for kind in answer["kinds"].as_array().unwrap_or(&empty) {
        println!("{}", kind["kind"].as_str().unwrap_or("?"));
        match kind["active"]["name"].as_str() {
            Some(name) => println!("  active:   {name}"),
            None => println!("  active:   (none)"),
        }
        let stored = kind["stored"].as_array().unwrap_or(&empty);
        if stored.is_empty() {
            println!("  stored:   (none uploaded)");
        }
        for m in stored {
            println!(
                "  stored:   v{} sha256 {} {} bytes, contract {}, first seen {} ms, from {}",
                m["module_version"],
                m["sha256"].as_str().unwrap_or("?"),
                m["size"],
                m["contract"].as_str().unwrap_or("?"),
                m["first_seen_unix_ms"],
                m["source"].as_str().unwrap_or("?"),
            );
        }
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
    let world = format!("modnode:{}/{}", info.kind.package(), info.kind.package());
    let contract = format!("modnode:{}@{}", info.kind.package(), info.contract);
    if json {
        let value = serde_json::json!({
            "file": file.display().to_string(),
            "kind": info.kind.package(),
            "world": world,
            "contract": contract,
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

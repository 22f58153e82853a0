//! `modnode module …`.

use std::path::Path;

use anyhow::Context as _;
use modnode::runtime::{Kind, Runtime, RuntimeConfig, inspect};

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
    println!("imports:     {}", list(&info.imports));
    println!("exports:     {}", list(&info.exports));
    Ok(())
}

fn list(items: &[String]) -> String {
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

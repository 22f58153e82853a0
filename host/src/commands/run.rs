//! `modnode run`: a node on its embedded defaults.

use std::path::Path;

use anyhow::Context as _;
use modnode::runtime::{Runtime, RuntimeConfig};

/// Loads and warms every embedded module (compiled artifacts cached under the data dir), then
/// runs until Ctrl-C.
pub fn run(data_dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(data_dir.join("module-cache")),
        ..RuntimeConfig::default()
    })?;
    for (name, bytes) in modnode::artifacts::EMBEDDED {
        let module = runtime
            .load(bytes)
            .with_context(|| format!("embedded module {name} failed to load"))?;
        let meta = module.meta();
        tracing::info!(module = %meta.name(), contract = %meta.component.contract, "module ready");
    }
    let stats = runtime.cache().stats();
    tracing::info!(compiled = stats.compiles(), from_cache = stats.hits(), data_dir = %data_dir.display(), "node running; Ctrl-C stops it");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(tokio::signal::ctrl_c())?;
    tracing::info!("stopping");
    Ok(())
}

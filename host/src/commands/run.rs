//! `modnode run`: a single-node dev chain on the embedded defaults, and the hidden
//! `modnode debug import-loop` the crash tests drive.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use modnode::chain::genesis::Genesis;
use modnode::chain::{Chain, DepositEngine, workload};
use modnode::runtime::{LoadedModule, Runtime, RuntimeConfig};
use modnode::state::RegistryRead;
use modnode::store::SledStore;

/// The deposits version a fresh node activates.
pub const DEFAULT_DEPOSITS: &str = "deposits-v2";

/// Opens the node's chain: runtime with the artifact cache, every embedded module loaded and
/// warmed, the sled store, and the genesis (the embedded dev genesis unless a file is given).
pub fn open_chain(data_dir: &Path, genesis: Option<&PathBuf>) -> anyhow::Result<Chain> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(data_dir.join("module-cache")),
        ..RuntimeConfig::default()
    })?;
    let mut deposits = None;
    for (name, bytes) in modnode::artifacts::EMBEDDED {
        let module = runtime
            .load(bytes)
            .with_context(|| format!("embedded module {name} failed to load"))?;
        tracing::info!(module = %module.meta().name(), contract = %module.meta().component.contract, "module ready");
        if let (true, LoadedModule::Deposits(m)) = (*name == DEFAULT_DEPOSITS, module) {
            deposits = Some(m);
        }
    }
    let deposits =
        deposits.with_context(|| format!("{DEFAULT_DEPOSITS} is not embedded in this build"))?;
    let stats = runtime.cache().stats();
    tracing::info!(
        compiled = stats.compiles(),
        from_cache = stats.hits(),
        "modules warmed"
    );
    let genesis = match genesis {
        Some(path) => Genesis::from_file(path)?,
        None => Genesis::dev(),
    };
    let store = SledStore::open(&data_dir.join("chain"))?;
    let chain = Chain::open(
        Arc::new(store),
        genesis,
        DepositEngine::Module(Box::new(deposits)),
    )
    .with_context(|| format!("cannot open the chain in {}", data_dir.display()))?;
    Ok(chain)
}

/// `modnode run`: produce and import a block every slot until Ctrl-C.
pub fn run(data_dir: &Path, genesis: Option<&PathBuf>) -> anyhow::Result<()> {
    let mut chain = open_chain(data_dir, genesis)?;
    let head = chain.head();
    tracing::info!(
        data_dir = %data_dir.display(),
        genesis = %hex::encode(chain.genesis_hash()),
        height = head.height,
        "node running; Ctrl-C stops it"
    );
    let slot = Duration::from_millis(chain.genesis().slot_ms);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut ticker = tokio::time::interval(slot);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = ticker.tick() => {
                    let head = chain.head();
                    let block = chain.build_block(head.slot.saturating_add(1), 0, Vec::new())?;
                    let imported = chain.import(&block)?;
                    let validators = chain.registry().read().map(|r| r.validator_count()).unwrap_or(0);
                    tracing::info!(
                        height = imported.head.height,
                        hash = %hex::encode(&imported.head.hash[..8]),
                        validators,
                        "imported block"
                    );
                }
            }
        }
        anyhow::Ok(())
    })?;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// `modnode debug import-loop`: imports generated dev blocks as fast as possible, printing
/// `imported <height> <state root>` after each durable commit (crash tests kill it at random).
pub fn import_loop(data_dir: &Path, blocks: u64) -> anyhow::Result<()> {
    let mut chain = open_chain(data_dir, None)?;
    let existing: Vec<[u8; 48]> = chain
        .genesis()
        .validators
        .iter()
        .map(|v| v.pubkey)
        .collect();
    let fork = chain.genesis().genesis_fork_version;
    let mut out = std::io::stdout().lock();
    for _ in 0..blocks {
        let head = chain.head();
        let height = head.height.saturating_add(1);
        let block = chain.build_block(
            head.slot.saturating_add(1),
            0,
            workload::dev_block(height, &existing, fork),
        )?;
        let imported = chain.import(&block)?;
        writeln!(
            out,
            "imported {} {}",
            imported.head.height,
            hex::encode(imported.head.state_root)
        )?;
        out.flush()?;
    }
    Ok(())
}

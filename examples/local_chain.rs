//! A local chain in a temporary directory: genesis with 1,000 validators, three blocks of real
//! signed deposits — put into an in-memory deposit contract, voted in and carried with their
//! Merkle proofs — through the embedded `deposits-v2` module, a restart, and a look at the
//! state.
//!
//! Run: `cargo run --example local_chain`

use std::sync::Arc;

use modnode::chain::genesis::Genesis;
use modnode::chain::{Chain, DepositEngine, workload};
use modnode::runtime::{LinkedModule, Runtime, RuntimeConfig};
use modnode::state::RegistryRead;
use modnode::store::SledStore;

fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("module-cache")),
        ..Default::default()
    })?;
    let bytes = modnode::artifacts::embedded("deposits-v2")
        .ok_or_else(|| anyhow::anyhow!("deposits-v2 not embedded"))?;
    let LinkedModule::Deposits(module) = runtime.load(bytes)? else {
        anyhow::bail!("not a deposits module")
    };
    println!("loaded {}", module.meta().name());

    let genesis = Genesis::generated("example", 1_000, 1);
    let existing: Vec<[u8; 48]> = genesis.validators.iter().map(|v| v.pubkey).collect();
    let open = |module| -> anyhow::Result<Chain> {
        let store = SledStore::open(&dir.path().join("chain"))?;
        Ok(Chain::open(
            Arc::new(store),
            genesis.clone(),
            DepositEngine::Module(Box::new(module)),
        )?)
    };
    let mut chain = open(module.clone())?;
    let mut contract = workload::DevDepositLog::new();
    for height in 1..=3 {
        for deposit in workload::dev_block(height, &existing, genesis.genesis_fork_version) {
            contract.push(deposit);
        }
        let block = chain.build_block_from(height, 0, contract.eth1_data(), &contract)?;
        let imported = chain.import(&block)?;
        println!("block {height}: {:?}", imported.outcomes);
    }
    let head = chain.head();
    drop(chain);

    let chain = open(module)?;
    assert_eq!(chain.head(), head);
    let registry = chain.registry();
    println!(
        "after restart: height {}, {} validators, {} deposits applied, state root {}",
        head.height,
        registry.validator_count(),
        chain.eth1_state().deposit_index,
        hex::encode(head.state_root)
    );
    Ok(())
}

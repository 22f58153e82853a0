//! `modnode deposit submit`: hands a deposit to a running node through its admin API.

use std::path::PathBuf;

use anyhow::Context as _;
use modnode::admin::{client, deposit_json};
use modnode::chain::workload;

/// Options of `modnode deposit submit`.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// Data directory of the running node (its admin address and token are read from it).
    #[arg(long, default_value = "modnode-data")]
    pub data_dir: PathBuf,
    /// A deposit as JSON: {"pubkey", "withdrawal_credentials", "amount", "signature"}.
    #[arg(
        long,
        conflicts_with = "dev_seed",
        required_unless_present = "dev_seed"
    )]
    pub json: Option<PathBuf>,
    /// Generate a correctly signed new-validator deposit from this development seed instead.
    #[arg(long)]
    pub dev_seed: Option<u64>,
    /// Amount in Gwei for `--dev-seed`.
    #[arg(long, default_value_t = 32_000_000_000, requires = "dev_seed")]
    pub amount: u64,
    /// Genesis file of the node's chain, for the signing domain of `--dev-seed` (default: the
    /// embedded dev genesis).
    #[arg(long, requires = "dev_seed")]
    pub genesis: Option<PathBuf>,
}

/// Submits the deposit and prints its id.
pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let deposit = match (&args.json, args.dev_seed) {
        (Some(path), _) => {
            let body =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            deposit_json::decode(&body).with_context(|| format!("{}", path.display()))?
        }
        (None, Some(seed)) => {
            let genesis = super::run::genesis(args.genesis.as_ref())?;
            workload::new_validator(seed, args.amount, genesis.genesis_fork_version)
        }
        (None, None) => anyhow::bail!("give --json FILE or --dev-seed N"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let id = rt.block_on(client::submit_deposit(&args.data_dir, &deposit))?;
    println!(
        "deposit {id} accepted (pubkey 0x{})",
        hex::encode(deposit.pubkey)
    );
    Ok(())
}

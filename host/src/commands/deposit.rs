//! `modnode deposit submit`: sends a deposit to the deposit contract — the dev contract a node
//! hosts, through its JSON-RPC method `modnode_submitDeposit` — and prints the deposit's index.
//! Nodes take deposits only from the contract's log, a follow distance later, with proofs.

use std::path::PathBuf;

use anyhow::Context as _;
use modnode::chain::workload;
use modnode::deposit_source::client::RpcClient;
use modnode::deposit_source::deposit_json;
use modnode::node::DEPOSIT_CONTRACT_URL_FILE;

/// Options of `modnode deposit submit`.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// Data directory of the node hosting the dev deposit contract (its JSON-RPC URL is read
    /// from `deposit-contract.url` there).
    #[arg(long, default_value = "modnode-data", conflicts_with = "contract")]
    pub data_dir: PathBuf,
    /// JSON-RPC URL of the dev deposit contract (instead of `--data-dir`).
    #[arg(long, value_name = "URL")]
    pub contract: Option<String>,
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

/// Submits the deposit and prints its index.
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
    let url = match &args.contract {
        Some(url) => url.clone(),
        None => {
            let path = args.data_dir.join(DEPOSIT_CONTRACT_URL_FILE);
            std::fs::read_to_string(&path)
                .with_context(|| {
                    format!(
                        "cannot read {}: no node hosting the dev deposit contract has run with \
                         --data-dir {}. Only a node that produces blocks (an authority) hosts \
                         it; a follower or a --no-produce node does not, since no authority \
                         would see deposits sent there. Give the authority's --data-dir, or \
                         --contract URL (the URL its log line `node started` shows as \
                         deposit_contract)",
                        path.display(),
                        args.data_dir.display()
                    )
                })?
                .trim()
                .to_string()
        }
    };
    let client = RpcClient::new(&url)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let index = rt.block_on(client.submit_deposit(&deposit))?;
    println!(
        "deposit {index} logged by the deposit contract at {url} (pubkey 0x{})",
        hex::encode(deposit.pubkey)
    );
    Ok(())
}

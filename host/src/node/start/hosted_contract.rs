//! The dev deposit contract a node hosts when its config asks for one (`modnode run` and a
//! devnet's node 0), and the URL file `modnode deposit submit` reads to find it.

use super::*;

/// Directory in the data directory of an authority's persisted followed deposit log.
pub const DEPOSIT_LOG_DIR: &str = "deposit-log";

/// Name of the file in the data directory holding the hosted dev contract's JSON-RPC URL (for
/// `modnode deposit submit`).
pub const DEPOSIT_CONTRACT_URL_FILE: &str = "deposit-contract.url";

/// Removes [`DEPOSIT_CONTRACT_URL_FILE`] left by an earlier run that hosted the dev contract,
/// so that `modnode deposit submit` does not send deposits to a contract nobody follows.
pub(super) fn forget_dev_contract_url(data_dir: &Path) -> Result<(), NodeError> {
    let path = data_dir.join(DEPOSIT_CONTRACT_URL_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(NodeError::DepositContract(format!(
            "cannot remove {} left by an earlier run: {e}",
            path.display()
        ))),
    }
}

/// Opens the dev deposit contract in `<data_dir>/deposit-contract` (a new one starts with the
/// genesis deposits, the contract's first), serves its JSON-RPC endpoint and writes its URL to
/// [`DEPOSIT_CONTRACT_URL_FILE`].
pub(super) async fn start_dev_contract(
    data_dir: &Path,
    genesis: &Genesis,
    dev: &DevContractConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(String, JoinHandle<()>), NodeError> {
    let dir = data_dir.join("deposit-contract");
    let block_ms = dev.block_ms;
    let genesis_deposits = genesis.deposits.clone();
    let contract = tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
        let now = unix_ms();
        let mut contract = DevContract::open(&dir, block_ms, now)?;
        if contract.deposit_count() == 0 {
            for deposit in genesis_deposits {
                contract.deposit(deposit, now)?;
            }
        }
        Ok::<_, dev_contract::DevContractError>(contract)
    }))
    .await
    .map_err(|e| NodeError::Startup(e.to_string()))?
    .map_err(|e| NodeError::DepositContract(e.to_string()))?;
    if contract.deposit_count() < genesis.deposits.len() as u64 {
        return Err(NodeError::DepositContract(format!(
            "it holds {} deposits, fewer than the genesis's {}: it belongs to another chain",
            contract.deposit_count(),
            genesis.deposits.len()
        )));
    }
    tracing::info!(
        deposits = contract.deposit_count(),
        block_ms = contract.block_ms(),
        "dev deposit contract opened"
    );
    let (listener, bound) = deposit_source::server::bind(dev.listen)
        .await
        .map_err(|e| NodeError::DepositContract(e.to_string()))?;
    let url = format!("http://{bound}");
    crate::files::write_private_atomically(
        &data_dir.join(DEPOSIT_CONTRACT_URL_FILE),
        url.as_bytes(),
    )
    .map_err(|e| NodeError::DepositContract(e.to_string()))?;
    let contract = Arc::new(std::sync::Mutex::new(contract));
    let task = tokio::spawn(tracing::Instrument::in_current_span(
        deposit_source::server::serve(listener, contract, shutdown),
    ));
    Ok((url, task))
}

//! Continuous deposits: new-validator deposits submitted to the dev deposit contract at the
//! manifest's rate, each accepted index reported; and, at the end, the contract's own count,
//! so a deposit whose answer was lost (the host paused or killed mid-request) is still
//! accounted for.

use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::chain::workload;
use crate::deposit_source::client::RpcClient;
use crate::deposit_source::dev_contract::DEV_CONTRACT_ADDRESS;

/// Every deposit's amount: 32 ETH in Gwei (one amount, so an index whose answer was lost
/// has a known amount too).
pub const DEPOSIT_GWEI: u64 = 32_000_000_000;
/// Time one submission may take.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(2);

/// One deposit the contract accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// Its index in the contract.
    pub index: u64,
    /// Gwei.
    pub amount_gwei: u64,
}

/// What the deposit loop did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DepositTally {
    /// Submissions answered with an index.
    pub accepted: u64,
    /// Submissions without an answer (the contract may or may not have logged them).
    pub unanswered: u64,
}

/// Submits `per_s` deposits a second to the contract at `url` until `stop` turns true.
pub async fn submit_loop(
    url: String,
    per_s: f64,
    seed: u64,
    fork_version: [u8; 4],
    out: mpsc::Sender<Accepted>,
    mut stop: watch::Receiver<bool>,
) -> DepositTally {
    let mut tally = DepositTally::default();
    if per_s <= 0.0 {
        return tally;
    }
    let Ok(client) = RpcClient::new(&url).map(|c| c.with_timeout(SUBMIT_TIMEOUT)) else {
        return tally;
    };
    let every = Duration::from_secs_f64((1.0 / per_s).clamp(0.01, 3600.0));
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_seed = seed.wrapping_mul(1_000_003).wrapping_add(1 << 40);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return tally;
        }
        // A fresh key each time: a retry after a lost answer must not top up a validator
        // the contract may already have logged.
        next_seed = next_seed.wrapping_add(1);
        let deposit = workload::new_validator(next_seed, DEPOSIT_GWEI, fork_version);
        match tokio::time::timeout(SUBMIT_TIMEOUT, client.submit_deposit(&deposit)).await {
            Ok(Ok(index)) => {
                tally.accepted = tally.accepted.saturating_add(1);
                let accepted = Accepted {
                    index,
                    amount_gwei: DEPOSIT_GWEI,
                };
                if out.send(accepted).await.is_err() {
                    return tally;
                }
            }
            Ok(Err(_)) | Err(_) => tally.unanswered = tally.unanswered.saturating_add(1),
        }
    }
}

/// How many deposits the contract at `url` has logged (its `DepositEvent`s, counted in pages).
pub async fn contract_count(url: &str) -> Option<u64> {
    const PAGE: u64 = 512;
    let client = RpcClient::new(url)
        .ok()?
        .with_timeout(Duration::from_secs(10));
    let head = client.block_number().await.ok()?;
    let mut count = 0u64;
    let mut from = 0u64;
    while from <= head {
        let to = from.saturating_add(PAGE - 1).min(head);
        let logs = client
            .deposit_logs(&DEV_CONTRACT_ADDRESS, from, to)
            .await
            .ok()?;
        count = count.saturating_add(u64::try_from(logs.len()).ok()?);
        from = to.saturating_add(1);
    }
    Some(count)
}

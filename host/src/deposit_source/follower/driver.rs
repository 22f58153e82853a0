//! The follower's async driver: checks the endpoint once ([`check_endpoint`]), then polls it
//! ([`poll_once`]) into the [`DepositSource`], recording each step in the [`FollowedLog`]
//! first. [`run`] loops until shutdown.
//!
//! What it does about the source's trustworthiness, beside the sans-IO checks of
//! [`Follower::handle_range`]:
//! - a source that is not the configured chain (`eth_chainId`) or has no code at the contract's
//!   address (`eth_getCode`) is never followed;
//! - a followed block restored from the log is confirmed to be the source's before the source
//!   votes or proves from it ([`DepositSource::confirm`]);
//! - a followed block the source reorganised halts the source ([`DepositSource::halt`]) with
//!   what to do;
//! - a provider refusing an `eth_getLogs` range as too large, or answering over the bound of
//!   what a page may hold ([`ClientError::TooLarge`]), gets half the range, down to one block
//!   ([`Follower::shrink_page`]);
//! - a source head lower than at the poll before is logged (once per change, both heights) and
//!   counted ([`FollowerCounters`](crate::deposit_source::FollowerCounters)).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;

use super::{FollowError, Follower, FollowerConfig};
use crate::deposit_source::DepositSource;
use crate::deposit_source::client::{ClientError, RpcClient};
use crate::deposit_source::log::{FollowedLog, LogError};

/// Why the endpoint must not be followed (checked before the first poll).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Talking to the endpoint failed (transient: checked again next poll).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The endpoint serves another chain (the operator's configuration, or the wrong endpoint).
    #[error(
        "deposit source {url} serves chain id {actual}, the follower is configured for chain id \
         {expected}: point the eth1 endpoint at a client of chain {expected}, or set the \
         expected chain id (--eth1-chain-id) if {actual} is the chain the deposit contract is on"
    )]
    WrongChain {
        /// The endpoint.
        url: String,
        /// The configured chain id.
        expected: u64,
        /// What the endpoint answered.
        actual: u64,
    },
    /// No code at the contract address: not the deposit contract, or the client is not synced.
    #[error(
        "deposit source {url} has no code at the deposit contract address 0x{contract}: set the \
         chain's deposit contract address (--deposit-contract), or wait until the execution \
         client has synced past its deployment"
    )]
    NoContract {
        /// The endpoint.
        url: String,
        /// The contract address (hex).
        contract: String,
    },
}

impl StartError {
    /// Whether checking again later may succeed without the operator changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Client(ClientError::Unreachable { .. } | ClientError::Timeout { .. })
                | Self::NoContract { .. }
        )
    }
}

/// Checks that `client` serves the chain `config` names and has code at its contract address.
pub async fn check_endpoint(client: &RpcClient, config: &FollowerConfig) -> Result<(), StartError> {
    let actual = client.chain_id().await?;
    if actual != config.chain_id {
        return Err(StartError::WrongChain {
            url: client.url().to_string(),
            expected: config.chain_id,
            actual,
        });
    }
    if client.code(&config.contract).await?.is_empty() {
        return Err(StartError::NoContract {
            url: client.url().to_string(),
            contract: hex::encode(config.contract),
        });
    }
    Ok(())
}

/// Why one poll failed.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// Talking to the source failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The source's log is unacceptable.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// The followed log could not be recorded (ours). The step is not applied: the poll is
    /// retried, and a follower that cannot record stops advancing.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The source does not have a block it reported.
    #[error("the deposit source reports head {head} but has no block {missing}")]
    MissingBlock {
        /// The head reported.
        head: u64,
        /// The block missing.
        missing: u64,
    },
}

/// What the source is told when a followed block was reorganised: the error, what it means and
/// exactly what to do.
fn halt_reason(error: &FollowError, follower: &Follower, log: Option<&FollowedLog>) -> String {
    let remedy = match log {
        Some(log) => format!(
            "stop the node, delete {} and start it again",
            log.path().display()
        ),
        None => "restart the node".to_string(),
    };
    format!(
        "{error}. Deposits this node followed up to that block may no longer be in the contract, \
         so it votes only the chain's agreed eth1 data and proves no deposit from its deposit \
         log. To follow the contract again: {remedy}; the follower then reads the contract from \
         its start block, and votes again only if its deposit tree gives the deposits the chain \
         applied. Set the follow distance (now {} blocks) above the deepest reorg the source can \
         have",
        follower.follow_distance()
    )
}

/// One poll: confirms a followed block not yet confirmed in this run, then reads and applies
/// at most one range (recorded in `log` first, if given); returns whether it advanced. A
/// followed block the source reorganised halts `source`.
pub async fn poll_once(
    client: &RpcClient,
    follower: &mut Follower,
    source: &DepositSource,
    log: Option<&FollowedLog>,
) -> Result<bool, PollError> {
    let halt_on_reorg = |e: FollowError, follower: &Follower| {
        if matches!(e, FollowError::Reorg { .. }) {
            source.halt(halt_reason(&e, follower, log));
        }
        PollError::Follow(e)
    };
    let head = client.block_number().await?;
    if let Some(back) = follower.observe_head(head) {
        source
            .counters()
            .head_went_back
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            endpoint = client.url(),
            previous = back.previous,
            now = back.now,
            "the deposit source's head went back; nothing new is read until it passes the \
             followed block again"
        );
    }
    // The followed block as the source has it now: needed to confirm it, or to go on from it.
    let needed = !source.is_confirmed() || follower.next_range(head).is_some();
    let previous_now = match follower.last() {
        Some(last) if needed => Some(client.block(last.number).await?.ok_or(
            PollError::MissingBlock {
                head,
                missing: last.number,
            },
        )?),
        _ => None,
    };
    if !source.is_confirmed() {
        follower
            .check_followed(previous_now)
            .map_err(|e| halt_on_reorg(e, follower))?;
        source.confirm();
    }
    let (range, logs) = loop {
        let Some(range) = follower.next_range(head) else {
            return Ok(false);
        };
        let (from, to) = (*range.start(), *range.end());
        let logs = client.deposit_logs(&follower.contract, from, to).await;
        if let Err(ClientError::TooLarge { .. }) = &logs {
            source
                .counters()
                .answers_too_large
                .fetch_add(1, Ordering::Relaxed);
        }
        match logs {
            Ok(logs) => break (range, logs),
            Err(e) if e.is_range_limit() && follower.shrink_page() => {
                tracing::debug!(
                    error = %e,
                    page = follower.page(),
                    "eth_getLogs range refused or answered as too large; asking for fewer blocks"
                );
            }
            Err(e) => return Err(e.into()),
        }
    };
    let to = *range.end();
    let end = client
        .block(to)
        .await?
        .ok_or(PollError::MissingBlock { head, missing: to })?;
    // The follower moves on only once the step is recorded.
    let mut next = follower.clone();
    let followed = next
        .handle_range(range, &logs, end, previous_now)
        .map_err(|e| halt_on_reorg(e, follower))?;
    if let Some(log) = log {
        let (log, step) = (log.clone(), followed.clone());
        match tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
            log.append(&step)
        }))
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(PollError::Log(e)),
            Err(e) => {
                return Err(PollError::Log(LogError::Storage {
                    path: "deposit log".into(),
                    reason: format!("writer task failed: {e}"),
                }));
            }
        }
    }
    *follower = next;
    source.append(followed);
    Ok(true)
}

/// Follows `config.endpoint` into `source` until `shutdown` turns true, recording each step
/// in `log` when given. The endpoint is checked first ([`check_endpoint`]) and nothing is
/// followed until it passes. A `source` restored from the log is followed on from its followed
/// block, once confirmed. Transient failures are retried each poll; a log the follower refuses
/// stops it advancing, reported once per distinct error.
pub async fn run(
    config: FollowerConfig,
    source: Arc<DepositSource>,
    log: Option<FollowedLog>,
    mut shutdown: watch::Receiver<bool>,
) {
    let client = match RpcClient::new(&config.endpoint) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "deposit follower not started");
            return;
        }
    };
    let mut follower = match source.followed() {
        Some((block, count)) => Follower::resume(&config, block, count),
        None => Follower::new(&config),
    };
    let mut checked = false;
    let mut reported = String::new();
    loop {
        if !checked {
            match check_endpoint(&client, &config).await {
                Ok(()) => {
                    checked = true;
                    reported.clear();
                    source.counters().answered(crate::clock::unix_ms());
                }
                Err(e) => {
                    let text = e.to_string();
                    source.counters().failed(text.clone());
                    if text != reported {
                        if e.is_transient() {
                            tracing::warn!(error = %text, "deposit follower waits for its source");
                        } else {
                            tracing::error!(error = %text, "deposit follower does not follow");
                        }
                        reported = text;
                    }
                }
            }
        }
        if checked {
            loop {
                let polled = poll_once(&client, &mut follower, &source, log.as_ref()).await;
                match &polled {
                    Ok(_) => source.counters().answered(crate::clock::unix_ms()),
                    Err(e) => source.counters().failed(e.to_string()),
                }
                match polled {
                    Ok(true) => {
                        reported.clear();
                        continue;
                    }
                    Ok(false) => reported.clear(),
                    Err(e) => {
                        let text = e.to_string();
                        if text != reported {
                            match &e {
                                PollError::Client(
                                    ClientError::Unreachable { .. } | ClientError::Timeout { .. },
                                ) => {
                                    tracing::warn!(error = %text, "deposit follower");
                                }
                                PollError::Follow(FollowError::Reorg { .. }) => {
                                    let reason = source.halted().unwrap_or_else(|| text.clone());
                                    tracing::error!(error = %reason, "deposit follower halted");
                                }
                                _ => {
                                    tracing::error!(error = %text, "deposit follower cannot advance")
                                }
                            }
                            reported = text;
                        }
                    }
                }
                break;
            }
        }
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(config.poll_interval) => {}
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;

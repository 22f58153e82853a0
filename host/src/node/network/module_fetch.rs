//! Fetching scheduled modules this node lacks from its peers by hash: one fetch at a time,
//! peers reporting the module ready asked first, each peer at most every
//! [`FETCH_RETRY`](crate::node::upgrades::FETCH_RETRY) (backing off from peers that answer
//! without it), well within what a peer serves before it counts requests as abuse. The bytes must hash to what was asked (else
//! the peer is penalised; so is a malformed answer — of the wrong kind, undecodable or over the
//! size limit —, by the one rule for every request kind: `Network::answer_failed`) and then pass the checks a scheduled module must pass (validate, kind
//! and contract, precompile; local limits and the warm-up only warn) before the chain can run
//! them.

use super::{Event, Network, short};
use crate::net::rpc::{Request, Response};

use super::sync_driver::request;
use crate::node::verdict::RequestError;

/// Hands a failed module request to the network task's one rule for failed answers
/// ([`Event::AnswerFailed`]): a malformed answer bans its sender.
async fn fail(
    events: &tokio::sync::mpsc::Sender<Event>,
    node: modnode_peers::NodeId,
    error: RequestError,
) {
    let _ = events
        .send(Event::AnswerFailed {
            node,
            what: "module",
            error,
        })
        .await;
}

impl Network {
    /// Starts fetching the first missing scheduled module, unless a fetch is running.
    pub(super) fn poll_module_fetch(&mut self) {
        let connected: Vec<_> = self.conns.keys().copied().collect();
        let Some((hash, peers)) = self.upgrades.next_fetch(&connected) else {
            return;
        };
        let conns: Vec<_> = peers
            .iter()
            .filter_map(|p| self.conns.get(p).map(|c| (*p, c.conn.clone())))
            .collect();
        let upgrades = self.upgrades.clone();
        let events = self.events.clone();
        let max = self.limits.max_message_bytes;
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let module = hex::encode(hash);
            // The local store first (uploaded by the operator, or fetched before a restart).
            let local = {
                let upgrades = upgrades.clone();
                tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                    upgrades.prepare_scheduled(&hash)
                }))
                .await
            };
            match local {
                Ok(Ok(true)) => {
                    upgrades.fetch_done();
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!(%module, error = %e, "stored module cannot be prepared")
                }
                _ => {}
            }
            for (peer, conn) in conns {
                let answer = request(&conn, Request::Module { hash }, max).await;
                let served = matches!(answer, Ok(Response::Module(Some(_))));
                upgrades.fetch_answered(peer, &hash, served);
                let bytes = match answer {
                    Ok(Response::Module(Some(bytes))) => bytes,
                    Ok(Response::Module(None)) => continue,
                    Ok(_) => {
                        let error = RequestError::Malformed("answer of the wrong kind".into());
                        fail(&events, peer, error).await;
                        continue;
                    }
                    Err(error) => {
                        tracing::debug!(peer = %short(&peer), %module, %error, "module request failed");
                        fail(&events, peer, error).await;
                        continue;
                    }
                };
                let accept = {
                    let upgrades = upgrades.clone();
                    let name = short(&peer);
                    tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                        upgrades.accept_fetched(&hash, &bytes, &name)
                    }))
                    .await
                };
                match accept {
                    Ok(Ok(())) => break,
                    Ok(Err(e @ crate::node::upgrades::FetchError::WrongHash { .. })) => {
                        let _ = events
                            .send(Event::Violation {
                                node: peer,
                                reason: e.to_string(),
                            })
                            .await;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(peer = %short(&peer), error = %e, "fetched module refused")
                    }
                    Err(e) => tracing::warn!(%module, error = %e, "module preparation task failed"),
                }
            }
            upgrades.fetch_done();
        }));
    }
}

//! The RPC server: answers the status, block-range, peer-list, module-by-hash and checkpoint
//! (list, chunk) requests a peer sends on its bidirectional streams. Block ranges come from the
//! chain worker on the peer's behalf (after production and imports, limited per peer);
//! checkpoint answers come from the checkpoint store, at most
//! [`MAX_CHECKPOINT_READS_PER_PEER`] at a time per peer; a malformed request is reported as a
//! violation.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{Event, NodeId, REQUEST_TIMEOUT, short};
use crate::checkpoint::CheckpointServer;
use crate::net::codec;
use crate::net::rpc::{self, ChainStatus, Request, Response};
use crate::node::chain_worker::{ChainHandle, WorkerError};
use crate::node::metrics::Metrics;
use crate::node::upgrades::{Refusal, UpgradeAgent};

/// Checkpoint requests of one peer served at once; more wait (the peer's request timeout
/// bounds the wait), so one peer cannot keep every disk reader busy.
pub(super) const MAX_CHECKPOINT_READS_PER_PEER: usize = 4;

/// What the server answers from besides the chain.
#[derive(Clone)]
pub(super) struct Served {
    pub upgrades: Arc<UpgradeAgent>,
    pub checkpoints: CheckpointServer,
    pub metrics: Arc<Metrics>,
}

/// Answers the requests `node` sends on `conn` until it closes; a malformed request is
/// reported as a violation.
pub(super) async fn serve(
    node: NodeId,
    conn: quinn::Connection,
    chain: ChainHandle,
    served: Served,
    events: mpsc::Sender<Event>,
    max_message_bytes: usize,
) {
    let checkpoint_reads = Arc::new(Semaphore::new(MAX_CHECKPOINT_READS_PER_PEER));
    while let Ok((send, recv)) = conn.accept_bi().await {
        let chain = chain.clone();
        let served = served.clone();
        let events = events.clone();
        let checkpoint_reads = checkpoint_reads.clone();
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let served = tokio::time::timeout(
                REQUEST_TIMEOUT,
                serve_one(
                    node,
                    (send, recv),
                    &chain,
                    &served,
                    &checkpoint_reads,
                    &events,
                    max_message_bytes,
                ),
            )
            .await;
            match served {
                Ok(Err(Some(reason))) => {
                    let _ = events.send(Event::Violation { node, reason }).await;
                }
                Ok(Err(None)) | Ok(Ok(())) => {}
                Err(_) => tracing::debug!(peer = %short(&node), "request not completed in time"),
            }
        }));
    }
}

/// `Err(Some(reason))` is a protocol violation, `Err(None)` a broken stream.
async fn serve_one(
    node: NodeId,
    (send, mut recv): (quinn::SendStream, quinn::RecvStream),
    chain: &ChainHandle,
    served: &Served,
    checkpoint_reads: &Arc<Semaphore>,
    events: &mpsc::Sender<Event>,
    max_message_bytes: usize,
) -> Result<(), Option<String>> {
    let frame = match codec::read_frame(&mut recv, rpc::MAX_REQUEST_BYTES).await {
        Ok(Some(frame)) => frame,
        Ok(None) => return Err(Some("request stream ended without a request".into())),
        Err(e) if e.is_protocol_violation() => return Err(Some(format!("request: {e}"))),
        Err(_) => return Err(None),
    };
    let request = Request::decode(frame.msg_type, &frame.payload)
        .map_err(|e| Some(format!("request: {e}")))?;
    let response = match request {
        Request::Status => {
            let view = chain.view();
            Response::Status(ChainStatus {
                head_height: view.head.height,
                head_hash: view.head.hash,
                finalized_height: view.finalized_height,
                ready_modules: served.upgrades.ready_scheduled(),
            })
        }
        Request::Module { hash } => {
            let upgrades = served.upgrades.clone();
            let answer = tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                upgrades.serve(node, &hash)
            }))
            .await
            .map_err(|_| None)?;
            match answer {
                Ok(mut module) => {
                    // A module that does not fit one frame is not served (uploads are capped
                    // below it). The peer's in-flight place is held until the answer is sent.
                    let bytes = module
                        .bytes
                        .take()
                        .filter(|b| b.len().saturating_add(16) <= max_message_bytes);
                    let (msg_type, payload) = Response::Module(bytes).encode();
                    return send_answer(send, msg_type, &payload, max_message_bytes).await;
                }
                Err(refused @ Refusal::Limited(_)) => {
                    tracing::debug!(peer = %short(&node), error = %refused, "module request refused");
                    Response::Module(None)
                }
                Err(abuse @ Refusal::Abuse { .. }) => return Err(Some(abuse.to_string())),
            }
        }
        Request::Blocks { start, count } => {
            // Leave room for the length prefixes and the count.
            let budget = max_message_bytes.saturating_sub(1024);
            // On our own failure say nothing (the requester sees a failed request), never
            // "no blocks": that is what a liar answers, and the requester bans for it.
            match chain
                .blocks_for(Some(node), start, u64::from(count), budget)
                .await
            {
                Ok(blocks) => Response::Blocks(blocks),
                // Pruned here: say so, so the requester asks someone else and blames nobody.
                Err(WorkerError::Pruned { below, .. }) => Response::Pruned(below),
                Err(e) => {
                    tracing::warn!(peer = %short(&node), error = %e, "cannot serve a block range");
                    return Err(None);
                }
            }
        }
        Request::Checkpoints | Request::Chunk { .. } => {
            let _permit = checkpoint_reads.acquire().await.map_err(|_| None)?;
            let served = served.clone();
            let finalized = chain.view().finalized_height;
            // On our own failure say nothing, as for blocks: "not here" would be a lie.
            tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                let counters = &served.metrics.checkpoint_served;
                match request {
                    Request::Chunk { id, index } => served
                        .checkpoints
                        .chunk(&id, index, counters)
                        .map(Response::Chunk),
                    _ => served
                        .checkpoints
                        .list(counters, finalized)
                        .map(Response::Checkpoints),
                }
            }))
            .await
            .map_err(|_| None)?
            .map_err(|e| {
                tracing::warn!(peer = %short(&node), error = %e, "cannot serve a checkpoint request");
                None
            })?
        }
        Request::Peers => {
            let (reply, rx) = oneshot::channel();
            let _ = events.send(Event::PeersQuery { from: node, reply }).await;
            Response::Peers(rx.await.unwrap_or_default())
        }
    };
    let (msg_type, payload) = response.encode();
    send_answer(send, msg_type, &payload, max_message_bytes).await
}

async fn send_answer(
    mut send: quinn::SendStream,
    msg_type: u8,
    payload: &[u8],
    max_message_bytes: usize,
) -> Result<(), Option<String>> {
    codec::write_frame(&mut send, msg_type, payload, max_message_bytes)
        .await
        .map_err(|_| None)?;
    send.finish().map_err(|_| None)?;
    let _ = send.stopped().await;
    Ok(())
}

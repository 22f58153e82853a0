//! The RPC server: answers the status, block-range, peer-list and module-by-hash requests a peer
//! sends on its bidirectional streams. Block ranges come from the chain worker on the peer's behalf (after
//! production and imports, limited per peer); a malformed request is reported as a violation.

use tokio::sync::{mpsc, oneshot};

use super::{Event, NodeId, REQUEST_TIMEOUT, short};
use crate::net::codec;
use crate::net::rpc::{self, ChainStatus, Request, Response};
use crate::node::chain_worker::ChainHandle;
use crate::node::upgrades::UpgradeAgent;

/// Answers the requests `node` sends on `conn` until it closes; a malformed request is
/// reported as a violation.
pub(super) async fn serve(
    node: NodeId,
    conn: quinn::Connection,
    chain: ChainHandle,
    upgrades: std::sync::Arc<UpgradeAgent>,
    events: mpsc::Sender<Event>,
    max_message_bytes: usize,
) {
    while let Ok((send, recv)) = conn.accept_bi().await {
        let chain = chain.clone();
        let upgrades = upgrades.clone();
        let events = events.clone();
        tokio::spawn(async move {
            let served = tokio::time::timeout(
                REQUEST_TIMEOUT,
                serve_one(
                    node,
                    send,
                    recv,
                    &chain,
                    &upgrades,
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
        });
    }
}

/// `Err(Some(reason))` is a protocol violation, `Err(None)` a broken stream.
async fn serve_one(
    node: NodeId,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    chain: &ChainHandle,
    upgrades: &std::sync::Arc<UpgradeAgent>,
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
                ready_modules: upgrades.ready_scheduled(),
            })
        }
        Request::Module { hash } => {
            let upgrades = upgrades.clone();
            let bytes = tokio::task::spawn_blocking(move || upgrades.serve(&hash))
                .await
                .map_err(|_| None)?;
            // A module that does not fit one frame is not served (uploads are capped below it).
            Response::Module(bytes.filter(|b| b.len().saturating_add(16) <= max_message_bytes))
        }
        Request::Blocks { start, count } => {
            // Leave room for the length prefixes and the count.
            let budget = max_message_bytes.saturating_sub(1024);
            // On our own failure say nothing (the requester sees a failed request), never
            // "no blocks": that is what a liar answers, and the requester bans for it.
            let blocks = chain
                .blocks_for(Some(node), start, u64::from(count), budget)
                .await
                .map_err(|e| {
                    tracing::warn!(peer = %short(&node), error = %e, "cannot serve a block range");
                    None
                })?;
            Response::Blocks(blocks)
        }
        Request::Peers => {
            let (reply, rx) = oneshot::channel();
            let _ = events.send(Event::PeersQuery { from: node, reply }).await;
            Response::Peers(rx.await.unwrap_or_default())
        }
    };
    let (msg_type, payload) = response.encode();
    codec::write_frame(&mut send, msg_type, &payload, max_message_bytes)
        .await
        .map_err(|_| None)?;
    send.finish().map_err(|_| None)?;
    let _ = send.stopped().await;
    Ok(())
}

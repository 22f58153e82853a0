//! The sync driver: range sync's requests and imports, and fetching a peer's branch for fork
//! choice, carried out for [`Network`] over QUIC.

use super::{Event, Network, NodeId, REQUEST_TIMEOUT, SyncedBlocks, short};
use crate::chain::block::Block;
use crate::chain::{ForkChoiceError, ImportError};
use crate::net::codec;
use crate::net::rpc::{self, MAX_BLOCKS_PER_REQUEST, Request, Response};
use crate::node::chain_worker::{ChainHandle, WorkerError};
use crate::node::metrics::bump;
use crate::node::verdict::{Fault, RequestError};
use modnode_peers::Request as SyncRequest;
use tokio::time::Instant;

/// Why a block from range sync was not imported.
pub(super) enum SyncImportError {
    /// Its parent is unknown: the peer is on another branch; the block is kept so the branch
    /// can be fetched and tried.
    Fork(Box<Block>),
    /// The chain worker refused it (or a block of its branch).
    Refused(WorkerError),
    /// Fetching its branch failed.
    Branch(RequestError),
    /// The branch below it is too long or below finality.
    Unresolvable(String),
}

impl SyncImportError {
    /// The scheduled module the chain lacks to import the block, if that is why it was refused.
    fn missing_module(&self) -> Option<[u8; 32]> {
        match self {
            Self::Refused(WorkerError::Block(ForkChoiceError::Invalid(
                ImportError::ModuleMissing { module, .. },
            ))) => hex::decode(module).ok()?.try_into().ok(),
            _ => None,
        }
    }

    pub(super) fn fault(&self) -> Fault {
        match self {
            Self::Fork(_) | Self::Unresolvable(_) => Fault::Transient,
            Self::Refused(e) => e.fault(),
            Self::Branch(e) => e.fault(),
        }
    }
}

impl std::fmt::Display for SyncImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fork(block) => write!(f, "block {} is on an unknown branch", block.header.height),
            Self::Refused(e) => write!(f, "refused: {e}"),
            Self::Branch(e) => write!(f, "fetching its branch: {e}"),
            Self::Unresolvable(e) => f.write_str(e),
        }
    }
}

impl Network {
    /// A peer's answer (or failure) for a block range.
    pub(super) fn on_blocks_answer(
        &mut self,
        request: SyncRequest,
        result: Result<SyncedBlocks, RequestError>,
    ) {
        let outcome = match result {
            Ok(blocks) => self.sync.handle_blocks(request.peer, request.id, blocks),
            Err(e) => {
                tracing::debug!(peer = %short(&request.peer), error = %e, "block request failed");
                let outcome = self.sync.handle_request_failed(request.peer, request.id);
                if e.fault() == Fault::Peer {
                    self.violation(request.peer, format!("block range answer: {e}"));
                }
                outcome
            }
        };
        if let Err(e) = outcome {
            tracing::debug!(error = %e, "late block answer dropped");
        }
    }

    /// The chain worker's answer for a block from range sync; only the peer's faults count
    /// against it.
    pub(super) fn on_sync_imported(
        &mut self,
        height: u64,
        peer: NodeId,
        result: Result<[u8; 32], SyncImportError>,
    ) {
        self.importing = false;
        match result {
            Ok(hash) => {
                bump(&self.metrics.blocks_synced);
                self.last_sync_import = Some(Instant::now());
                self.sync.handle_imported(height, hash);
            }
            Err(SyncImportError::Fork(block)) => self.resolve_fork(*block, peer),
            Err(e) => {
                bump(&self.metrics.blocks_rejected);
                if e.fault() == Fault::Peer {
                    tracing::warn!(peer = %short(&peer), height, error = %e, "synced block invalid");
                    self.sync.handle_import_failed(height, peer);
                } else {
                    // Our failure or a transient one: the peer is not to blame.
                    tracing::info!(peer = %short(&peer), height, error = %e, "synced block not taken");
                    self.sync.handle_import_aborted(height, peer);
                    if let Some(module) = e.missing_module() {
                        // Asking again at once would only be refused again: a loop of range
                        // requests and imports that starved the module's own fetch, compile
                        // and warm-up on a loaded machine.
                        let until = super::timer_deadline(Instant::now(), self.status_interval);
                        self.module_wait = Some((module, until));
                    }
                }
            }
        }
    }

    /// Whether range sync holds off for a missing scheduled module: until it is ready (the
    /// network task's module fetch gets it), at most a status interval before trying again.
    pub(super) fn waiting_for_module(&mut self) -> bool {
        match self.module_wait {
            Some((module, until)) if Instant::now() < until && !self.upgrades.is_ready(&module) => {
                true
            }
            _ => {
                self.module_wait = None;
                false
            }
        }
    }

    pub(super) fn import_synced(&mut self, height: u64, bytes: &[u8], peer: NodeId) {
        let block = match Block::decode(bytes, self.genesis.max_deposits_per_block) {
            Ok(block) => block,
            Err(e) => {
                tracing::warn!(peer = %short(&peer), height, error = %e, "synced block undecodable");
                self.sync.handle_import_failed(height, peer);
                return;
            }
        };
        self.importing = true;
        let chain = self.chain.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let hash = block.hash();
            let result = match chain.add_block(block.clone()).await {
                Ok(_) => Ok(hash),
                Err(WorkerError::Block(ForkChoiceError::UnknownParent { .. })) => {
                    Err(SyncImportError::Fork(Box::new(block)))
                }
                Err(e) => Err(SyncImportError::Refused(e)),
            };
            let _ = events
                .send(Event::SyncImported {
                    height,
                    peer,
                    result,
                })
                .await;
        });
    }

    /// A synced block's parent is unknown: `peer` is on another branch. Fetch the branch back
    /// to [`MAX_BLOCKS_PER_REQUEST`] blocks (never below the finalized height), hand it to fork
    /// choice oldest first, then the block itself. Fork choice decides whether the branch wins.
    pub(super) fn resolve_fork(&mut self, block: Block, peer: NodeId) {
        let height = block.header.height;
        let Some(conn) = self.conns.get(&peer).map(|c| c.conn.clone()) else {
            self.sync.handle_import_failed(height, peer);
            return;
        };
        tracing::info!(peer = %short(&peer), height, "peer is on another branch; fetching it");
        self.importing = true;
        let chain = self.chain.clone();
        let events = self.events.clone();
        let max = self.limits.max_message_bytes;
        let max_deposits = self.genesis.max_deposits_per_block;
        tokio::spawn(async move {
            let result = fetch_branch(&conn, &chain, block, max, max_deposits).await;
            let _ = events
                .send(Event::SyncImported {
                    height,
                    peer,
                    result,
                })
                .await;
        });
    }

    pub(super) fn spawn_status_request(&self, node: NodeId, conn: quinn::Connection) {
        let events = self.events.clone();
        let max = self.limits.max_message_bytes;
        tokio::spawn(async move {
            if let Ok(Response::Status(status)) = request(&conn, Request::Status, max).await {
                let _ = events.send(Event::StatusAnswer { node, status }).await;
            }
        });
    }

    pub(super) fn spawn_blocks_request(&self, sync_request: SyncRequest) {
        let events = self.events.clone();
        let Some(conn) = self.conns.get(&sync_request.peer).map(|c| c.conn.clone()) else {
            // Sent from a task: the network task only ever receives from its event channel.
            tokio::spawn(async move {
                let _ = events
                    .send(Event::BlocksAnswer {
                        request: sync_request,
                        result: Err(RequestError::Transport("peer is not connected".into())),
                    })
                    .await;
            });
            return;
        };
        let max = self.limits.max_message_bytes;
        let max_deposits = self.genesis.max_deposits_per_block;
        let count = u16::try_from(sync_request.count)
            .unwrap_or(MAX_BLOCKS_PER_REQUEST)
            .min(MAX_BLOCKS_PER_REQUEST);
        tokio::spawn(async move {
            let rpc_request = Request::Blocks {
                start: sync_request.start_height,
                count,
            };
            // Not-connected is reported above; everything here is about the peer's answer.
            let result = request_blocks(&conn, rpc_request, max, max_deposits)
                .await
                .map(|blocks| {
                    blocks
                        .into_iter()
                        .map(|(block, bytes)| (block.header.height, block.hash(), bytes))
                        .collect::<SyncedBlocks>()
                });
            let _ = events
                .send(Event::BlocksAnswer {
                    request: sync_request,
                    result,
                })
                .await;
        });
    }
}

/// Fetches the branch below `tip` from `conn` and adds it, then `tip`, through fork choice.
async fn fetch_branch(
    conn: &quinn::Connection,
    chain: &ChainHandle,
    tip: Block,
    max_message_bytes: usize,
    max_deposits: u16,
) -> Result<[u8; 32], SyncImportError> {
    let height = tip.header.height;
    let start = chain
        .view()
        .finalized_height
        .saturating_add(1)
        .max(height.saturating_sub(u64::from(MAX_BLOCKS_PER_REQUEST)));
    let count = u16::try_from(height.saturating_sub(start)).map_err(|_| {
        SyncImportError::Unresolvable(format!("branch below height {height} is too long"))
    })?;
    if count == 0 {
        return Err(SyncImportError::Unresolvable(format!(
            "block {height} forks at or below the finalized height"
        )));
    }
    let branch = request_blocks(
        conn,
        Request::Blocks { start, count },
        max_message_bytes,
        max_deposits,
    )
    .await
    .map_err(SyncImportError::Branch)?;
    for (block, _) in branch {
        match chain.add_block(block).await {
            Ok(_) => {}
            // Below the fork point on a chain we never saw: keep going up.
            Err(WorkerError::Block(ForkChoiceError::UnknownParent { .. })) => {}
            Err(e) => return Err(SyncImportError::Refused(e)),
        }
    }
    let hash = tip.hash();
    chain
        .add_block(tip)
        .await
        .map(|_| hash)
        .map_err(SyncImportError::Refused)
}

/// Requests a block range and decodes every block of the answer, keeping its bytes.
async fn request_blocks(
    conn: &quinn::Connection,
    blocks: Request,
    max_message_bytes: usize,
    max_deposits: u16,
) -> Result<Vec<(Block, Vec<u8>)>, RequestError> {
    let Response::Blocks(encoded) = request(conn, blocks, max_message_bytes).await? else {
        return Err(RequestError::Malformed("answer of the wrong kind".into()));
    };
    encoded
        .into_iter()
        .map(|bytes| {
            let block = Block::decode(&bytes, max_deposits).map_err(|e| {
                RequestError::Malformed(format!("undecodable block in the answer: {e}"))
            })?;
            Ok((block, bytes))
        })
        .collect()
}

/// Sends one request on a new bidirectional stream and reads its answer.
pub(super) async fn request(
    conn: &quinn::Connection,
    request: Request,
    max_message_bytes: usize,
) -> Result<Response, RequestError> {
    let transport = |e: &dyn std::fmt::Display| RequestError::Transport(e.to_string());
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| transport(&e))?;
        let (msg_type, payload) = request.encode();
        codec::write_frame(&mut send, msg_type, &payload, rpc::MAX_REQUEST_BYTES)
            .await
            .map_err(|e| transport(&e))?;
        send.finish().map_err(|e| transport(&e))?;
        let frame = match codec::read_frame(&mut recv, max_message_bytes).await {
            Ok(Some(frame)) => frame,
            // A server that cannot answer (its worker failed) resets the stream.
            Ok(None) => return Err(transport(&"stream ended without an answer")),
            Err(e) if e.is_protocol_violation() => {
                return Err(RequestError::Malformed(e.to_string()));
            }
            Err(e) => return Err(transport(&e)),
        };
        Response::decode(&request, frame.msg_type, &frame.payload)
            .map_err(|e| RequestError::Malformed(e.to_string()))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| RequestError::Timeout(REQUEST_TIMEOUT))?
}

//! The sync driver: range sync's requests and imports, and fetching a peer's branch for fork
//! choice, carried out for [`Network`] over QUIC.

use super::{Event, Network, NodeId, REQUEST_TIMEOUT, SyncedBlocks, short};
use crate::chain::ForkChoiceError;
use crate::chain::block::Block;
use crate::hashes::ModuleHash;
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
    /// Whether range sync should hold off before offering blocks again, and until which
    /// module is ready (if one is named): the chain could not check a block for a reason of
    /// ours — a scheduled module not ready here (on import, on a side branch or in a replay of
    /// its parent's state), the host, a lock, the store — which the same block from another
    /// peer would meet again at once.
    fn hold(&self) -> Option<Option<ModuleHash>> {
        let Self::Refused(WorkerError::Block(e)) = self else {
            return None;
        };
        if let Some((_, module)) = e.missing_module() {
            return Some(Some(module));
        }
        matches!(e, ForkChoiceError::NotChecked(_)).then_some(None)
    }

    pub(super) fn fault(&self) -> Fault {
        match self {
            Self::Fork(_) | Self::Unresolvable(_) => Fault::Transient,
            Self::Refused(e) => e.fault(),
            Self::Branch(e) => e.fault(),
        }
    }

    /// Whether the block (or one of its branch) is from a slot starting more than
    /// [`FAR_FUTURE_MS`](crate::clock::FAR_FUTURE_MS) beyond our clock: served as
    /// the answer to our own request, that is the peer's fault.
    fn is_future_slot(&self) -> bool {
        matches!(self, Self::Refused(e @ WorkerError::FutureSlot { .. }) if e.fault() == Fault::Peer)
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
            // Not there, not a fault: range sync asks someone else.
            Err(RequestError::Pruned { below }) => {
                tracing::debug!(peer = %short(&request.peer), start = request.start_height, below, "peer pruned the range");
                let outcome = self.sync.handle_pruned(request.peer, request.id, below);
                if let Some(height) = self.sync.pruned_everywhere() {
                    tracing::warn!(
                        height,
                        "every peer that has height {height} pruned it: restore a checkpoint \
                         (--sync checkpoint) or connect a peer that keeps more history"
                    );
                }
                outcome
            }
            Err(e) => {
                tracing::debug!(peer = %short(&request.peer), error = %e, "block request failed");
                let now = self.now();
                let outcome = self
                    .sync
                    .handle_request_failed(request.peer, request.id, now);
                self.answer_failed(request.peer, "block range", &e);
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
                let target = self.sync.target().map_or(height, |(target, _)| target);
                self.sync_progress
                    .on_imported(height, target, std::time::Instant::now());
            }
            Err(SyncImportError::Fork(block)) => self.resolve_fork(*block, peer),
            Err(e) => {
                bump(&self.metrics.blocks_rejected);
                if e.fault() == Fault::Peer {
                    tracing::warn!(peer = %short(&peer), height, error = %e, "synced block invalid");
                    if e.is_future_slot() {
                        bump(&self.metrics.peer_future_blocks);
                    }
                    self.sync.handle_import_failed(height, peer);
                } else {
                    // Our failure or a transient one: the peer is not to blame.
                    tracing::info!(peer = %short(&peer), height, error = %e, "synced block not taken");
                    let now = self.now();
                    self.sync.handle_import_aborted(height, peer, now);
                    if let Some(module) = e.hold() {
                        // Asking again at once would only be refused again: a loop of range
                        // requests and imports that starved the module's own fetch, compile
                        // and warm-up on a loaded machine. (The module is on the upgrade
                        // agent's fetch list: the chain reported it missing.)
                        let until = super::timer_deadline(Instant::now(), self.status_interval);
                        self.module_wait = Some((module, until));
                    }
                }
            }
        }
    }

    /// Whether range sync holds off after the chain could not check a block for a reason of
    /// ours: until the missing module is ready (the network task's module fetch gets it), at
    /// most a status interval before trying again.
    pub(super) fn waiting_for_module(&mut self) -> bool {
        let upgrades = &self.upgrades;
        let holding = holds(self.module_wait, Instant::now(), |m| upgrades.is_ready(m));
        if !holding {
            self.module_wait = None;
        }
        holding
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
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let hash = block.hash();
            let result = match chain.add_block(block.clone()).await {
                Ok(_) => Ok(hash.to_bytes()),
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
        }));
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
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let result = fetch_branch(&conn, &chain, block, max, max_deposits).await;
            let _ = events
                .send(Event::SyncImported {
                    height,
                    peer,
                    result,
                })
                .await;
        }));
    }

    pub(super) fn spawn_status_request(&self, node: NodeId, conn: quinn::Connection) {
        let events = self.events.clone();
        let max = self.limits.max_message_bytes;
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let event = match request(&conn, Request::Status, max).await {
                Ok(Response::Status(status)) => Event::StatusAnswer { node, status },
                Ok(_) => Event::AnswerFailed {
                    node,
                    what: "status",
                    error: RequestError::Malformed("answer of the wrong kind".into()),
                },
                Err(error) => Event::AnswerFailed {
                    node,
                    what: "status",
                    error,
                },
            };
            let _ = events.send(event).await;
        }));
    }

    pub(super) fn spawn_blocks_request(&self, sync_request: SyncRequest) {
        let events = self.events.clone();
        let Some(conn) = self.conns.get(&sync_request.peer).map(|c| c.conn.clone()) else {
            // Sent from a task: the network task only ever receives from its event channel.
            tokio::spawn(tracing::Instrument::in_current_span(async move {
                let _ = events
                    .send(Event::BlocksAnswer {
                        request: sync_request,
                        result: Err(RequestError::Transport("peer is not connected".into())),
                    })
                    .await;
            }));
            return;
        };
        let max = self.limits.max_message_bytes;
        let max_deposits = self.genesis.max_deposits_per_block;
        let count = u16::try_from(sync_request.count)
            .unwrap_or(MAX_BLOCKS_PER_REQUEST)
            .min(MAX_BLOCKS_PER_REQUEST);
        tokio::spawn(tracing::Instrument::in_current_span(async move {
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
                        .map(|(block, bytes)| (block.header.height, block.hash().to_bytes(), bytes))
                        .collect::<SyncedBlocks>()
                });
            let _ = events
                .send(Event::BlocksAnswer {
                    request: sync_request,
                    result,
                })
                .await;
        }));
    }
}

/// Whether a hold `(module, until)` still holds at `now`: before `until`, and while the module
/// it waits for (if any) is not ready.
fn holds(
    hold: Option<(Option<ModuleHash>, Instant)>,
    now: Instant,
    is_ready: impl Fn(&ModuleHash) -> bool,
) -> bool {
    hold.is_some_and(|(module, until)| now < until && !module.is_some_and(|m| is_ready(&m)))
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
        .map(|_| hash.to_bytes())
        .map_err(SyncImportError::Refused)
}

/// Requests a block range and decodes every block of the answer, keeping its bytes.
async fn request_blocks(
    conn: &quinn::Connection,
    blocks: Request,
    max_message_bytes: usize,
    max_deposits: u16,
) -> Result<Vec<(Block, Vec<u8>)>, RequestError> {
    let encoded = match request(conn, blocks, max_message_bytes).await? {
        Response::Blocks(encoded) => encoded,
        Response::Pruned(below) => return Err(RequestError::Pruned { below }),
        _ => return Err(RequestError::Malformed("answer of the wrong kind".into())),
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

/// Sends one request on a new bidirectional stream and reads its answer, within
/// `REQUEST_TIMEOUT`.
pub(super) async fn request(
    conn: &quinn::Connection,
    request: Request,
    max_message_bytes: usize,
) -> Result<Response, RequestError> {
    let deadline = std::time::Instant::now()
        .checked_add(REQUEST_TIMEOUT)
        .unwrap_or_else(std::time::Instant::now);
    request_until(conn, request, max_message_bytes, deadline).await
}

/// [`request`] bounded by `deadline` instead of `REQUEST_TIMEOUT` (for a caller that owns the
/// deadline: the checkpoint fetcher).
pub(super) async fn request_until(
    conn: &quinn::Connection,
    request: Request,
    max_message_bytes: usize,
    deadline: std::time::Instant,
) -> Result<Response, RequestError> {
    let bound = deadline.saturating_duration_since(std::time::Instant::now());
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
    tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), exchange)
        .await
        .map_err(|_| RequestError::Timeout(bound))?
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::chain::ImportError;
    use crate::runtime::Kind;
    use crate::store::StoreError;

    const X: ModuleHash = ModuleHash([7; 32]);

    fn refused(e: ForkChoiceError) -> SyncImportError {
        SyncImportError::Refused(WorkerError::Block(e))
    }

    #[test]
    fn a_block_refused_for_a_missing_module_holds_sync_until_the_module_is_ready() {
        let missing = ImportError::ModuleMissing {
            kind: Kind::Deposits,
            module: X,
            height: 5,
        };
        // However the chain met it: on import (or a side branch), or replaying a parent state.
        let on_import = refused(ForkChoiceError::from(missing));
        let in_replay = refused(ForkChoiceError::ParentState {
            hash: crate::hashes::BlockHash::new([0xab; 32]),
            source: Box::new(crate::state_cache::StateCacheError::Replay(
                ImportError::ModuleMissing {
                    kind: Kind::Deposits,
                    module: X,
                    height: 5,
                },
            )),
        });
        for e in [on_import, in_replay] {
            assert_ne!(e.fault(), Fault::Peer);
            let hold = e
                .hold()
                .map(|m| (m, Instant::now() + Duration::from_secs(5)));
            assert_eq!(hold.map(|(m, _)| m), Some(Some(X)));
            assert!(holds(hold, Instant::now(), |_| false));
            // The module is ready: the hold ends at once, not at its deadline.
            assert!(!holds(hold, Instant::now(), |m| *m == X));
        }
    }

    #[test]
    fn a_block_not_checked_for_another_reason_of_ours_holds_sync_for_a_while_only() {
        let store = refused(ForkChoiceError::from(ImportError::Store {
            hash: crate::hashes::BlockHash::new([0xab; 32]),
            source: StoreError::Corrupt("test".into()),
        }));
        assert_ne!(store.fault(), Fault::Peer);
        assert_eq!(store.hold(), Some(None));
        let now = Instant::now();
        let hold = Some((None, now + Duration::from_secs(5)));
        assert!(holds(hold, now, |_| true));
        assert!(!holds(hold, now + Duration::from_secs(5), |_| false));
        // A peer's fault or an unknown branch: no hold, the peer is dealt with instead.
        let invalid = refused(ForkChoiceError::from(ImportError::BadSeal {
            hash: crate::hashes::BlockHash::new([0xab; 32]),
            reason: "forged".into(),
        }));
        assert_eq!(invalid.hold(), None);
        assert!(!holds(None, now, |_| false));
    }
}

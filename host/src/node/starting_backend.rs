//! The admin API from the first moment of [`Node::start`](super::Node::start): while the node
//! loads its modules and restores a checkpoint (which can take many minutes), `/livez`,
//! `/readyz`, `/status` and `/metrics` answer with what is known — the restore's progress and
//! the bans so far — and every chain or module operation gets 503 with the reason and a
//! `Retry-After`. Once the chain is open the node installs its full backend here and every
//! call goes to it.

use std::sync::{Arc, OnceLock};

use super::metrics::{self, Metrics};
use crate::admin::{AdminBackend, BoxFuture, ModuleOp, ModuleOpError, blocks_query, state_query};
use crate::modules_store::upload::{UploadError, UploadOutcome};

/// The backend the admin server holds from the start: the node's own once installed,
/// answers about starting until then.
pub(crate) struct StartingBackend {
    node_id: String,
    metrics: Arc<Metrics>,
    started: OnceLock<Arc<dyn AdminBackend>>,
}

impl StartingBackend {
    /// A backend for the node `node_id` whose counters are `metrics`.
    pub(crate) fn new(node_id: String, metrics: Arc<Metrics>) -> Self {
        Self {
            node_id,
            metrics,
            started: OnceLock::new(),
        }
    }

    /// The node is open: from now on every call goes to `backend`. A second call changes
    /// nothing (the first backend stays).
    pub(crate) fn install(&self, backend: Arc<dyn AdminBackend>) {
        let _ = self.started.set(backend);
    }

    /// Why chain and module operations cannot be served yet.
    fn reason(&self) -> String {
        let restore = self.metrics.checkpoint_restore.status();
        if restore.chunks_total > 0 && !restore.done {
            format!(
                "the node is starting: restoring a checkpoint ({} of {} chunks verified); the chain \
                 opens when the restore ends",
                restore.chunks_verified, restore.chunks_total
            )
        } else {
            "the node is starting (loading modules, restoring or opening the chain)".into()
        }
    }
}

impl AdminBackend for StartingBackend {
    fn starting(&self) -> Option<String> {
        match self.started.get() {
            Some(backend) => backend.starting(),
            None => Some(self.reason()),
        }
    }

    fn status(&self) -> serde_json::Value {
        if let Some(backend) = self.started.get() {
            return backend.status();
        }
        // No head yet: the chain's fields are absent rather than zero, so a poller never
        // mistakes a starting node for one at height 0.
        let bans: Vec<metrics::BanStatus> = self
            .metrics
            .bans
            .live(crate::clock::unix_ms())
            .into_iter()
            .map(|(node, until_unix_ms)| metrics::BanStatus {
                node: hex::encode(node),
                until_unix_ms,
            })
            .collect();
        serde_json::json!({
            "node_id": self.node_id,
            "starting": self.reason(),
            "checkpoint_restore": self.metrics.checkpoint_restore.status(),
            "bans": bans,
        })
    }

    fn metrics(&self) -> String {
        if let Some(backend) = self.started.get() {
            return backend.metrics();
        }
        let mut text = metrics::render_checkpoints(&self.metrics);
        text = metrics::without_eof(text);
        text.push_str("# EOF\n");
        text
    }

    fn upload_module(
        &self,
        bytes: Vec<u8>,
        source: String,
    ) -> BoxFuture<'_, Result<UploadOutcome, UploadError>> {
        match self.started.get() {
            Some(backend) => backend.upload_module(bytes, source),
            // (The admin routes answer 503 with the reason before asking: see `starting`.)
            None => Box::pin(async { Err(UploadError::Busy) }),
        }
    }

    fn modules(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        match self.started.get() {
            Some(backend) => backend.modules(),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(reason) })
            }
        }
    }

    fn state(
        &self,
        query: state_query::StateQuery,
    ) -> BoxFuture<'_, Result<serde_json::Value, state_query::StateQueryError>> {
        match self.started.get() {
            Some(backend) => backend.state(query),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(state_query::StateQueryError::Unavailable(reason)) })
            }
        }
    }

    fn blocks(
        &self,
        query: blocks_query::BlocksQuery,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        match self.started.get() {
            Some(backend) => backend.blocks(query),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(reason) })
            }
        }
    }

    fn livez(&self) -> BoxFuture<'_, Result<(), String>> {
        match self.started.get() {
            Some(backend) => backend.livez(),
            // The process answers: it is alive, only not open yet.
            None => Box::pin(async { Ok(()) }),
        }
    }

    fn readyz(&self) -> BoxFuture<'_, Result<(), String>> {
        match self.started.get() {
            Some(backend) => backend.readyz(),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(reason) })
            }
        }
    }

    fn create_checkpoint(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        match self.started.get() {
            Some(backend) => backend.create_checkpoint(),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(reason) })
            }
        }
    }

    fn checkpoints(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        match self.started.get() {
            Some(backend) => backend.checkpoints(),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(reason) })
            }
        }
    }

    fn latest_checkpoint(
        &self,
    ) -> BoxFuture<'_, Result<Option<crate::admin::StoredCheckpoint>, String>> {
        match self.started.get() {
            Some(backend) => backend.latest_checkpoint(),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(reason) })
            }
        }
    }

    fn checkpoint_chunk(
        &self,
        id: [u8; 32],
        index: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
        match self.started.get() {
            Some(backend) => backend.checkpoint_chunk(id, index),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(reason) })
            }
        }
    }

    fn propose_upgrade(
        &self,
        action: crate::state::schedule::Action,
        kind: String,
        sha256: String,
        activate_at: u64,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        match self.started.get() {
            Some(backend) => backend.propose_upgrade(action, kind, sha256, activate_at),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(reason) })
            }
        }
    }

    fn module_op(&self, op: ModuleOp) -> BoxFuture<'_, Result<serde_json::Value, ModuleOpError>> {
        match self.started.get() {
            Some(backend) => backend.module_op(op),
            None => {
                let reason = self.reason();
                Box::pin(async move { Err(ModuleOpError::Internal(reason)) })
            }
        }
    }
}

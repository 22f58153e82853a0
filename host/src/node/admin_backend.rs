//! The node as the admin API sees it: [`AdminBackend`] over the chain worker, the module
//! service and slots, the state cache, checkpoints and metrics.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::chain_worker::ChainHandle;
use super::upgrades::UpgradeAgent;
use super::{Metrics, chain_worker, health, metrics, module_ops, slot_record};
use crate::admin::{self, AdminBackend, BoxFuture, ModuleOp, ModuleOpError};
use crate::checkpoint::CheckpointStore;
use crate::clock::unix_ms;
use crate::deposit_source::DepositSource;
use crate::hashes::ModuleHash;
use crate::modules_store::upload::{ModuleService, UploadError, UploadOutcome};
use crate::runtime::Modules;
use crate::state::schedule::Action;

/// The node as the admin API sees it.
pub(super) struct Backend {
    pub(super) node_id: String,
    pub(super) p2p_addr: String,
    pub(super) chain: ChainHandle,
    pub(super) metrics: Arc<Metrics>,
    pub(super) module_store: Arc<ModuleService>,
    pub(super) slots: Arc<Modules>,
    pub(super) states: Arc<crate::state_cache::StateCache>,
    pub(super) checkpoints: CheckpointStore,
    pub(super) upgrades: Arc<UpgradeAgent>,
    /// Whether this node's blocks carry votes (it may produce).
    pub(super) produces: bool,
    /// Start of slot 0 and the slot length, for readiness.
    pub(super) slot_clock: (u64, u64),
    /// The data directory, whose size `/metrics` reports.
    pub(super) data_dir: PathBuf,
    /// The deposit contract endpoint this node follows (a producer), for `/readyz`.
    pub(super) deposit_endpoint: Option<String>,
    /// The deposits it followed (a producer), for the deposit queue on `/metrics`.
    pub(super) deposit_source: Option<Arc<DepositSource>>,
}

impl Backend {
    /// What `/readyz` (and `modnode_ready`) decide from, read now without blocking.
    fn readiness_inputs(&self) -> health::ReadinessInputs {
        let view = self.chain.view();
        let (genesis_ms, slot_ms) = self.slot_clock;
        let now = unix_ms();
        let restore = self.metrics.checkpoint_restore.status();
        let deposit_source = self.deposit_endpoint.as_ref().map(|endpoint| {
            let (last_answer_unix_ms, last_failure) = self.metrics.eth1_follower.reachability();
            health::DepositSourceHealth {
                endpoint: endpoint.clone(),
                last_answer_unix_ms,
                last_failure,
            }
        });
        health::ReadinessInputs {
            now_unix_ms: now,
            restoring: restore.chunks_total > 0 && !restore.done,
            deposit_source,
            wall_slot: now
                .saturating_sub(genesis_ms)
                .checked_div(slot_ms)
                .unwrap_or(0),
            head_slot: view.head.slot,
            head_height: view.head.height,
            best_peer_height: self.metrics.sync_target_height.load(Ordering::Relaxed),
            started_up: self.metrics.started_up.load(Ordering::Relaxed),
            syncing: self.metrics.syncing.load(Ordering::Relaxed),
        }
    }
}

impl AdminBackend for Backend {
    fn livez(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let head = self.chain.view().head.height;
            let asked = self.chain.blocks(head, 1, 1 << 20);
            match tokio::time::timeout(Duration::from_secs(2), asked).await {
                Err(_) => Err("the chain worker did not answer within 2 s".into()),
                Ok(Err(e @ chain_worker::WorkerError::Stopped)) => Err(e.to_string()),
                Ok(_) => Ok(()),
            }
        })
    }

    fn readyz(&self) -> BoxFuture<'_, Result<(), String>> {
        let inputs = self.readiness_inputs();
        Box::pin(async move { health::readiness(&inputs) })
    }

    fn create_checkpoint(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let summary = self.chain.create_checkpoint().await?;
            serde_json::to_value(summary).map_err(|e| e.to_string())
        })
    }

    fn checkpoints(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        let store = self.checkpoints.clone();
        Box::pin(async move {
            let list = tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                crate::checkpoint::service::summaries(&store)
            }))
            .await
            .map_err(|e| format!("checkpoint listing task failed: {e}"))?
            .map_err(|e| e.to_string())?;
            Ok(serde_json::json!({ "checkpoints": list }))
        })
    }

    fn latest_checkpoint(&self) -> BoxFuture<'_, Result<Option<admin::StoredCheckpoint>, String>> {
        let store = self.checkpoints.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                let newest = store.list().map_err(|e| e.to_string())?.into_iter().next();
                Ok(newest.map(|m| admin::StoredCheckpoint {
                    height: m.height,
                    id: m.id(),
                    manifest: m.encode(),
                }))
            }))
            .await
            .map_err(|e| format!("checkpoint listing task failed: {e}"))?
        })
    }

    fn checkpoint_chunk(
        &self,
        id: [u8; 32],
        index: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
        let store = self.checkpoints.clone();
        Box::pin(async move {
            let Ok(index) = usize::try_from(index) else {
                return Ok(None);
            };
            tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                store.chunk(&id, index).map_err(|e| e.to_string())
            }))
            .await
            .map_err(|e| format!("checkpoint chunk task failed: {e}"))?
        })
    }

    fn status(&self) -> serde_json::Value {
        let status = self.metrics.status(
            self.node_id.clone(),
            self.p2p_addr.clone(),
            &self.chain.view(),
        );
        serde_json::to_value(status).unwrap_or_default()
    }

    fn metrics(&self) -> String {
        let mut text = self.metrics.render(&self.chain.view());
        // The state cache's figures follow the node's own, before the closing `# EOF`.
        let mut cache = crate::node::metrics::render_state_cache(&self.states.metrics());
        cache.push_str(&crate::node::metrics::render_checkpoints(&self.metrics));
        cache.push_str(&self.upgrades.render_metrics(self.chain.view().head.height));
        cache.push_str(&metrics::render_modules(
            &self.slots.status(),
            &self.slots.call_counts(),
        ));
        cache.push_str(&metrics::render_build_info());
        let inputs = self.readiness_inputs();
        cache.push_str(&metrics::render_sync(metrics::SyncFigures {
            head_slot: inputs.head_slot,
            wall_slot: inputs.wall_slot,
            ready: health::readiness(&inputs).is_ok(),
        }));
        cache.push_str(&metrics::render_import());
        if let Ok(gossip) = self.metrics.gossip.lock() {
            cache.push_str(&metrics::render_gossip(&gossip));
        }
        if let Some(source) = &self.deposit_source {
            cache.push_str(&metrics::render_deposit_queue(
                source.len(),
                self.chain.view().deposit_index,
            ));
        }
        cache.push_str(&metrics::render_disk(metrics::dir_bytes(&self.data_dir)));
        match text.rfind("# EOF") {
            Some(at) => text.insert_str(at, &cache),
            None => text.push_str(&cache),
        }
        text
    }

    fn state(
        &self,
        query: admin::state_query::StateQuery,
    ) -> BoxFuture<'_, Result<serde_json::Value, admin::state_query::StateQueryError>> {
        let states = self.states.clone();
        let syncing = self.metrics.syncing.load(Ordering::Relaxed);
        Box::pin(async move {
            if syncing && query.height.is_some() {
                return Err(admin::state_query::StateQueryError::Unavailable(
                    "the node is catching up; state queries at a height are refused until it has"
                        .into(),
                ));
            }
            // May replay blocks: off the async tasks, on its own thread (never the chain
            // worker's, so import does not wait for it).
            tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                admin::state_query::answer(&states, &query)
            }))
            .await
            .unwrap_or_else(|e| {
                Err(admin::state_query::StateQueryError::Internal(format!(
                    "state query task failed: {e}"
                )))
            })
        })
    }

    fn blocks(
        &self,
        query: admin::blocks_query::BlocksQuery,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let encoded = self
                .chain
                .blocks(query.from, query.count, usize::MAX)
                .await
                .map_err(|e| e.to_string())?;
            admin::blocks_query::render(&encoded, query.raw)
        })
    }

    fn upload_module(
        &self,
        bytes: Vec<u8>,
        source: String,
    ) -> BoxFuture<'_, Result<UploadOutcome, UploadError>> {
        let modules = self.module_store.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                modules.upload(&bytes, &source)
            }))
            .await
            .unwrap_or_else(|e| Err(UploadError::Internal(e.to_string())))
        })
    }

    fn modules(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        let (slots, store) = (self.slots.clone(), self.module_store.clone());
        Box::pin(async move {
            let mut listing =
                tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                    module_ops::list(&slots, &store)
                }))
                .await
                .map_err(|e| format!("module listing task failed: {e}"))??;
            // Scheduled on chain: the height, and who reports the module ready.
            let head = self.chain.view().head.height;
            self.upgrades.annotate(&mut listing, head);
            Ok(listing)
        })
    }

    fn module_op(&self, op: ModuleOp) -> BoxFuture<'_, Result<serde_json::Value, ModuleOpError>> {
        let (slots, store) = (self.slots.clone(), self.module_store.clone());
        let data_dir = self.data_dir.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                let done = module_ops::run(&slots, &store, op)?;
                // Kept across restarts; a failure to write it does not undo the change.
                if let Err(e) = slot_record::save(&data_dir, &slots) {
                    tracing::warn!(error = %e, "the module slots will not survive a restart");
                }
                Ok(done)
            }))
            .await
            .map_err(|e| ModuleOpError::Internal(format!("module operation task failed: {e}")))?
        })
    }

    fn propose_upgrade(
        &self,
        action: Action,
        kind: String,
        sha256: String,
        activate_at: u64,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            if !self.produces {
                return Err(
                    "this node produces no blocks (a follower, or started with --no-produce), so \
                     its proposals would never be voted: propose on the authorities"
                        .to_string(),
                );
            }
            let kind = crate::runtime::Kind::ALL
                .into_iter()
                .find(|k| k.to_string() == kind)
                .ok_or_else(|| format!("unknown module kind {kind:?}"))?;
            let module = hex::decode(sha256.trim_start_matches("0x"))
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .map(ModuleHash)
                .ok_or_else(|| format!("sha256 {sha256:?} is not 32 bytes of hex"))?;
            let op = crate::state::UpgradeOp {
                kind,
                module,
                height: activate_at,
            };
            if action == Action::Upgrade {
                let upgrades = self.upgrades.clone();
                let ready =
                    tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                        upgrades.prepare_as(kind, &module)
                    }))
                    .await
                    .map_err(|e| format!("module preparation task failed: {e}"))??;
                if !ready {
                    return Err(format!(
                        "module {sha256} is not stored on this node; upload it first"
                    ));
                }
                if kind == crate::runtime::Kind::Deposits {
                    let upgrades = self.upgrades.clone();
                    let slot = self.chain.view().head.slot;
                    tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                        upgrades.check_deposit_cost(&module, slot)
                    }))
                    .await
                    .map_err(|e| format!("module cost check failed: {e}"))??;
                }
            }
            self.chain
                .propose(action, op)
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(?action, %kind, module = %sha256, activate_at, "proposed: our blocks vote for it");
            Ok(serde_json::json!({
                "proposed": true,
                "action": action,
                "kind": kind.to_string(),
                "sha256": hex::encode(module),
                "activate_at": activate_at,
            }))
        })
    }
}

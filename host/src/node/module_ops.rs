//! The admin side of the module slots: what `GET /modules` lists, what `POST /modules/activate`,
//! `/modules/rollback` and `/modules/cancel` do, and the preparation of the built-in and the
//! stored modules at start so that every such version can be activated by hash after a
//! restart.
//!
//! The slot logic itself (swaps, shadow, canary, breaker) is in [`crate::runtime::slot`]; this
//! file only maps between the module store, the slots and the admin API's JSON and errors.

use serde_json::{Value, json};

use super::NodeError;
use crate::admin::{ModuleOp, ModuleOpError};
use crate::hashes::ModuleHash;
use crate::modules_store::upload::{Admission, ModuleService};
use crate::modules_store::{ActiveModule, listing};
use crate::runtime::{Kind, Modules, SlotError, SlotStatus};

/// Prepares every module built into the binary through the module lifecycle (validate once,
/// compile in process, warm, admit: `LifePath::BuiltIn`), so an operator can activate any of
/// them by hash. One that does not prepare stops the start: it is this build's own.
pub(crate) fn prepare_built_in(service: &ModuleService) -> Result<(), NodeError> {
    for (name, bytes) in crate::artifacts::EMBEDDED {
        let ready = service
            .prepare_built_in(bytes)
            .map_err(|e| NodeError::Module {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        tracing::debug!(module = %ready.name, "module ready");
    }
    Ok(())
}

/// Prepares every stored module through the module lifecycle (validate once, load from the
/// artifact cache, warm, admit: `modules_store::lifecycle`), so each can be activated by hash.
/// A stored module that no longer prepares is logged and left out: it must not stop the node,
/// and activating it later says why it is not ready.
pub(crate) fn prepare_stored(service: &ModuleService) {
    let stored = match service.store().list() {
        Ok(stored) => stored,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list stored modules; none prepared");
            return;
        }
    };
    for module in stored {
        match service.store().bytes(&module.sha256) {
            Ok(Some(bytes)) => {
                if let Err(e) = service.prepare_stored(&bytes, Admission::Operator) {
                    tracing::warn!(module = %module.name(), error = %e, "stored module not ready");
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(module = %module.name(), error = %e, "cannot read stored module")
            }
        }
    }
}

/// Runs one module operation; answers `{"kind": …, "slot": <the kind's slot status>}`.
pub(crate) fn run(
    slots: &Modules,
    service: &ModuleService,
    op: ModuleOp,
) -> Result<Value, ModuleOpError> {
    let status = match op {
        ModuleOp::Activate { hash, mode } => {
            let kind = ensure_ready(slots, service, &hash)?;
            slots.activate(kind, hash, mode)
        }
        ModuleOp::Rollback { kind } => slots.rollback(kind),
        ModuleOp::Cancel { kind } => slots.cancel_candidate(kind),
    }
    .map_err(refusal)?;
    Ok(json!({ "kind": status.kind, "slot": status }))
}

/// The kind of the module `hash`, preparing it from the store if it is stored but was not
/// prepared yet.
fn ensure_ready(
    slots: &Modules,
    service: &ModuleService,
    hash: &ModuleHash,
) -> Result<Kind, ModuleOpError> {
    if let Some(prepared) = slots.prepared_version(hash) {
        return Ok(prepared.kind);
    }
    let hex_hash = hash.to_hex();
    let bytes = service
        .store()
        .bytes(hash)
        .map_err(|e| ModuleOpError::Internal(e.to_string()))?
        .ok_or_else(|| {
            ModuleOpError::Unknown(format!(
                "no module with sha256 {hex_hash} is stored on or built into this node; upload \
                 it first (`modnode module upload <file.wasm>`)"
            ))
        })?;
    service
        .prepare_stored(&bytes, Admission::Operator)
        .map(|p| p.kind)
        .map_err(|e| {
            ModuleOpError::Refused(format!("module {hex_hash} is stored but not ready: {e}"))
        })
}

fn refusal(e: SlotError) -> ModuleOpError {
    match e {
        SlotError::UnknownModule { .. } => ModuleOpError::Unknown(e.to_string()),
        SlotError::Thread(_) => ModuleOpError::Internal(e.to_string()),
        _ => ModuleOpError::Refused(e.to_string()),
    }
}

/// `GET /modules`: [`listing`] of the store, and per kind its slot status and every version
/// ready to activate (built in or uploaded) with what its warm-up measured.
pub(crate) fn list(slots: &Modules, service: &ModuleService) -> Result<Value, String> {
    let stored = service.store().list().map_err(|e| e.to_string())?;
    let statuses: Vec<SlotStatus> = slots.status();
    let active: Vec<ActiveModule> = statuses
        .iter()
        .map(|s| ActiveModule {
            kind: s.kind.to_string(),
            name: s.active.name.clone(),
            sha256: s.active.hash.to_hex(),
        })
        .collect();
    let prepared = slots.prepared();
    let mut value = listing(&active, &stored);
    let kinds = value
        .get_mut("kinds")
        .and_then(Value::as_array_mut)
        .ok_or("module listing without kinds")?;
    for entry in kinds {
        let Some(kind) = entry
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            continue;
        };
        let Some(object) = entry.as_object_mut() else {
            continue;
        };
        if let Some(status) = statuses.iter().find(|s| s.kind.to_string() == kind) {
            object.insert("slot".into(), json!(status));
        }
        let versions: Vec<Value> = prepared
            .iter()
            .filter(|p| p.kind.to_string() == kind)
            .map(|p| {
                let hash = p.hash.to_hex();
                let from = stored
                    .iter()
                    .find(|m| m.sha256 == p.hash)
                    .map_or("built in", |m| m.source.as_str());
                json!({
                    "name": p.name,
                    "sha256": hash,
                    "module_version": p.version,
                    "contract": p.contract,
                    "migration": p.migration,
                    "warmup": p.warmup,
                    "from": from,
                })
            })
            .collect();
        object.insert("ready".into(), Value::Array(versions));
    }
    Ok(value)
}

#[cfg(test)]
mod tests;

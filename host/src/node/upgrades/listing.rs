//! What `GET /modules` and `/metrics` show of on-chain upgrades: each scheduled module's
//! readiness here, at peers and at the authorities, and the listing annotated with what the
//! chain runs and schedules.

use std::collections::HashMap;

use modnode_peers::NodeId;

use crate::hashes::ModuleHash;
use crate::runtime::Kind;
use crate::state::Schedule;

/// One scheduled module as `GET /modules` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScheduledReadiness {
    /// The kind.
    pub kind: Kind,
    /// The module's sha256 (hex).
    pub sha256: String,
    /// The height it activates at.
    pub height: u64,
    /// Whether this node has it ready.
    pub ready_here: bool,
    /// Connected peers reporting it ready.
    pub peers_ready: usize,
    /// Connected peers.
    pub peers_connected: usize,
    /// Authorities (this node included, if it is one) reporting it ready.
    pub authorities_ready: usize,
    /// Size of the authority set.
    pub authorities: usize,
}

/// Readiness of every entry of `schedule` not yet active at `head_height` (it activates at a
/// height not imported yet): whether `me` has it ready, and which of `peers` (what each
/// connected peer last reported ready) and of the `authorities` do.
pub(super) fn readiness_of(
    schedule: &Schedule,
    head_height: u64,
    peers: &HashMap<NodeId, Vec<ModuleHash>>,
    authorities: &[NodeId],
    me: &NodeId,
    is_ready: impl Fn(&ModuleHash) -> bool,
) -> Vec<ScheduledReadiness> {
    let me_authority = authorities.contains(me);
    schedule
        .upcoming(head_height)
        .map(|e| {
            let ready_here = is_ready(&e.module);
            let ready_peers: Vec<&NodeId> = peers
                .iter()
                .filter(|(_, r)| r.contains(&e.module))
                .map(|(p, _)| p)
                .collect();
            let authorities_ready = ready_peers
                .iter()
                .filter(|p| authorities.contains(p))
                .count()
                .saturating_add(usize::from(ready_here && me_authority));
            ScheduledReadiness {
                kind: e.kind,
                sha256: e.module.to_hex(),
                height: e.height,
                ready_here,
                peers_ready: ready_peers.len(),
                peers_connected: peers.len(),
                authorities_ready,
                authorities: authorities.len(),
            }
        })
        .collect()
}

/// The module each kind of `schedule` ran the head block at `head_height` with: what a
/// listing shows as active. A module activating at `head_height + 1` is not running yet (the
/// block at its height is not imported), so it is only scheduled.
pub fn running_at(schedule: &Schedule, head_height: u64) -> Vec<(Kind, ModuleHash)> {
    Kind::ALL
        .into_iter()
        .filter_map(|k| schedule.module_at(k, head_height).map(|h| (k, h)))
        .collect()
}

/// Adds on-chain scheduling to a `GET /modules` listing: every upcoming entry under
/// `"scheduled"`, the next one of each kind as that kind's `slot.scheduled` (hash, height,
/// peers and authorities reporting it ready), and as a consensus kind's `slot.active` the
/// module the chain runs next (`chain_active`: kind and hash) with its contract, when it is
/// ready here.
pub fn annotate_listing(
    listing: &mut serde_json::Value,
    readiness: &[ScheduledReadiness],
    chain_active: &[(Kind, ModuleHash)],
) {
    if let Some(kinds) = listing.get_mut("kinds").and_then(|k| k.as_array_mut()) {
        for entry in kinds {
            let kind = entry
                .get("kind")
                .and_then(|k| k.as_str())
                .map(str::to_string);
            let running = chain_active
                .iter()
                .find(|(k, _)| Some(k.to_string()) == kind)
                .map(|(_, h)| h.to_hex());
            let version = running.as_ref().and_then(|hash| {
                entry
                    .get("ready")
                    .and_then(|r| r.as_array())
                    .and_then(|r| {
                        r.iter()
                            .find(|v| v.get("sha256").and_then(|s| s.as_str()) == Some(hash))
                    })
                    .cloned()
            });
            if let (Some(hash), Some(v)) = (&running, version)
                && let Some(slot) = entry.get_mut("slot").and_then(|s| s.as_object_mut())
            {
                slot.insert(
                    "active".into(),
                    serde_json::json!({
                        "name": v.get("name"),
                        "hash": hash,
                        "version": v.get("module_version"),
                        "contract": v.get("contract"),
                        "migration": v.get("migration"),
                        "warmup": v.get("warmup"),
                    }),
                );
            }
            let next = readiness
                .iter()
                .filter(|r| Some(r.kind.to_string()) == kind)
                .min_by_key(|r| r.height);
            if let (Some(next), Some(slot)) = (next, entry.get_mut("slot"))
                && let Some(slot) = slot.as_object_mut()
            {
                slot.insert(
                    "scheduled".into(),
                    serde_json::json!({
                        "hash": next.sha256,
                        "height": next.height,
                        "ready_here": next.ready_here,
                        "peers_ready": next.peers_ready,
                        "authorities_ready": next.authorities_ready,
                    }),
                );
            }
        }
    }
    if let Some(map) = listing.as_object_mut() {
        map.insert(
            "scheduled".into(),
            serde_json::to_value(readiness).unwrap_or_default(),
        );
    }
}

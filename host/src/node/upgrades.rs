//! The node's side of on-chain upgrades: which deposits module runs a height (the chain asks,
//! by the hash its schedule names), getting scheduled modules ready before their height
//! (from the local store, else fetched from peers by hash, verified, then the upload path:
//! validate, precompile, warm), serving module bytes to peers, and who reports them ready.
//!
//! A scheduled module that is not ready makes import stop at its height with
//! [`ImportError::ModuleMissing`](crate::chain::ImportError::ModuleMissing); the network task
//! keeps fetching ([`UpgradeAgent::next_fetch`]) and sync resumes once the module is ready.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use modnode_peers::NodeId;
use sha2::{Digest, Sha256};

use crate::chain::{DepositEngine, DepositModules};
use crate::modules_store::upload::ModuleService;
use crate::runtime::{Kind, Modules};
use crate::state::Schedule;

type Hash = [u8; 32];

/// Why a module fetched from a peer was not taken.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The bytes do not hash to what was asked: the peer lied.
    #[error("asked for module {asked}, got bytes hashing to {got}")]
    WrongHash {
        /// The hash asked for (hex).
        asked: String,
        /// What the bytes hash to (hex).
        got: String,
    },
    /// The module failed the upload checks (validation, compile, warm-up) or storing it failed.
    #[error("module {hash} from a peer was not accepted: {reason}")]
    Rejected {
        /// The hash (hex).
        hash: String,
        /// Why.
        reason: String,
    },
}

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

/// See the module docs. Shared by the chain (as its [`DepositModules`]), the network task and
/// the admin API.
pub struct UpgradeAgent {
    modules: Arc<Modules>,
    service: Arc<ModuleService>,
    embedded: HashMap<Hash, &'static [u8]>,
    authorities: Vec<NodeId>,
    me: NodeId,
    /// The schedule after the head.
    schedule: Mutex<Schedule>,
    /// What each connected peer last reported ready.
    peers: Mutex<HashMap<NodeId, Vec<Hash>>>,
    fetching: AtomicBool,
    serving: AtomicBool,
    /// Modules the chain asked for and did not get (warned about once each).
    warned: Mutex<Vec<Hash>>,
}

impl std::fmt::Debug for UpgradeAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpgradeAgent").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl UpgradeAgent {
    /// An agent over the node's prepared modules and module store; `me` is this node's id,
    /// `authorities` the genesis authority set.
    pub fn new(
        modules: Arc<Modules>,
        service: Arc<ModuleService>,
        authorities: Vec<NodeId>,
        me: NodeId,
    ) -> Self {
        let embedded = crate::artifacts::EMBEDDED
            .iter()
            .map(|(_, bytes)| (Sha256::digest(bytes).into(), *bytes))
            .collect();
        Self {
            modules,
            service,
            embedded,
            authorities,
            me,
            schedule: Mutex::new(Schedule::default()),
            peers: Mutex::new(HashMap::new()),
            fetching: AtomicBool::new(false),
            serving: AtomicBool::new(true),
            warned: Mutex::new(Vec::new()),
        }
    }

    /// The module schedule after the head (scheduled modules and pending upgrade votes).
    pub fn schedule(&self) -> Schedule {
        lock(&self.schedule).clone()
    }

    /// Whether this node sends module bytes to peers that ask (on by default).
    pub fn set_serving(&self, serving: bool) {
        self.serving.store(serving, Ordering::Release);
    }

    fn scheduled_modules(&self) -> Vec<Hash> {
        lock(&self.schedule)
            .entries
            .iter()
            .map(|e| e.module)
            .collect()
    }

    /// Whether the module `hash` is prepared (compiled and warmed) here.
    pub fn is_ready(&self, hash: &Hash) -> bool {
        self.modules.prepared_deposits(hash).is_some()
    }

    /// The scheduled modules this node has ready (what its status answers list).
    pub fn ready_scheduled(&self) -> Vec<Hash> {
        let mut ready: Vec<Hash> = self
            .scheduled_modules()
            .into_iter()
            .filter(|h| self.is_ready(h))
            .collect();
        ready.sort_unstable();
        ready.dedup();
        ready.truncate(crate::net::rpc::MAX_READY_MODULES);
        ready
    }

    /// Scheduled modules not ready here.
    pub fn missing(&self) -> Vec<Hash> {
        let mut missing: Vec<Hash> = self
            .scheduled_modules()
            .into_iter()
            .filter(|h| !self.is_ready(h))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        missing
    }

    /// Prepares `hash` from the local store, if it is there. Blocking (loads, maybe compiles).
    pub fn prepare_local(&self, hash: &Hash) -> Result<bool, String> {
        if self.is_ready(hash) {
            return Ok(true);
        }
        let bytes = match self.embedded.get(hash) {
            Some(bytes) => bytes.to_vec(),
            None => match self
                .service
                .store()
                .bytes(hash)
                .map_err(|e| e.to_string())?
            {
                Some(bytes) => bytes,
                None => return Ok(false),
            },
        };
        self.modules.prepare(&bytes).map_err(|e| e.to_string())?;
        Ok(true)
    }

    /// Takes module bytes a peer sent for `hash`: checks the hash, then the upload path
    /// (validate, precompile, warm, store) and prepares it. Blocking.
    pub fn accept_fetched(&self, hash: &Hash, bytes: &[u8], peer: &str) -> Result<(), FetchError> {
        let got: Hash = Sha256::digest(bytes).into();
        if got != *hash {
            return Err(FetchError::WrongHash {
                asked: hex::encode(hash),
                got: hex::encode(got),
            });
        }
        let rejected = |reason: String| FetchError::Rejected {
            hash: hex::encode(hash),
            reason,
        };
        self.service
            .upload(bytes, &format!("peer {peer}"))
            .map_err(|e| rejected(e.to_string()))?;
        self.modules
            .prepare(bytes)
            .map_err(|e| rejected(e.to_string()))?;
        tracing::info!(module = %hex::encode(hash), %peer, "scheduled module fetched, compiled and warmed: ready");
        Ok(())
    }

    /// The bytes of module `hash`, to serve a peer: a stored or embedded module of a consensus
    /// kind — any a chain may schedule, past versions included (a node syncing from genesis
    /// needs each in turn) — never a local kind's uploads.
    pub fn serve(&self, hash: &Hash) -> Option<Vec<u8>> {
        if !self.serving.load(Ordering::Acquire) {
            return None;
        }
        let consensus = self.modules.prepared_deposits(hash).is_some()
            || self
                .service
                .store()
                .meta(hash)
                .ok()
                .flatten()
                .is_some_and(|m| m.kind == Kind::Deposits.to_string());
        if !consensus {
            return None;
        }
        if let Some(bytes) = self.embedded.get(hash) {
            return Some(bytes.to_vec());
        }
        self.service.store().bytes(hash).ok().flatten()
    }

    /// A missing scheduled module to fetch now and the peers to ask (those reporting it ready
    /// first, then every other connected peer), unless a fetch is already running; the caller
    /// must call [`UpgradeAgent::fetch_done`] when it ends.
    pub fn next_fetch(&self, connected: &[Hash]) -> Option<(Hash, Vec<Hash>)> {
        let hash = *self.missing().first()?;
        if self.fetching.swap(true, Ordering::AcqRel) {
            return None;
        }
        let peers = lock(&self.peers);
        let (mut ready, others): (Vec<Hash>, Vec<Hash>) = connected
            .iter()
            .partition(|p| peers.get(*p).is_some_and(|r| r.contains(&hash)));
        ready.extend(others);
        Some((hash, ready))
    }

    /// The fetch started by [`UpgradeAgent::next_fetch`] ended.
    pub fn fetch_done(&self) {
        self.fetching.store(false, Ordering::Release);
    }

    /// `peer` reported these modules ready.
    pub fn peer_ready(&self, peer: NodeId, ready: Vec<Hash>) {
        lock(&self.peers).insert(peer, ready);
    }

    /// `peer` disconnected.
    pub fn peer_gone(&self, peer: &NodeId) {
        lock(&self.peers).remove(peer);
    }

    /// Readiness of every scheduled module not yet active at `head_height`.
    pub fn readiness(&self, head_height: u64) -> Vec<ScheduledReadiness> {
        let peers = lock(&self.peers);
        let schedule = self.schedule();
        schedule
            .entries
            .iter()
            .filter(|e| e.height > head_height)
            .map(|e| {
                let ready_here = self.is_ready(&e.module);
                let ready_peers: Vec<&NodeId> = peers
                    .iter()
                    .filter(|(_, r)| r.contains(&e.module))
                    .map(|(p, _)| p)
                    .collect();
                let me_authority = self.authorities.contains(&self.me);
                let authorities_ready = ready_peers
                    .iter()
                    .filter(|p| self.authorities.contains(p))
                    .count()
                    .saturating_add(usize::from(ready_here && me_authority));
                ScheduledReadiness {
                    kind: e.kind,
                    sha256: hex::encode(e.module),
                    height: e.height,
                    ready_here,
                    peers_ready: ready_peers.len(),
                    peers_connected: peers.len(),
                    authorities_ready,
                    authorities: self.authorities.len(),
                }
            })
            .collect()
    }
}

/// Adds on-chain scheduling to a `GET /modules` listing: every upcoming entry under
/// `"scheduled"`, the next one of each kind as that kind's `slot.scheduled` (hash, height,
/// peers and authorities reporting it ready), and as a consensus kind's `slot.active` the
/// module the chain runs next (`chain_active`: kind and hash), when it is ready here.
pub fn annotate_listing(
    listing: &mut serde_json::Value,
    readiness: &[ScheduledReadiness],
    chain_active: &[(Kind, Hash)],
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
                .map(|(_, h)| hex::encode(h));
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

impl DepositModules for UpgradeAgent {
    fn deposits(&self, hash: &Hash) -> Option<DepositEngine> {
        let found = self
            .modules
            .prepared_deposits(hash)
            .map(|m| DepositEngine::Module(Box::new((*m).clone())));
        if found.is_none() {
            let mut warned = lock(&self.warned);
            if !warned.contains(hash) {
                warned.push(*hash);
                tracing::warn!(
                    module = %hex::encode(hash),
                    kind = %Kind::Deposits,
                    "the chain needs a scheduled deposits module this node does not have ready: \
                     import waits at its height while the module is fetched from peers"
                );
            }
        }
        found
    }

    fn scheduled(&self, schedule: &Schedule) {
        *lock(&self.schedule) = schedule.clone();
    }
}

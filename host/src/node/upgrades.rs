//! The node's side of on-chain upgrades: which deposits module runs a height (the chain asks,
//! by the hash its schedule names), getting scheduled modules ready before their height
//! (from the local store, else fetched from peers by hash, verified, then admitted on the
//! chain's word: validate, kind and contract, precompile, warm — local limits and a failed
//! warm-up only warn, see [`Admission::Scheduled`]), serving module bytes to peers, and who
//! reports them ready.
//!
//! A scheduled module that is not ready makes import stop at its height with
//! [`ImportError::ModuleMissing`](crate::chain::ImportError::ModuleMissing); the network task
//! keeps fetching ([`UpgradeAgent::next_fetch`]) and sync resumes once the module is ready.
//! What is fetched is every module the head's schedule names and every module the chain
//! needed on any path — a side branch, a replay — and lacked ([`wanted`]), so a module only
//! a competing branch schedules is fetched too.

pub mod deposit_cost;
pub mod governance;
mod listing;
mod serve_limit;
pub mod wanted;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use modnode_peers::NodeId;
use sha2::{Digest, Sha256};

use crate::chain::{DepositEngine, DepositModules};
use crate::hashes::ModuleHash;
use crate::modules_store::upload::{Admission, ModuleService, UploadOutcome};
use crate::runtime::{Kind, Modules};
use crate::state::Schedule;
use crate::state::schedule::{Action, Governance};

use listing::readiness_of;
pub use listing::{ScheduledReadiness, annotate_listing, running_at};
pub use serve_limit::{FETCH_RETRY, FETCH_RETRY_MAX, Refusal, ServeLimits};
use serve_limit::{FetchPacing, ServeLimiter};
use wanted::WantedModules;

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
    /// The module failed the checks a scheduled module must pass (validation, kind and
    /// contract, compiling, linking) or storing it failed.
    #[error("module {hash} from a peer was not accepted: {reason}")]
    Rejected {
        /// The hash (hex).
        hash: String,
        /// Why.
        reason: String,
    },
}

/// A module answer for a peer: the bytes, if served, and the peer's in-flight place in the
/// serving limits, given back when this is dropped.
#[derive(Debug)]
pub struct Served {
    /// The module bytes; `None` answers "not here".
    pub bytes: Option<Vec<u8>>,
    _permit: Permit,
}

#[derive(Debug)]
struct Permit {
    limiter: Arc<Mutex<ServeLimiter>>,
    peer: NodeId,
}

impl Drop for Permit {
    fn drop(&mut self) {
        lock(&self.limiter).finish(&self.peer);
    }
}

/// Sizes of the upgrade agent's per-peer tables ([`UpgradeAgent::peer_table_sizes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerTableSizes {
    /// Peers whose ready modules are known.
    pub readiness: usize,
    /// Peers with a module-fetch pace.
    pub pacing: usize,
    /// Peers with a module-serving account.
    pub serving: usize,
}

/// See the module docs. Shared by the chain (as its [`DepositModules`]), the network task and
/// the admin API.
pub struct UpgradeAgent {
    modules: Arc<Modules>,
    service: Arc<ModuleService>,
    embedded: HashMap<ModuleHash, &'static [u8]>,
    authorities: Vec<NodeId>,
    me: NodeId,
    /// The schedule after the head.
    schedule: Mutex<Schedule>,
    /// What each connected peer last reported ready. Bounded by the connected peers: an entry
    /// is added only for a connected peer's status answer and removed by
    /// [`UpgradeAgent::peer_gone`] on every way a peer leaves (each list is bounded by the
    /// status answer's `MAX_READY_MODULES`).
    peers: Mutex<HashMap<NodeId, Vec<ModuleHash>>>,
    fetching: AtomicBool,
    /// When each peer may be asked for a module again. Bounded by the connected peers (only
    /// they are asked; `peer_gone` forgets the others).
    pacing: Mutex<FetchPacing>,
    serving: AtomicBool,
    /// What each peer may take of our module serving. Bounded by the connected peers (only
    /// they can ask; `peer_gone` forgets the others) and never above its own cap of tracked
    /// peers.
    limiter: Arc<Mutex<ServeLimiter>>,
    /// Modules the chain needed on any branch and did not have ready.
    wanted: Mutex<WantedModules>,
    /// The module the last fetch was for (fetches take turns).
    last_fetch: Mutex<Option<ModuleHash>>,
    /// The chain's governance rules (for the tally shown to operators).
    rules: Governance,
    /// The chain's `max_deposits_per_block`: a proposed deposits module must finish a block
    /// that full within its budget.
    max_deposits: u16,
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
        let authorities_len = authorities.len();
        // One ready-map: what the service admits is what the chain runs.
        if !service.admit_into(modules.versions().clone()) {
            tracing::warn!(
                "the module service admits into another ready-map than the node's modules: \
                 fetched modules must be prepared again from the store"
            );
        }
        let embedded = crate::artifacts::EMBEDDED
            .iter()
            .map(|(_, bytes)| (ModuleHash(Sha256::digest(bytes).into()), *bytes))
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
            pacing: Mutex::new(FetchPacing::default()),
            serving: AtomicBool::new(true),
            limiter: Arc::new(Mutex::new(ServeLimiter::new(ServeLimits::default()))),
            wanted: Mutex::new(WantedModules::default()),
            last_fetch: Mutex::new(None),
            rules: Governance::defaults(authorities_len),
            max_deposits: crate::chain::block::DEFAULT_MAX_DEPOSITS,
        }
    }

    /// Checks proposed deposits modules against blocks of `max` deposits (the genesis
    /// `max_deposits_per_block`).
    pub fn with_max_deposits(mut self, max: u16) -> Self {
        self.max_deposits = max;
        self
    }

    /// Whether the prepared deposits module `hash` can finish a full block at `slot` within
    /// its budget ([`deposit_cost::check`]); the error says what was measured. Blocking.
    pub fn check_deposit_cost(&self, hash: &ModuleHash, slot: u64) -> Result<(), String> {
        let module = self
            .modules
            .prepared_deposits(hash)
            .ok_or_else(|| format!("deposits module {} is not prepared here", hash.to_hex()))?;
        deposit_cost::check(&module, slot, self.max_deposits)
            .map(|cost| {
                tracing::info!(
                    module = %hash.to_hex(),
                    per_deposit = cost.per_deposit,
                    full_block = cost.full_block,
                    full_budget = cost.full_budget,
                    "proposed deposits module fits a full block"
                );
            })
            .map_err(|e| format!("deposits module {} cannot be proposed: {e}", hash.to_hex()))
    }

    /// Uses the chain's governance rules (lead, expiry, quotas) in what operators are shown.
    pub fn with_governance(mut self, rules: Governance) -> Self {
        self.rules = rules;
        self
    }

    /// The upgrade gauges of `/metrics` (`modnode_upgrade_*`) at head `head_height`.
    pub fn render_metrics(&self, head_height: u64) -> String {
        // Ready as an attestation means it: compiled and warmed here.
        governance::render_metrics(
            &self.schedule(),
            head_height,
            &self.rules,
            |h| self.modules.deposits_warmed(h),
            &self.readiness(head_height),
        )
    }

    /// The module schedule after the head (scheduled modules and pending upgrade votes).
    pub fn schedule(&self) -> Schedule {
        lock(&self.schedule).clone()
    }

    /// Whether this node sends module bytes to peers that ask (on by default).
    pub fn set_serving(&self, serving: bool) {
        self.serving.store(serving, Ordering::Release);
    }

    fn scheduled_modules(&self) -> Vec<ModuleHash> {
        let schedule = lock(&self.schedule);
        // Pending upgrades too: a node that holds a voted module before a majority has voted
        // can attest it ready in time for the gate, and its operator can propose it without
        // uploading it there.
        let pending = schedule
            .pending
            .iter()
            .filter(|p| p.action == Action::Upgrade && p.op.kind == Kind::Deposits)
            .map(|p| p.op.module);
        schedule
            .entries
            .iter()
            .map(|e| e.module)
            .chain(pending)
            .collect()
    }

    /// Whether the module `hash` is prepared (compiled and warmed) here.
    pub fn is_ready(&self, hash: &ModuleHash) -> bool {
        self.modules.prepared_deposits(hash).is_some()
    }

    /// The scheduled modules this node has ready (what its status answers list).
    pub fn ready_scheduled(&self) -> Vec<ModuleHash> {
        let mut ready: Vec<ModuleHash> = self
            .scheduled_modules()
            .into_iter()
            .filter(|h| self.is_ready(h))
            .collect();
        ready.sort_unstable();
        ready.dedup();
        ready.truncate(crate::net::rpc::MAX_READY_MODULES);
        ready
    }

    /// Modules to fetch, sorted: those the head's schedule names and those the chain needed on
    /// any branch ([`DepositModules::missing`]), not ready here.
    pub fn missing(&self) -> Vec<ModuleHash> {
        let wanted = lock(&self.wanted).pending(Instant::now(), |h| self.is_ready(h));
        let mut missing: Vec<ModuleHash> = self
            .scheduled_modules()
            .into_iter()
            .filter(|h| !self.is_ready(h))
            .chain(wanted.into_iter().map(|(_, hash, _)| hash))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        missing
    }

    /// Prepares `hash` from the local store, if it is there. Blocking (loads, maybe compiles).
    pub fn prepare_local(&self, hash: &ModuleHash) -> Result<bool, String> {
        self.prepare_local_kind(hash).map(|kind| kind.is_some())
    }

    /// Prepares `hash` from the local store for an on-chain operation of `kind`: `Ok(false)` if
    /// the bytes are not here, an error naming both kinds if the module is of another kind (a
    /// hash of the wrong kind can never be scheduled by this node). Blocking.
    pub fn prepare_as(&self, kind: Kind, hash: &ModuleHash) -> Result<bool, String> {
        match self.prepare_local_kind(hash)? {
            None => Ok(false),
            Some(found) if found == kind => Ok(true),
            Some(found) => Err(format!(
                "module {} is a {found} module, not a {kind} module: it cannot be scheduled as \
                 {kind}",
                hash.to_hex()
            )),
        }
    }

    /// Prepares `hash` from the local store; its kind, or `None` if the bytes are not here.
    fn prepare_local_kind(&self, hash: &ModuleHash) -> Result<Option<Kind>, String> {
        if self.is_ready(hash) {
            return Ok(Some(Kind::Deposits));
        }
        let Some(bytes) = self.local_bytes(hash)? else {
            return Ok(None);
        };
        let prepared = self
            .service
            .prepare_stored(&bytes, Admission::Operator)
            .map_err(|e| e.to_string())?;
        Ok(Some(prepared.kind))
    }

    /// The bytes of module `hash` built into this binary or in the local store.
    fn local_bytes(&self, hash: &ModuleHash) -> Result<Option<Vec<u8>>, String> {
        match self.embedded.get(hash) {
            Some(bytes) => Ok(Some(bytes.to_vec())),
            None => self.service.store().bytes(hash).map_err(|e| e.to_string()),
        }
    }

    /// The kind the chain scheduled (or is voting to schedule) module `hash` as, if the
    /// schedule after the head names it.
    fn scheduled_kind(&self, hash: &ModuleHash) -> Option<Kind> {
        let schedule = lock(&self.schedule);
        let pending = schedule
            .pending
            .iter()
            .filter(|p| p.action == Action::Upgrade)
            .map(|p| &p.op);
        schedule
            .entries
            .iter()
            .chain(pending)
            .find(|e| e.module == *hash)
            .map(|e| e.kind)
    }

    /// Prepares the scheduled module `hash` from the local store (or the modules built into
    /// this binary), if it is there, on the chain's word: only its kind and contract may refuse
    /// it, a failed warm-up on this node's own history only warns
    /// ([`ModuleService::prepare_stored`] with [`Admission::Scheduled`]). Blocking (loads, maybe
    /// compiles).
    pub fn prepare_scheduled(&self, hash: &ModuleHash) -> Result<bool, String> {
        if self.is_ready(hash) {
            return Ok(true);
        }
        let Some(bytes) = self.local_bytes(hash)? else {
            return Ok(false);
        };
        let kind = self.scheduled_kind(hash);
        self.service
            .prepare_stored(&bytes, Admission::Scheduled { kind })
            .map_err(|e| e.to_string())?;
        Ok(true)
    }

    /// Takes module bytes a peer sent for `hash`: checks the hash, then admits them on the
    /// chain's word (validate, kind and contract, precompile without a deadline, warm-up that
    /// only warns, store: [`Admission::Scheduled`]) and prepares them. Fetches are only made
    /// for modules a chain scheduled, so the module must be of the kind the schedule names, or
    /// of a consensus kind when the schedule after the head does not name it. Blocking.
    pub fn accept_fetched(
        &self,
        hash: &ModuleHash,
        bytes: &[u8],
        peer: &str,
    ) -> Result<(), FetchError> {
        let got = ModuleHash(Sha256::digest(bytes).into());
        if got != *hash {
            return Err(FetchError::WrongHash {
                asked: hash.to_hex(),
                got: got.to_hex(),
            });
        }
        let rejected = |reason: String| FetchError::Rejected {
            hash: hash.to_hex(),
            reason,
        };
        let admission = Admission::Scheduled {
            kind: self.scheduled_kind(hash),
        };
        let outcome = self
            .service
            .admit(bytes, &format!("peer {peer}"), admission)
            .map_err(|e| rejected(e.to_string()))?;
        // Stored before (an earlier fetch, an upload) but not ready: read back from the store.
        if let UploadOutcome::AlreadyStored(_) = outcome
            && !self.is_ready(hash)
        {
            self.service
                .prepare_stored(bytes, admission)
                .map_err(|e| rejected(e.to_string()))?;
        }
        tracing::info!(module = %hash.to_hex(), %peer, "scheduled module fetched, compiled and warmed: ready");
        Ok(())
    }

    /// The bytes of module `hash`, to serve `peer`: a stored or embedded module of a consensus
    /// kind — any a chain may schedule, past versions included (a node syncing from genesis
    /// needs each in turn) — never a local kind's uploads. Within the per-peer limits
    /// ([`ServeLimits`]): over one, [`Refusal::Limited`] (answer "not here"); asking on
    /// regardless, [`Refusal::Abuse`] (a violation). The answer's [`Served`] holds the peer's
    /// one in-flight place until it is dropped, so keep it until the answer is sent.
    pub fn serve(&self, peer: NodeId, hash: &ModuleHash) -> Result<Served, Refusal> {
        let now = Instant::now();
        lock(&self.limiter).admit(peer, now)?;
        let mut served = Served {
            bytes: None,
            _permit: Permit {
                limiter: self.limiter.clone(),
                peer,
            },
        };
        if let Some(bytes) = self.module_bytes(hash) {
            let charged = lock(&self.limiter).charge(peer, bytes.len(), now);
            charged?;
            served.bytes = Some(bytes);
        }
        Ok(served)
    }

    fn module_bytes(&self, hash: &ModuleHash) -> Option<Vec<u8>> {
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

    /// A missing module ([`UpgradeAgent::missing`]; each in turn) to fetch now and the peers
    /// to ask (those reporting it ready first, then every other connected peer; each at most
    /// every [`FETCH_RETRY`], backing off from peers that answered without it), unless a fetch
    /// is already running; the caller must report each answer
    /// ([`UpgradeAgent::fetch_answered`]) and call [`UpgradeAgent::fetch_done`] when it ends.
    pub fn next_fetch(&self, connected: &[NodeId]) -> Option<(ModuleHash, Vec<NodeId>)> {
        let missing = self.missing();
        let mut last = lock(&self.last_fetch);
        let hash = wanted::next_in_turn(&missing, last.as_ref())?;
        if self.fetching.swap(true, Ordering::AcqRel) {
            return None;
        }
        *last = Some(hash);
        drop(last);
        let now = Instant::now();
        let pacing = lock(&self.pacing);
        let peers = lock(&self.peers);
        let (mut ready, others): (Vec<NodeId>, Vec<NodeId>) = connected
            .iter()
            .filter(|p| pacing.may_ask(p, now))
            .partition(|p| peers.get(*p).is_some_and(|r| r.contains(&hash)));
        ready.extend(others);
        Some((hash, ready))
    }

    /// `peer` answered a request for `hash`: with the bytes (`served`) or without.
    pub fn fetch_answered(&self, peer: NodeId, hash: &ModuleHash, served: bool) {
        let now = Instant::now();
        if served {
            lock(&self.pacing).served(peer, now);
        } else {
            let ready = lock(&self.peers)
                .get(&peer)
                .is_some_and(|r| r.contains(hash));
            lock(&self.pacing).answered_without(peer, ready, now);
        }
    }

    /// The fetch started by [`UpgradeAgent::next_fetch`] ended.
    pub fn fetch_done(&self) {
        self.fetching.store(false, Ordering::Release);
    }

    /// `peer` reported these modules ready.
    pub fn peer_ready(&self, peer: NodeId, ready: Vec<ModuleHash>) {
        lock(&self.peers).insert(peer, ready);
    }

    /// Entries of the per-peer tables, each bounded by the connected peers.
    pub fn peer_table_sizes(&self) -> PeerTableSizes {
        PeerTableSizes {
            readiness: lock(&self.peers).len(),
            pacing: lock(&self.pacing).tracked(),
            serving: lock(&self.limiter).tracked(),
        }
    }

    /// `peer` left: disconnected, banned, or superseded by a new connection of its own.
    pub fn peer_gone(&self, peer: &NodeId) {
        lock(&self.peers).remove(peer);
        lock(&self.pacing).forget(peer);
        lock(&self.limiter).forget(peer);
    }

    /// Readiness of every scheduled module not yet active at `head_height`.
    pub fn readiness(&self, head_height: u64) -> Vec<ScheduledReadiness> {
        let peers = lock(&self.peers);
        readiness_of(
            &self.schedule(),
            head_height,
            &peers,
            &self.authorities,
            &self.me,
            |h| self.is_ready(h),
        )
    }

    /// Adds the chain's view at head `head_height` to a `GET /modules` listing (see
    /// [`annotate_listing`]): what ran the head block is active, what activates later is
    /// scheduled.
    pub fn annotate(&self, listing: &mut serde_json::Value, head_height: u64) {
        let schedule = self.schedule();
        annotate_listing(
            listing,
            &self.readiness(head_height),
            &running_at(&schedule, head_height),
        );
        if let Some(map) = listing.as_object_mut() {
            map.insert(
                "governance".into(),
                governance::governance_json(&schedule, head_height, &self.rules),
            );
        }
    }
}

impl DepositModules for UpgradeAgent {
    /// Ready to attest: prepared and warmed here (a scheduled module admitted although its
    /// warm-up failed on this node's recent blocks runs, but is not attested).
    fn is_ready(&self, hash: &ModuleHash) -> bool {
        self.modules.deposits_warmed(hash)
    }

    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.modules
            .prepared_deposits(hash)
            .map(|m| DepositEngine::Module(Box::new((*m).clone())))
    }

    fn missing(&self, kind: Kind, hash: &ModuleHash, height: u64) {
        if lock(&self.wanted).needed(kind, *hash, height, Instant::now()) {
            tracing::warn!(
                module = %hash.to_hex(),
                %kind,
                height,
                "the chain needs a scheduled module this node does not have ready: blocks from \
                 this height wait (unjudged) while the module is fetched from peers"
            );
        }
    }

    fn scheduled(&self, schedule: &Schedule) {
        let before = std::mem::replace(&mut *lock(&self.schedule), schedule.clone());
        governance::log_changes(&before, schedule);
    }

    fn imported(&self, call: crate::runtime::deposits::DepositCall) {
        self.modules.record_deposits(call);
    }
}

#[cfg(test)]
mod tests;

//! The one ready-map ([`ReadyVersions`]): every version that passed its warm-up (or that the
//! chain scheduled), a [`ReadyModule`] by module hash, with what its warm-up measured
//! (reported as a [`ReadyInfo`]) — what slots activate from, what the chain
//! runs a scheduled height with, and what `GET /modules` lists as ready. The module lifecycle
//! (`modules_store::lifecycle`) admits into it; [`Modules`](super::Modules) holds the node's
//! and activates from it.
//!
//! Warm-up lives here too: the kind's built-in dry run plus the node's recent real inputs of
//! the kind (gossip plans, blocks' deposits), which the slots record.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::hashes::ModuleHash;
use crate::runtime::call_stats::CallCounts;
use crate::runtime::checkpoint::{Checkpoint, CheckpointModule};
use crate::runtime::deposits::{DepositCall, Deposits, DepositsModule};
use crate::runtime::gossip_policy::GossipPolicy;
use crate::runtime::module::{Module, World};
use crate::runtime::slot::Ready;
use crate::runtime::{CallError, Kind, LinkedModule, Runtime, WarmupReport};

use super::{PlanCall, SlotError};

/// What the node reports about a ready version (`GET /modules`, `modnode module list`,
/// metrics): its identity and what its warm-up measured.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadyInfo {
    /// Its kind.
    pub kind: Kind,
    /// `<kind>-v<version>@<hash prefix>`.
    pub name: String,
    /// The module's own version number.
    pub version: u32,
    /// The contract it declares (`modnode:<kind>@<version>`).
    pub contract: String,
    /// sha256 of the component.
    pub hash: ModuleHash,
    /// Whether it exports a migration the chain runs once at its activation height.
    pub migration: bool,
    /// What warm-up measured.
    pub warmup: WarmupReport,
    /// `false` when the same bytes were prepared before (nothing was done again).
    pub new: bool,
}

/// A ready version of any kind (each a [`Ready`], the typed form): what the ready-map holds,
/// and what a warm-up returns before the module is admitted into it.
#[derive(Clone)]
pub enum ReadyModule {
    /// A deposits module.
    Deposits(Ready<Deposits>),
    /// A checkpoint module.
    Checkpoint(Ready<Checkpoint>),
    /// A gossip-policy module.
    GossipPolicy(Ready<GossipPolicy>),
}

impl ReadyModule {
    /// What the node reports about it: its identity and what its warm-up measured (`new`:
    /// whether it was prepared just now).
    pub fn info(&self, new: bool) -> ReadyInfo {
        fn p<W: World>(r: &Ready<W>, new: bool) -> ReadyInfo {
            let meta = r.module.meta();
            ReadyInfo {
                kind: W::KIND,
                name: meta.name(),
                version: meta.info.version,
                contract: meta.component.contract_name(),
                hash: meta.component.sha256,
                migration: meta.component.has_migration(),
                warmup: r.warmup,
                new,
            }
        }
        match self {
            ReadyModule::Deposits(r) => p(r, new),
            ReadyModule::Checkpoint(r) => p(r, new),
            ReadyModule::GossipPolicy(r) => p(r, new),
        }
    }

    fn call_counts(&self) -> CallCounts {
        match self {
            ReadyModule::Deposits(r) => r.module.call_counts(),
            ReadyModule::Checkpoint(r) => r.module.call_counts(),
            ReadyModule::GossipPolicy(r) => r.module.call_counts(),
        }
    }
}

fn warm<W: World>(module: Module<W>) -> Result<Ready<W>, SlotError> {
    let name = module.meta().name();
    Ready::warm(module).map_err(|source| SlotError::Warmup {
        module: name,
        source,
    })
}

/// Recent real inputs replayed by a warm-up, at most.
pub const WARMUP_REAL_INPUTS: usize = 32;
/// Longest a warm-up spends replaying recent real inputs; the rest are skipped.
pub const WARMUP_REAL_TIME: Duration = Duration::from_millis(500);

/// The latest real inputs of one kind the node served, newest last, for warm-ups: a bounded
/// ring ([`WARMUP_REAL_INPUTS`]).
pub struct RecentInputs<T> {
    ring: Mutex<VecDeque<T>>,
}

impl<T: Clone> RecentInputs<T> {
    fn new() -> Self {
        Self {
            ring: Mutex::new(VecDeque::with_capacity(WARMUP_REAL_INPUTS)),
        }
    }

    /// Remembers `input`, forgetting the oldest beyond the bound.
    pub fn record(&self, input: T) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() >= WARMUP_REAL_INPUTS {
            ring.pop_front();
        }
        ring.push_back(input);
    }

    /// The inputs remembered, oldest first.
    pub fn snapshot(&self) -> Vec<T> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().cloned().collect()
    }
}

/// Warms `module` on the built-in inputs of its kind, then on `recent` real inputs (for
/// `budget` at most: [`SlotConfig::warmup_real_time`]) through `run`, which returns the fuel
/// one used; a fault on a real input names that input.
fn warm_on<W: World, T: std::fmt::Debug>(
    module: Module<W>,
    recent: &[T],
    budget: Duration,
    run: impl Fn(&Module<W>, &T) -> Result<u64, CallError>,
) -> Result<Ready<W>, SlotError> {
    let name = module.meta().name();
    let mut failed_on = None;
    Ready::warm_with(module, |m| {
        let started = Instant::now();
        let (mut fuel, mut ran) = (0u64, 0u32);
        for input in recent {
            if started.elapsed() >= budget {
                break;
            }
            failed_on = Some(input);
            fuel = fuel.saturating_add(run(m, input)?);
            ran = ran.saturating_add(1);
        }
        failed_on = None;
        Ok((fuel, ran))
    })
    .map_err(|source| match failed_on {
        Some(input) => SlotError::WarmupInput {
            module: name,
            input: format!("{input:?}"),
            source,
        },
        None => SlotError::Warmup {
            module: name,
            source,
        },
    })
}

/// The node's recent real inputs warm-ups replay, per kind that has them.
#[derive(Clone, Copy, Default)]
pub(super) struct RecentReal<'a> {
    plans: &'a [PlanCall],
    deposits: &'a [DepositCall],
    /// How long they may take at most.
    budget: Duration,
}

/// Warms `module`: the built-in dry run of its kind, then the node's recent real inputs of the
/// kind — gossip plans, and the deposits of the latest canonical blocks that carried some, on
/// the registry each ran on (none on a fresh chain: then the built-in inputs alone).
/// Checkpoint modules warm on their built-in realistic inputs.
pub(super) fn warm_any(
    module: LinkedModule,
    recent: RecentReal<'_>,
) -> Result<ReadyModule, SlotError> {
    Ok(match module {
        LinkedModule::Deposits(m) => {
            ReadyModule::Deposits(warm_on(m, recent.deposits, recent.budget, |m, call| {
                // A rejection is an answer: the module ran (fuel is only reported on success).
                if m.contract().major == 3 {
                    // deposits@3 queues the block's deposits (on an empty queue: the real queue
                    // is the chain's, not the warm-up's).
                    let out = m.process_v3(
                        call.registry.clone(),
                        crate::state::PendingQueue::new(),
                        &call.ctx,
                        &call.deposits,
                    )?;
                    return Ok(out.map_or(0, |o| o.fuel_used));
                }
                let out = m.process(
                    call.registry.clone(),
                    call.ctx.clone(),
                    call.deposits.clone(),
                )?;
                Ok(out.map_or(0, |o| o.fuel_used))
            })?)
        }
        LinkedModule::Checkpoint(m) => ReadyModule::Checkpoint(warm(m)?),
        LinkedModule::GossipPolicy(m) => {
            ReadyModule::GossipPolicy(warm_on(m, recent.plans, recent.budget, |m, call| {
                Ok(m.plan_metered(call.msg, call.peers.clone())?.1)
            })?)
        }
    })
}

/// Every ready version, by hash, and what warm-ups replay. See the module docs.
pub struct ReadyVersions {
    runtime: Runtime,
    ready: Mutex<HashMap<ModuleHash, ReadyModule>>,
    recent_plans: Arc<RecentInputs<PlanCall>>,
    recent_deposits: RecentInputs<DepositCall>,
    /// How long a warm-up replays recent real inputs at most.
    warmup_real_time: Duration,
}

impl std::fmt::Debug for ReadyVersions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyVersions").finish_non_exhaustive()
    }
}

impl ReadyVersions {
    /// No version yet; modules load on `runtime`, warm-ups replay recent real inputs for
    /// `warmup_real_time` at most.
    pub fn new(runtime: Runtime, warmup_real_time: Duration) -> Self {
        Self {
            runtime,
            ready: Mutex::new(HashMap::new()),
            recent_plans: Arc::new(RecentInputs::new()),
            recent_deposits: RecentInputs::new(),
            warmup_real_time,
        }
    }

    /// The runtime modules are loaded with.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub(super) fn recent_plans(&self) -> Arc<RecentInputs<PlanCall>> {
        self.recent_plans.clone()
    }

    pub(crate) fn lookup(&self, hash: &ModuleHash) -> Option<ReadyModule> {
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(hash)
            .cloned()
    }

    /// Warms a loaded module: the built-in dry run of its kind plus the node's recent real
    /// inputs of that kind: a module that passed (or that the chain scheduled: see
    /// [`warm_scheduled`](Self::warm_scheduled)), not admitted yet. Nothing is kept until
    /// [`admit`](Self::admit), so a module that fails here, or whose upload fails later,
    /// leaves nothing behind.
    pub fn warm_loaded(&self, module: LinkedModule) -> Result<ReadyModule, SlotError> {
        let plans = self.recent_plans.snapshot();
        let deposits = self.recent_deposits.snapshot();
        warm_any(
            module,
            RecentReal {
                plans: &plans,
                deposits: &deposits,
                budget: self.warmup_real_time,
            },
        )
    }

    /// [`warm_loaded`](Self::warm_loaded) for a module the chain scheduled: a failed warm-up
    /// (a trap or running out of fuel on the built-in inputs or on this node's own recent
    /// blocks, which other nodes do not share) is logged as a warning and returned beside the
    /// module, never a refusal. Only the module's hash and its kind and contract decide whether
    /// the chain can run it; whether a block it runs is valid is decided block by block.
    pub fn warm_scheduled(&self, module: LinkedModule) -> (ReadyModule, Option<SlotError>) {
        match self.warm_loaded(module.clone()) {
            Ok(warmed) => (warmed, None),
            Err(e) => {
                tracing::warn!(
                    module = %module.meta().name(),
                    error = %e,
                    "a module the chain scheduled failed its warm-up on this node; admitted \
                     anyway (the chain's schedule decides, local checks only warn)"
                );
                (unwarmed(module), Some(e))
            }
        }
    }

    /// Remembers the deposits of a canonical block that carried some, for the warm-up of the
    /// next deposits module (the latest [`WARMUP_REAL_INPUTS`] are kept).
    pub fn record_deposits(&self, call: DepositCall) {
        self.recent_deposits.record(call);
    }

    /// Makes a warmed module ready by its hash (a version already there stays as it was).
    pub fn admit(&self, ready: ReadyModule) -> ReadyInfo {
        let prepared = ready.info(true);
        let mut map = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(prepared.hash).or_insert(ready);
        tracing::info!(module = %prepared.name, fuel = prepared.warmup.fuel, latency_us = prepared.warmup.latency_us, real_inputs = prepared.warmup.real_inputs, "module prepared");
        prepared
    }

    /// The ready version with this hash, if any.
    pub fn prepared_version(&self, hash: &ModuleHash) -> Option<ReadyInfo> {
        self.lookup(hash).map(|r| r.info(false))
    }

    /// Every ready version, by kind, version and hash.
    pub fn prepared(&self) -> Vec<ReadyInfo> {
        let map = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<ReadyInfo> = map.values().map(|r| r.info(false)).collect();
        list.sort_by_key(|p| (p.kind, p.version, p.hash));
        list
    }

    /// Every ready version with what it has done since its warm-up (calls, faults, fuel), in
    /// [`prepared`](Self::prepared)'s order.
    pub fn call_counts(&self) -> Vec<(ReadyInfo, CallCounts)> {
        let map = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<(ReadyInfo, CallCounts)> = map
            .values()
            .map(|r| (r.info(false), r.call_counts()))
            .collect();
        list.sort_by_key(|(p, _)| (p.kind, p.version, p.hash));
        list
    }

    /// The ready version `hash`, which must be of `kind`.
    pub(crate) fn get(&self, kind: Kind, hash: &ModuleHash) -> Result<ReadyModule, SlotError> {
        let ready = self
            .lookup(hash)
            .ok_or(SlotError::UnknownModule { hash: *hash })?;
        let found = ready.info(false);
        if found.kind != kind {
            return Err(SlotError::WrongKind {
                module: found.name,
                expected: kind,
                found: found.kind,
            });
        }
        Ok(ready)
    }

    /// Whether the deposits module `hash` is ready here and passed its warm-up (what a
    /// readiness attestation claims; a scheduled module whose warm-up failed here is ready
    /// but not attested).
    pub fn deposits_warmed(&self, hash: &ModuleHash) -> bool {
        matches!(self.lookup(hash), Some(ReadyModule::Deposits(r)) if !r.warmup.failed)
    }

    /// The ready deposits module `hash`, if any: what the chain runs at the heights its
    /// schedule names that module for.
    pub fn prepared_deposits(&self, hash: &ModuleHash) -> Option<Arc<DepositsModule>> {
        match self.lookup(hash)? {
            ReadyModule::Deposits(r) => Some(r.module),
            _ => None,
        }
    }

    /// The ready checkpoint module `hash`, if any: what opens the chunks of a checkpoint that
    /// module made (every installed version restores).
    pub fn prepared_checkpoint(&self, hash: &ModuleHash) -> Option<Arc<CheckpointModule>> {
        match self.lookup(hash)? {
            ReadyModule::Checkpoint(r) => Some(r.module),
            _ => None,
        }
    }
}

/// `module` admitted without a warm-up (the chain scheduled it and its warm-up failed here):
/// the report says nothing ran.
fn unwarmed(module: LinkedModule) -> ReadyModule {
    fn ready<W: World>(module: Module<W>) -> Ready<W> {
        Ready::new(
            module,
            WarmupReport {
                failed: true,
                ..WarmupReport::default()
            },
        )
    }
    match module {
        LinkedModule::Deposits(m) => ReadyModule::Deposits(ready(m)),
        LinkedModule::Checkpoint(m) => ReadyModule::Checkpoint(ready(m)),
        LinkedModule::GossipPolicy(m) => ReadyModule::GossipPolicy(ready(m)),
    }
}

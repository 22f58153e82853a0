//! Warm instances of gossip policies, reused across plan calls.
//!
//! A fresh store and instance per call costs ~13 µs even for an empty call; a gossip node makes
//! one plan per message per hop. Policies are local and output-pure (a `@2.0.0` policy's state
//! is passed explicitly), so a call may run on an instance an earlier call left behind, as long
//! as that cannot change what the call returns. Each call still gets:
//!
//! - the module's whole fuel budget, set fresh (a call that ran out does not starve the next);
//! - fresh store data: a new limiter (the pinned memory and table limits) and host-call meter.
//!
//! What keeps a reused instance's outputs those of a fresh instance. wasmtime 48's component
//! API gives the host no handle on a component's core linear memory, so it cannot be reset to
//! the post-instantiation image in place; instead an instance is retired (dropped, its pool
//! slot reset to the image) whenever carrying it over could matter:
//!
//! - **any failed call** (trap, out of fuel, a limit): a trapped instance is never entered
//!   again. A call that fails on a *reused* instance is run again on a fresh one and that
//!   answer is returned, so leftovers of earlier calls (a fragmented heap that runs into the
//!   memory limit sooner) can never turn a plan into a fault;
//! - **memory growth after the instance's first call** (its first call's growth is the one a
//!   fresh instance makes too): an instance never keeps more memory than one call needed;
//! - **after [`MAX_USES`] calls**, bounding what any module can carry over;
//! - **a verification that fails**: an instance's second call and every [`VERIFY_EVERY`]th are
//!   also run on a fresh instance and the two answers compared. A module whose answers differ
//!   keeps hidden state in its memory, breaking its contract: its reused answer is discarded,
//!   the fresh one returned, and that module (by hash) runs on a fresh instance per call from
//!   then on (logged once).
//!
//! At most [`MAX_WARM`] instances are kept, across all modules (each holds a slot of the
//! engine's instance pool); the least recently returned goes first.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::{Engine, Store};

use super::{GossipPolicy, GossipPolicyModule, PolicyCtx, PolicyInstance};
use crate::runtime::CallError;
use crate::runtime::error::{HostFailure, HostFailureKind};
use crate::runtime::inspect::Version;
use crate::runtime::limits::Limits;
use crate::runtime::module::{CallBase, StoreData as _, World as _, new_store};

/// Calls one instance serves before it is retired.
pub const MAX_USES: u32 = 4_096;
/// Every this many calls of an instance (and its second), the answer is checked against a
/// fresh instance's.
pub const VERIFY_EVERY: u32 = 256;
/// Warm instances kept at once, across every module.
pub const MAX_WARM: usize = 8;
/// Modules remembered as keeping hidden state (bounded; the oldest is forgotten first).
const MAX_IMPURE: usize = 64;

/// Which instances a call may reuse: the same component, contract, engine and limits.
struct Key {
    hash: crate::hashes::ModuleHash,
    contract: Version,
    engine: Engine,
    limits: Limits,
}

impl Key {
    fn of(module: &GossipPolicyModule) -> Self {
        let settings = module.settings();
        Self {
            hash: module.hash(),
            contract: module.contract(),
            engine: settings.engine.clone(),
            limits: settings.limits,
        }
    }

    fn matches(&self, other: &Key) -> bool {
        self.hash == other.hash
            && self.contract == other.contract
            && self.limits == other.limits
            && Engine::same(&self.engine, &other.engine)
    }
}

/// An instance kept between calls.
struct Warm {
    key: Key,
    store: Store<PolicyCtx>,
    instance: PolicyInstance,
    /// Calls it has served.
    uses: u32,
}

static WARM: Mutex<Vec<Warm>> = Mutex::new(Vec::new());
/// Calls served by an instance that had served an earlier call.
static REUSED_CALLS: AtomicU64 = AtomicU64::new(0);
static IMPURE: Mutex<Vec<crate::hashes::ModuleHash>> = Mutex::new(Vec::new());

fn is_impure(hash: &crate::hashes::ModuleHash) -> bool {
    IMPURE.lock().map_or(true, |l| l.contains(hash))
}

fn mark_impure(module: &GossipPolicyModule) {
    let hash = module.hash();
    if let Ok(mut list) = IMPURE.lock()
        && !list.contains(&hash)
    {
        if list.len() >= MAX_IMPURE {
            list.remove(0);
        }
        list.push(hash);
        tracing::warn!(
            module = %module.meta().name(),
            "gossip policy answered differently on a reused instance than on a fresh one: it keeps \
             hidden state, against its contract; it now runs on a fresh instance per call"
        );
    }
}

fn checkout(key: &Key) -> Option<Warm> {
    let mut warm = WARM.lock().ok()?;
    let at = warm.iter().rposition(|w| w.key.matches(key))?;
    Some(warm.remove(at))
}

fn checkin(w: Warm) {
    let evicted = match WARM.lock() {
        Ok(mut warm) => {
            warm.push(w);
            (warm.len() > MAX_WARM).then(|| warm.remove(0))
        }
        Err(_) => None,
    };
    // Dropped outside the lock: resetting a pool slot takes a few microseconds.
    drop(evicted);
}

/// Whether instances of `module` are reused now (false once it was caught keeping hidden state).
pub fn reuses(module: &GossipPolicyModule) -> bool {
    !is_impure(&module.hash())
}

/// Calls answered by a reused instance since the process started (all modules).
pub fn reused_calls() -> u64 {
    REUSED_CALLS.load(Ordering::Relaxed)
}

/// Warm instances kept now (all modules).
pub fn warm_count() -> usize {
    WARM.lock().map_or(0, |w| w.len())
}

/// Runs `f` on a warm instance of `module` (a new one if none is free), on a guest thread, with
/// the module's whole fuel budget; returns its answer and the fuel it used. See the module docs
/// for when the answer comes from a fresh instance instead.
pub(super) fn call<R>(
    module: &GossipPolicyModule,
    f: impl Fn(&PolicyInstance, &mut Store<PolicyCtx>) -> wasmtime::Result<R> + Send + Clone + 'static,
) -> Result<(R, u64), CallError>
where
    R: PartialEq + Send + 'static,
{
    let module = module.clone();
    crate::runtime::threads::run_on_guest_thread(move || call_here(&module, f))
}

fn fresh<R: Send + 'static>(
    module: &GossipPolicyModule,
    f: impl Fn(&PolicyInstance, &mut Store<PolicyCtx>) -> wasmtime::Result<R> + Send + 'static,
) -> Result<(R, u64), CallError> {
    let outcome = module.call(|base| Ok(PolicyCtx::new(base)), move |i, s| f(i, s));
    outcome.result.map(|r| (r, outcome.fuel_used))
}

fn instantiate(module: &GossipPolicyModule, key: Key) -> Result<Warm, CallError> {
    let name = module.meta().name();
    let settings = module.settings();
    let mut store = new_store(settings, PolicyCtx::new(CallBase::new(settings)), &name)?;
    // The context itself is the limiter: it notes growth, then asks the pinned limiter.
    store.limiter(|ctx| ctx);
    let instance = GossipPolicy::instantiate(module.pre(), &mut store).map_err(|e| {
        let breach = store.data_mut().base().limiter.breach();
        CallError::classify(&name, &e, breach, settings.fuel, false)
    })?;
    Ok(Warm {
        key,
        store,
        instance,
        uses: 0,
    })
}

fn call_here<R>(
    module: &GossipPolicyModule,
    f: impl Fn(&PolicyInstance, &mut Store<PolicyCtx>) -> wasmtime::Result<R> + Send + Clone + 'static,
) -> Result<(R, u64), CallError>
where
    R: PartialEq + Send + 'static,
{
    if is_impure(&module.hash()) {
        return fresh(module, f);
    }
    let key = Key::of(module);
    let mut warm = match checkout(&key) {
        Some(w) => w,
        None => instantiate(module, key)?,
    };
    let settings = module.settings();
    let budget = settings.fuel;
    *warm.store.data_mut() = PolicyCtx::new(CallBase::new(settings));
    if let Err(e) = warm.store.set_fuel(budget) {
        return Err(HostFailure::new(
            &module.meta().name(),
            HostFailureKind::Runtime,
            format!("cannot set fuel: {e:?}"),
        )
        .into());
    }
    let result = f(&warm.instance, &mut warm.store);
    let fuel_used = budget.saturating_sub(warm.store.get_fuel().unwrap_or(0));
    let reused = warm.uses > 0;
    let answer = match result {
        Ok(answer) => answer,
        Err(e) => {
            // Never entered again. On a reused instance the fault might be a leftover's: the
            // answer is a fresh instance's.
            if reused {
                drop(warm);
                return fresh(module, f);
            }
            let breach = warm.store.data_mut().base().limiter.breach();
            return Err(CallError::classify(
                &module.meta().name(),
                &e,
                breach,
                budget,
                true,
            ));
        }
    };
    if reused {
        REUSED_CALLS.fetch_add(1, Ordering::Relaxed);
    }
    warm.uses = warm.uses.saturating_add(1);
    if warm.uses == 2 || warm.uses % VERIFY_EVERY == 0 {
        let checked = fresh(module, f.clone())?;
        if checked.0 != answer {
            mark_impure(module);
            return Ok(checked);
        }
    }
    let grew = warm.store.data().grew && warm.uses > 1;
    if !grew && warm.uses < MAX_USES {
        checkin(warm);
    }
    Ok((answer, fuel_used))
}

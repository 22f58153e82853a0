//! One module slot per kind: which version serves calls, which one is tried beside it, and which
//! one a rollback returns to.
//!
//! A slot holds the `active` version, optionally a `scheduled` one (consensus kinds: hash and
//! height, data only here), a candidate running as `shadow` (same inputs, outputs compared, no
//! effect) or as `canary` (a deterministic share of calls), and the `previous` version, kept
//! loaded and warm so a rollback is a pointer swap.
//!
//! The whole state is one immutable [`SlotState`] behind an [`ArcSwap`]: a call loads it once
//! and runs on the versions it found, so a call in flight finishes on the version it started
//! on, whatever swaps happen meanwhile; writers build a new state and swap it in (serialised by
//! a mutex so two operators cannot lose each other's change; readers never take it).
//!
//! Each version in a slot has the state the host keeps for it ([`KeptState`]; empty unless its
//! contract keeps state, as gossip-policy@2.0.0 does). A version entering the slot — live,
//! shadow, canary or by a rollback — gets state of its own, a clean hand-over: it starts from
//! what its [`World::take_over`] makes of the version it replaces (empty, or that version's
//! state if it can read it), never from state it left behind earlier.
//!
//! A circuit breaker guards local kinds: a candidate (or a freshly activated version, while its
//! predecessor is still kept) that traps or runs out of fuel `breaker_threshold` times is rolled
//! back by itself, logged and recorded in [`SlotStatus::breaker_trips`]. A canary call that
//! fails is served again by the active version, so a bad candidate never fails a caller.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::module::{Module, World};
use super::{CallError, Kind};
use crate::clock::unix_ms;

mod ready;
mod shadow;
mod status;

pub use ready::{KeptState, Ready};
pub use shadow::ShadowWorker;
pub use status::{
    BreakerTrip, CanaryStatus, Divergence, Scheduled, Served, ShadowStatus, SlotStatus, SwapError,
    VersionStatus,
};

/// How a ready version is put into service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Becomes the active version at once; the current one becomes `previous`.
    Live,
    /// Runs on the same inputs as the active version on a worker; outputs are compared and
    /// divergences counted and logged; it never affects behaviour.
    Shadow,
    /// Serves this percentage (1..=100) of calls, chosen deterministically by call sequence.
    Canary(u8),
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Live => f.write_str("live"),
            Mode::Shadow => f.write_str("shadow"),
            Mode::Canary(p) => write!(f, "canary {p}%"),
        }
    }
}

/// Tunables of a slot.
#[derive(Debug, Clone, Copy)]
pub struct SlotConfig {
    /// Deterministic faults (trap, out of fuel, limit) after which a candidate, or a version
    /// activated live whose predecessor is still kept, is rolled back automatically.
    pub breaker_threshold: u32,
    /// Shadow comparisons waiting for the worker, at most; more are skipped and counted.
    pub shadow_queue: usize,
    /// Divergences and breaker trips remembered for the status, at most.
    pub remembered: usize,
    /// How long a new version's warm-up replays the node's recent real inputs at most
    /// ([`WARMUP_REAL_TIME`](super::modules::WARMUP_REAL_TIME) by default).
    pub warmup_real_time: std::time::Duration,
}

impl Default for SlotConfig {
    fn default() -> Self {
        Self {
            breaker_threshold: 3,
            shadow_queue: 256,
            remembered: 8,
            warmup_real_time: super::modules::WARMUP_REAL_TIME,
        }
    }
}

/// Counters of the version on trial (candidate, or live activation on probation).
#[derive(Default)]
struct Trial {
    calls: AtomicU64,
    faults: AtomicU64,
    compared: AtomicU64,
    divergences: AtomicU64,
    skipped: AtomicU64,
    host_failures: AtomicU64,
    recent: Mutex<VecDeque<Divergence>>,
    last_fault: Mutex<Option<String>>,
}

/// A candidate beside the active version.
struct Candidate<W: World> {
    ready: Ready<W>,
    mode: Mode,
    trial: Arc<Trial>,
}

/// One immutable state of a slot.
struct SlotState<W: World> {
    active: Ready<W>,
    /// Faults of the active version while it is on probation (activated live, `previous` kept).
    probation: Option<Arc<Trial>>,
    previous: Option<Ready<W>>,
    candidate: Option<Candidate<W>>,
    scheduled: Option<Scheduled>,
}

impl<W: World> Clone for SlotState<W> {
    fn clone(&self) -> Self {
        Self {
            active: self.active.clone(),
            probation: self.probation.clone(),
            previous: self.previous.clone(),
            candidate: self.candidate.as_ref().map(|c| Candidate {
                ready: c.ready.clone(),
                mode: c.mode,
                trial: c.trial.clone(),
            }),
            scheduled: self.scheduled.clone(),
        }
    }
}

/// One call into a slot: the input, and how to run it on a module. Shadow comparisons clone the
/// input and compare outputs, so both must be cheap enough to clone and printable for the log.
pub trait Invocation<W: World>: Clone + fmt::Debug + Send + 'static {
    /// What the call returns.
    type Output: Clone + PartialEq + fmt::Debug + Send + 'static;
    /// Runs the call on `module`.
    fn invoke(&self, module: &Module<W>) -> Result<Self::Output, CallError>;
    /// Runs the call on `module` with the state the slot keeps for it (what slots call). Calls
    /// of contracts that keep no state ignore it.
    fn invoke_kept(
        &self,
        module: &Module<W>,
        state: &KeptState,
    ) -> Result<Self::Output, CallError> {
        let _ = state;
        self.invoke(module)
    }
}

/// The slot of one kind. See the module docs.
pub struct Slot<W: World> {
    state: ArcSwap<SlotState<W>>,
    writer: Mutex<()>,
    config: SlotConfig,
    sequence: AtomicU64,
    shadow: ShadowWorker,
    trips: AtomicU64,
    failed: AtomicU64,
    recent_trips: Mutex<VecDeque<BreakerTrip>>,
}

fn remember<T>(queue: &Mutex<VecDeque<T>>, item: T, cap: usize) {
    if let Ok(mut q) = queue.lock() {
        if q.len() >= cap {
            q.pop_front();
        }
        q.push_back(item);
    }
}

fn recent<T: Clone>(queue: &Mutex<VecDeque<T>>) -> Vec<T> {
    queue
        .lock()
        .map(|q| q.iter().cloned().collect())
        .unwrap_or_default()
}

/// Whether call number `seq` goes to a canary serving `percent` % of calls: exactly `percent`
/// of every 100 consecutive calls, spread evenly, the same on every run.
#[allow(
    clippy::arithmetic_side_effects,
    reason = "n < 100 and p <= 100: every product is at most 10,000"
)]
pub fn canary_selected(seq: u64, percent: u8) -> bool {
    let p = u64::from(percent.min(100));
    let n = seq % 100;
    // Call n of each hundred is chosen when floor((n + 1) p / 100) steps past floor(n p / 100).
    (n + 1) * p / 100 > n * p / 100
}

impl<W: World> Slot<W> {
    /// A slot with `active` serving calls.
    pub fn new(active: Ready<W>, config: SlotConfig, shadow: ShadowWorker) -> Self {
        Self {
            state: ArcSwap::from_pointee(SlotState {
                active: active.taking_over(None),
                probation: None,
                previous: None,
                candidate: None,
                scheduled: None,
            }),
            writer: Mutex::new(()),
            config,
            sequence: AtomicU64::new(0),
            shadow,
            trips: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            recent_trips: Mutex::new(VecDeque::new()),
        }
    }

    /// The kind.
    pub fn kind(&self) -> Kind {
        W::KIND
    }

    /// The active module (for callers that hold on to it, such as the chain at startup).
    pub fn active(&self) -> Arc<Module<W>> {
        self.state.load().active.module.clone()
    }

    /// The canary candidate, if one is in trial (a shadow is not: it serves no call).
    pub fn canary(&self) -> Option<Arc<Module<W>>> {
        let state = self.state.load();
        state
            .candidate
            .as_ref()
            .filter(|c| matches!(c.mode, Mode::Canary(_)))
            .map(|c| c.ready.module.clone())
    }

    /// Runs `input` on the version this slot chooses for it: the canary for its share of calls,
    /// otherwise the active version; a shadow gets the same input afterwards on the worker.
    pub fn call<I: Invocation<W>>(&self, input: I) -> Result<(I::Output, Served), CallError> {
        // One load: the call runs on the versions it found, whatever swaps happen meanwhile.
        let state = self.state.load_full();
        let seq = self.sequence.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = &state.candidate
            && let Mode::Canary(percent) = c.mode
            && canary_selected(seq, percent)
        {
            c.trial.calls.fetch_add(1, Ordering::Relaxed);
            match input.invoke_kept(&c.ready.module, &c.ready.state) {
                Ok(out) => return Ok((out, Served::Canary)),
                Err(e) => self.candidate_failed(c, &e),
            }
        }
        let result = input.invoke_kept(&state.active.module, &state.active.state);
        let result = match (result, &state.probation, &state.previous) {
            (Err(e), Some(trial), Some(previous)) if e.blames_module() => {
                self.probation_failed(&state, trial, &e);
                input
                    .invoke_kept(&previous.module, &previous.state)
                    .map(|out| (out, Served::Previous))
            }
            (result, _, _) => result.map(|out| (out, Served::Active)),
        };
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        if let (Ok((out, Served::Active)), Some(c)) = (&result, &state.candidate)
            && c.mode == Mode::Shadow
        {
            self.submit_shadow(c, input, out.clone());
        }
        result
    }

    fn submit_shadow<I: Invocation<W>>(&self, c: &Candidate<W>, input: I, active_out: I::Output) {
        let trial = c.trial.clone();
        let candidate = c.ready.clone();
        let remembered = self.config.remembered;
        let threshold = u64::from(self.config.breaker_threshold);
        // The worker cannot borrow the slot, so it only counts faults; the next call on the
        // slot trips the breaker (below).
        let job_trial = trial.clone();
        let submitted = self.shadow.try_submit(Box::new(move || {
            let shadow_out = input.invoke_kept(&candidate.module, &candidate.state);
            job_trial.compared.fetch_add(1, Ordering::Relaxed);
            let diverged = match &shadow_out {
                Ok(out) => *out != active_out,
                Err(e) => {
                    if e.blames_module() {
                        job_trial.faults.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut last) = job_trial.last_fault.lock() {
                            *last = Some(e.to_string());
                        }
                    } else {
                        job_trial.host_failures.fetch_add(1, Ordering::Relaxed);
                    }
                    e.blames_module()
                }
            };
            if diverged {
                let d = Divergence {
                    input: format!("{input:?}"),
                    active: format!("{active_out:?}"),
                    shadow: match &shadow_out {
                        Ok(out) => format!("{out:?}"),
                        Err(e) => format!("error: {e}"),
                    },
                };
                tracing::warn!(
                    kind = %W::KIND,
                    shadow = %candidate.module.meta().name(),
                    input = %d.input,
                    active = %d.active,
                    output = %d.shadow,
                    "shadow diverged from the active module"
                );
                remember(&job_trial.recent, d, remembered);
                // Counted after it is remembered: whoever sees the count sees the divergence.
                job_trial.divergences.fetch_add(1, Ordering::Relaxed);
            }
        }));
        if !submitted {
            trial.skipped.fetch_add(1, Ordering::Relaxed);
        }
        // Shadow faults counted by the worker trip the breaker here, on the caller's thread.
        if trial.faults.load(Ordering::Relaxed) >= threshold {
            let last = trial
                .last_fault
                .lock()
                .ok()
                .and_then(|l| l.clone())
                .unwrap_or_default();
            self.trip_candidate(c, &last);
        }
    }

    fn candidate_failed(&self, c: &Candidate<W>, e: &CallError) {
        if !e.blames_module() {
            c.trial.host_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let faults = c
            .trial
            .faults
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if let Ok(mut last) = c.trial.last_fault.lock() {
            *last = Some(e.to_string());
        }
        tracing::warn!(kind = %W::KIND, candidate = %c.ready.module.meta().name(), error = %e, faults, "candidate failed; the active version serves this call");
        if faults >= u64::from(self.config.breaker_threshold) {
            self.trip_candidate(c, &e.to_string());
        }
    }

    fn trip_candidate(&self, c: &Candidate<W>, last_fault: &str) {
        let Ok(_guard) = self.writer.lock() else {
            return;
        };
        let current = self.state.load_full();
        // Only if the candidate we saw fail is still the candidate (not already replaced).
        let still = current
            .candidate
            .as_ref()
            .is_some_and(|now| Arc::ptr_eq(&now.trial, &c.trial));
        if !still {
            return;
        }
        let mut next = (*current).clone();
        next.candidate = None;
        self.state.store(Arc::new(next));
        self.record_trip(
            c.ready.module.meta().name(),
            c.mode.to_string(),
            c.trial.faults.load(Ordering::Relaxed),
            last_fault,
        );
    }

    fn probation_failed(&self, seen: &Arc<SlotState<W>>, trial: &Arc<Trial>, e: &CallError) {
        let faults = trial
            .faults
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        tracing::warn!(kind = %W::KIND, module = %seen.active.module.meta().name(), error = %e, faults, "newly activated module failed; the previous version serves this call");
        if faults < u64::from(self.config.breaker_threshold) {
            return;
        }
        let Ok(_guard) = self.writer.lock() else {
            return;
        };
        let current = self.state.load_full();
        let still = current
            .probation
            .as_ref()
            .is_some_and(|now| Arc::ptr_eq(now, trial));
        let Some(previous) = current.previous.clone() else {
            return;
        };
        if !still {
            return;
        }
        let failed = current.active.module.meta().name();
        self.state.store(Arc::new(SlotState {
            active: previous,
            probation: None,
            previous: None,
            candidate: current.candidate.as_ref().map(|c| Candidate {
                ready: c.ready.clone(),
                mode: c.mode,
                trial: c.trial.clone(),
            }),
            scheduled: current.scheduled.clone(),
        }));
        self.record_trip(failed, "live".into(), faults, &e.to_string());
    }

    fn record_trip(&self, module: String, mode: String, faults: u64, last_fault: &str) {
        self.trips.fetch_add(1, Ordering::Relaxed);
        tracing::error!(kind = %W::KIND, %module, %mode, faults, last_fault, "circuit breaker: module rolled back automatically");
        remember(
            &self.recent_trips,
            BreakerTrip {
                module,
                mode,
                faults,
                last_fault: last_fault.to_string(),
                at_unix_ms: unix_ms(),
            },
            self.config.remembered,
        );
    }

    fn update(
        &self,
        f: impl FnOnce(&SlotState<W>) -> Result<SlotState<W>, SwapError>,
    ) -> Result<(), SwapError> {
        // A poisoned writer lock only means another writer panicked between load and store; the
        // state itself is always a whole `SlotState`, so carry on.
        let _guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.state.load_full();
        let next = f(&current)?;
        self.state.store(Arc::new(next));
        Ok(())
    }

    /// Tells the versions serving or tried in this slot — the active one and any shadow or
    /// canary candidate — something that happened, each with its own kept state (`tell`
    /// runs one of them; stateless contracts ignore it). A fault counts like a fault of a call:
    /// against the candidate's breaker, or against an active version on probation.
    pub fn notify(&self, tell: impl Fn(&Module<W>, &KeptState) -> Result<(), CallError>) {
        let state = self.state.load_full();
        if let Err(e) = tell(&state.active.module, &state.active.state) {
            match &state.probation {
                Some(trial) if e.blames_module() && state.previous.is_some() => {
                    self.probation_failed(&state, trial, &e)
                }
                _ => {
                    tracing::warn!(kind = %W::KIND, module = %state.active.module.meta().name(), error = %e, "module failed on an event; its state is unchanged")
                }
            }
        }
        if let Some(c) = &state.candidate
            && let Err(e) = tell(&c.ready.module, &c.ready.state)
        {
            self.candidate_failed(c, &e);
        }
    }

    /// Puts a warmed version into service as `mode`. `Live` keeps the old active version as
    /// `previous` (on probation under the breaker until the next change) and drops a candidate
    /// of the same hash; `Shadow` and `Canary` replace any candidate.
    pub fn activate(&self, ready: Ready<W>, mode: Mode) -> Result<(), SwapError> {
        if let Mode::Canary(p) = mode
            && !(1..=100).contains(&p)
        {
            return Err(SwapError::BadShare(p));
        }
        self.update(|s| {
            let mut next = s.clone();
            match mode {
                Mode::Live => {
                    if s.active.same(&ready) {
                        return Err(SwapError::AlreadyActive {
                            kind: W::KIND,
                            module: ready.module.meta().name(),
                        });
                    }
                    if next
                        .candidate
                        .as_ref()
                        .is_some_and(|c| c.ready.same(&ready))
                    {
                        next.candidate = None;
                    }
                    next.previous = Some(s.active.clone());
                    next.active = ready.taking_over(Some(&s.active));
                    next.probation = Some(Arc::new(Trial::default()));
                }
                Mode::Shadow | Mode::Canary(_) => {
                    next.candidate = Some(Candidate {
                        ready: ready.taking_over(Some(&s.active)),
                        mode,
                        trial: Arc::new(Trial::default()),
                    });
                }
            }
            Ok(next)
        })?;
        tracing::info!(kind = %W::KIND, module = %ready.module.meta().name(), %mode, "module activated");
        Ok(())
    }

    /// Back to the previous version at once (the current one becomes `previous`, so a second
    /// rollback undoes the first). Any candidate is dropped.
    pub fn rollback(&self) -> Result<(), SwapError> {
        self.update(|s| {
            let Some(previous) = s.previous.clone() else {
                return Err(SwapError::NoPrevious { kind: W::KIND });
            };
            Ok(SlotState {
                active: previous.taking_over(Some(&s.active)),
                probation: None,
                previous: Some(s.active.clone()),
                candidate: None,
                scheduled: s.scheduled.clone(),
            })
        })?;
        tracing::info!(kind = %W::KIND, module = %self.active().meta().name(), "rolled back");
        Ok(())
    }

    /// Stops the shadow or canary candidate.
    pub fn cancel_candidate(&self) -> Result<(), SwapError> {
        self.update(|s| {
            if s.candidate.is_none() {
                return Err(SwapError::NoCandidate { kind: W::KIND });
            }
            let mut next = s.clone();
            next.candidate = None;
            Ok(next)
        })
    }

    /// Records the version scheduled at `height` (data only; the chain decides the switch).
    pub fn set_scheduled(&self, scheduled: Option<Scheduled>) {
        let _ = self.update(|s| {
            let mut next = s.clone();
            next.scheduled = scheduled;
            Ok(next)
        });
    }

    /// Waits until queued shadow comparisons are done (tests, `module list` after a run).
    pub fn flush_shadow(&self) {
        self.shadow.flush();
    }

    /// What `module list` shows.
    pub fn status(&self) -> SlotStatus {
        let s = self.state.load_full();
        let (mut shadow, mut canary) = (None, None);
        if let Some(c) = &s.candidate {
            let t = &c.trial;
            match c.mode {
                Mode::Shadow => {
                    shadow = Some(ShadowStatus {
                        version: c.ready.status(),
                        compared: t.compared.load(Ordering::Relaxed),
                        divergences: t.divergences.load(Ordering::Relaxed),
                        skipped: t.skipped.load(Ordering::Relaxed),
                        faults: t.faults.load(Ordering::Relaxed),
                        recent_divergences: recent(&t.recent),
                    })
                }
                Mode::Canary(percent) => {
                    canary = Some(CanaryStatus {
                        version: c.ready.status(),
                        percent,
                        calls: t.calls.load(Ordering::Relaxed),
                        faults: t.faults.load(Ordering::Relaxed),
                    })
                }
                Mode::Live => {}
            }
        }
        SlotStatus {
            kind: W::KIND,
            scope: W::KIND.scope(),
            active: s.active.status(),
            active_faults: s
                .probation
                .as_ref()
                .map(|t| t.faults.load(Ordering::Relaxed)),
            scheduled: s.scheduled.clone(),
            shadow,
            canary,
            previous: s.previous.as_ref().map(Ready::status),
            breaker_threshold: self.config.breaker_threshold,
            breaker_trips: self.trips.load(Ordering::Relaxed),
            failed_calls: self.failed.load(Ordering::Relaxed),
            recent_trips: recent(&self.recent_trips),
        }
    }
}

#[cfg(test)]
mod tests;

//! Guests run on a few long-lived threads with a large native stack.
//!
//! wasmtime checks the *wasm* stack against `max_wasm_stack`, but host functions a guest calls
//! run on the native stack below it; on a small stack (test threads, async runtimes) a deep but
//! legal guest could overflow the process. Jobs sent here run on threads with
//! [`GUEST_THREAD_STACK`](super::engine::GUEST_THREAD_STACK) bytes of stack.

use std::cell::Cell;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use super::engine::GUEST_THREAD_STACK;

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static ON_GUEST_THREAD: Cell<bool> = const { Cell::new(false) };
}

struct Pool {
    sender: Mutex<mpsc::Sender<Job>>,
}

fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = std::sync::Arc::new(Mutex::new(receiver));
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(2);
        for i in 0..workers {
            let receiver = receiver.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("modnode-guest-{i}"))
                .stack_size(GUEST_THREAD_STACK)
                .spawn(move || {
                    ON_GUEST_THREAD.with(|flag| flag.set(true));
                    loop {
                        let job = match receiver.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                });
            if spawned.is_err() {
                return None;
            }
        }
        Some(Pool {
            sender: Mutex::new(sender),
        })
    })
    .as_ref()
}

/// Whether the calling thread is a guest thread (the pool's or a scoped worker's).
pub(crate) fn on_guest_thread() -> bool {
    ON_GUEST_THREAD.with(Cell::get)
}

/// Runs `f` on a guest thread and returns its result. Runs it in place when already on one.
pub fn run_on_guest_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    if ON_GUEST_THREAD.with(Cell::get) {
        return f();
    }
    let Some(pool) = pool() else {
        // Could not start the pool (thread limits): a scoped thread is slower but as safe.
        return run_on_fresh_thread(f);
    };
    let (tx, rx) = mpsc::sync_channel(1);
    // The caller's span (its node's label) goes with the job onto the shared thread.
    let f = crate::log_span::in_current_span(f);
    let job: Job = Box::new(move || {
        // A panic in host code must not kill the worker; it is re-raised on the caller.
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    let sent = pool
        .sender
        .lock()
        .map(|s| s.send(job).is_ok())
        .unwrap_or(false);
    match (sent, rx.recv()) {
        (true, Ok(Ok(result))) => result,
        (true, Ok(Err(panic))) => std::panic::resume_unwind(panic),
        _ => pool_gone(),
    }
}

#[cold]
fn pool_gone<R>() -> R {
    panic!("the modnode guest thread pool is gone; cannot run module calls")
}

fn run_on_fresh_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let handle = std::thread::Builder::new()
        .stack_size(GUEST_THREAD_STACK)
        .spawn(crate::log_span::in_current_span(move || {
            ON_GUEST_THREAD.with(|flag| flag.set(true));
            f()
        }));
    match handle.map(|h| h.join()) {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(e) => panic!("cannot start a guest thread: {e}"),
    }
}

/// Runs `work` on `workers` dedicated guest threads (their own big stacks, outside the shared
/// pool, so long background work never queues ahead of block import's module calls) and waits
/// for all of them. With `background`, the threads run at the lowest scheduling priority
/// (Linux `SCHED_IDLE`), so import and serving preempt them. Each thread gets its index.
pub fn scoped_guest_workers(
    workers: usize,
    background: bool,
    work: &(dyn Fn(usize) + Sync),
) -> std::io::Result<()> {
    let span = tracing::Span::current();
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(workers);
        for index in 0..workers {
            let span = &span;
            let handle = std::thread::Builder::new()
                .name(format!("modnode-worker-{index}"))
                .stack_size(GUEST_THREAD_STACK)
                .spawn_scoped(scope, move || {
                    let _entered = span.enter();
                    ON_GUEST_THREAD.with(|flag| flag.set(true));
                    if background {
                        lower_this_threads_priority();
                    }
                    work(index);
                })?;
            handles.push(handle);
        }
        for handle in handles {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Ok(())
    })
}

/// Starts one long-lived guest thread named `name` running `work` (its own big stack, outside
/// the shared pool, as [`scoped_guest_workers`]' threads): for a stage of a pipeline that
/// calls modules for as long as the pipeline runs. The caller joins it.
pub fn spawn_guest_thread(
    name: String,
    work: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name)
        .stack_size(GUEST_THREAD_STACK)
        .spawn(crate::log_span::in_current_span(move || {
            ON_GUEST_THREAD.with(|flag| flag.set(true));
            work();
        }))
}

pub(crate) use crate::thread_priority::lower_this_threads_priority;

//! Running a thread at the lowest priority: background work (pruning, reclaiming value-log
//! space, checkpoint creation, guest pre-verification) that must never delay block import.

/// Moves the calling thread to Linux's `SCHED_IDLE` class (best effort, no privilege needed):
/// it then runs only on CPU time no normal thread wants, so block import, serving and the
/// network never queue behind it (nice 10 still took ~10% of a shared core from them). If the
/// class is refused, the thread's nice value goes to 19 instead.
pub fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes nothing and returns this thread's id.
        let tid = unsafe { libc::gettid() };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the call's duration; the call only
        // changes this thread's scheduling class.
        let idle = unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) } == 0;
        if !idle && let Ok(tid) = libc::id_t::try_from(tid) {
            // SAFETY: plain integers; a failure leaves the priority unchanged.
            let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 19) };
        }
    }
}

/// The calling thread's Linux thread id (0 elsewhere), for [`raise_to_normal`].
pub fn this_threads_id() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes nothing and returns this thread's id.
        unsafe { libc::gettid() }
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// Moves the thread `tid` (of this process, from [`this_threads_id`]) back to normal priority
/// (best effort): for a background thread someone now waits for, which at `SCHED_IDLE` would
/// get no CPU time on a busy machine.
pub fn raise_to_normal(tid: i32) {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the call's duration; the call only
        // changes the scheduling class of `tid`, and fails harmlessly for an exited thread.
        let _ = unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = tid;
}

/// Runs `work` at normal priority when the calling thread runs at `SCHED_IDLE` (and puts the
/// thread back after): for the short sections of background work that hold a lock block import
/// also takes (a store commit). Preempted inside such a section, an idle thread would make
/// import wait for whatever preempted it — a priority inversion.
pub fn at_normal_priority<T>(work: impl FnOnce() -> T) -> T {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getscheduler(0) only reads the calling thread's scheduling class.
        let idle = unsafe { libc::sched_getscheduler(0) } == libc::SCHED_IDLE;
        if idle {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `param` is a valid sched_param for the call's duration; the call only
            // changes this thread's scheduling class. Leaving SCHED_IDLE needs CAP_SYS_NICE or
            // an RLIMIT_NICE that allows the thread's nice value; refused, the work runs at
            // idle priority as before.
            let raised = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) } == 0;
            let out = work();
            if raised {
                lower_this_threads_priority();
            }
            return out;
        }
    }
    work()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_at_normal_priority_and_the_thread_returns_to_idle() {
        std::thread::spawn(|| {
            lower_this_threads_priority();
            // SAFETY: reads the calling thread's class.
            let class = || unsafe { libc::sched_getscheduler(0) };
            assert_eq!(class(), libc::SCHED_IDLE);
            let inside = at_normal_priority(class);
            // Root (as on CI) may leave SCHED_IDLE; others only with a nice limit allowing it.
            // SAFETY: geteuid only reads the process's effective user id.
            if unsafe { libc::geteuid() } == 0 {
                assert_eq!(inside, libc::SCHED_OTHER);
            } else {
                assert!(inside == libc::SCHED_OTHER || inside == libc::SCHED_IDLE);
            }
            assert_eq!(class(), libc::SCHED_IDLE);
        })
        .join()
        .unwrap();
        // A normal thread is left as it is.
        assert_eq!(at_normal_priority(|| 7), 7);
    }
}

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

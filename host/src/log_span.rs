//! Carrying the current tracing span onto other threads, so that every log line of one node in
//! a process running several (`modnode devnet`) carries that node's label: a tokio task takes
//! its span with `tracing::Instrument::in_current_span`, a thread or a blocking job with
//! [`in_current_span`].

/// `f`, run inside the span current where this is called (the caller's, not the thread's that
/// later runs it).
pub fn in_current_span<R>(f: impl FnOnce() -> R) -> impl FnOnce() -> R {
    let span = tracing::Span::current();
    move || {
        let _entered = span.enter();
        f()
    }
}

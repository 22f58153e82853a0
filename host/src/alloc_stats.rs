//! What the allocator and the kernel say the process uses, next to what the state cache
//! accounts for: a counting global allocator over the system allocator, and RSS from `/proc`.
//!
//! A cache budget that only counts what its own code believes it holds can miss the runtime's
//! overhead by 2x (an incident this project was filed against). The node therefore reports
//! three numbers side by side: bytes the state cache accounts for, live bytes the allocator has
//! handed out ([`allocated_bytes`]), and resident memory ([`rss_bytes`]).
//!
//! The binary and the host's test binary install [`CountingAlloc`] as `#[global_allocator]`;
//! without it [`allocated_bytes`] is `None`. Counting costs one relaxed atomic add per
//! allocation and one thread-local add.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Live bytes handed out by [`CountingAlloc`], all threads.
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
/// Set by the first allocation through [`CountingAlloc`].
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Bytes this thread allocated minus bytes it freed.
    static THREAD_NET: Cell<i64> = const { Cell::new(0) };
}

/// The system allocator, counting live bytes (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

fn count_alloc(size: usize) {
    // A load first: storing `true` on every allocation would write the shared cache line from
    // every thread even when nothing changes.
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
    ALLOCATED.fetch_add(size, Ordering::Relaxed);
    // `try_with` fails only while the thread-local is being destroyed; that allocation is then
    // counted globally but not per thread.
    let _ = THREAD_NET.try_with(|net| net.set(net.get().wrapping_add(size as i64)));
}

fn count_free(size: usize) {
    ALLOCATED.fetch_sub(size, Ordering::Relaxed);
    let _ = THREAD_NET.try_with(|net| net.set(net.get().wrapping_sub(size as i64)));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; the counters never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl).
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            count_alloc(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl).
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count_alloc(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        count_free(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl).
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            count_free(layout.size());
            count_alloc(new_size);
        }
        new
    }
}

/// Live heap bytes allocated through [`CountingAlloc`]; `None` if it is not the global
/// allocator of this process.
pub fn allocated_bytes() -> Option<usize> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| ALLOCATED.load(Ordering::Relaxed))
}

/// Bytes the calling thread allocated minus bytes it freed since it started (through
/// [`CountingAlloc`]). Measures one thread's work while other threads allocate too.
pub fn thread_net_bytes() -> i64 {
    THREAD_NET.try_with(Cell::get).unwrap_or(0)
}

/// Resident set size of this process, from `/proc/self/statm`; `None` where that is missing.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: `sysconf` reads a constant of the running system and has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages.checked_mul(u64::try_from(page).ok()?)
}

/// Caps glibc's malloc arenas at one per core (glibc's default is eight per core). Every
/// thread that allocates gets an arena of its own up to that cap, and memory freed in an arena
/// stays resident there: with state queries replayed on short-lived threads, the node's RSS
/// crept up ~25 MB per 125 blocks at 2M validators while live bytes stayed flat; with one
/// arena per core it stays flat (measured with `bench state-cache`). Small allocations are
/// served from per-thread caches either way. Call it first thing in `main`, before any
/// thread starts; nothing happens on other allocators.
pub fn limit_arenas_to_cores() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let cores = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets a malloc parameter; M_ARENA_MAX with a positive count is a
        // valid setting at any time (existing arenas stay, no new ones beyond the cap).
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores);
        }
    }
}

/// Hands the allocator's free memory back to the kernel (glibc `malloc_trim`; nothing
/// elsewhere). Opening a chain builds and drops transient copies of the registry (hundreds of
/// MB at 2M validators) that glibc otherwise keeps resident in its free lists, so RSS would
/// stay above what the node holds for as long as it runs. Takes milliseconds; call it after
/// such a phase, not on a hot path.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims the allocator's own free lists; it is safe to
    // call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn released_memory_leaves_the_resident_set() {
        // 256 MiB touched in 1 MiB blocks (below glibc's mmap threshold once it has grown), then
        // freed: without a trim glibc may keep them resident.
        let blocks: Vec<Vec<u8>> = (0..256).map(|_| vec![1u8; 1 << 20]).collect();
        let held = super::rss_bytes().unwrap_or(0);
        drop(blocks);
        super::release_free_memory();
        let after = super::rss_bytes().unwrap_or(u64::MAX);
        assert!(
            after + (128 << 20) < held,
            "RSS {after} after release, {held} while held"
        );
    }

    #[test]
    fn rss_is_reported_on_linux() {
        assert!(super::rss_bytes().is_some_and(|rss| rss > 1 << 20));
    }
}

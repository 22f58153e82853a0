//! Per-store resource limits that remember which limit was hit, so a breach surfaces as a typed
//! error rather than an anonymous trap.
//!
//! Where a module hits a limit decides whether its call fails, so the limits are consensus: they
//! are pinned in the [`EngineProfile`](super::EngineProfile) ([`Limits::PINNED`]), and the
//! engine's instance pool is sized from them so that these limits, not the pool's slot sizes
//! (which round to the host's page size), are what a module runs into.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// How wasmtime 48 words a `memory.grow` past what the memory's type can address, the one
/// growth failure that does not depend on the host.
const TYPE_LIMITS: &str = "memory growth exceeds memory type's limits";

/// Which resource a module tried to take too much of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// Linear memory, in bytes.
    Memory,
    /// Table elements.
    TableElements,
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resource::Memory => "memory",
            Resource::TableElements => "table",
        })
    }
}

/// A limit that was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breach {
    /// The resource.
    pub resource: Resource,
    /// What the module asked for.
    pub requested: u64,
    /// The limit.
    pub limit: u64,
}

/// Limits of one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Bytes per linear memory.
    pub memory_bytes: usize,
    /// Elements per table.
    pub table_elements: usize,
    /// Core instances per store (a component uses several).
    pub instances: usize,
    /// Tables per store.
    pub tables: usize,
    /// Linear memories per store.
    pub memories: usize,
}

impl Limits {
    /// The limits of this build's engine profile: what every node of a chain enforces.
    ///
    /// `table_elements` is the pooling allocator's default slot size (20,000), which was the
    /// table limit modules really ran into before the limits were pinned (the store limit
    /// then said 100,000 but the pool's slot was smaller).
    pub const PINNED: Limits = Limits {
        memory_bytes: 64 << 20,
        table_elements: 20_000,
        instances: 8,
        tables: 8,
        memories: 1,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::PINNED
    }
}

/// A [`ResourceLimiter`] enforcing [`Limits`] through wasmtime's [`StoreLimits`] and recording
/// the first breach.
pub struct Limiter {
    inner: StoreLimits,
    limits: Limits,
    breach: Option<Breach>,
}

impl Limiter {
    /// A limiter for one store.
    pub fn new(limits: Limits) -> Self {
        let inner = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .table_elements(limits.table_elements)
            .instances(limits.instances)
            .tables(limits.tables)
            .memories(limits.memories)
            .trap_on_grow_failure(true)
            .build();
        Self {
            inner,
            limits,
            breach: None,
        }
    }

    /// The first limit that was hit, if any.
    pub fn breach(&self) -> Option<Breach> {
        self.breach
    }

    fn record(&mut self, resource: Resource, requested: usize, limit: usize) {
        self.breach.get_or_insert(Breach {
            resource,
            requested: requested as u64,
            limit: limit as u64,
        });
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.memory_bytes {
            self.record(Resource::Memory, desired, self.limits.memory_bytes);
        }
        self.inner.memory_growing(current, desired, maximum)
    }

    /// A growth this limiter allowed that the host then could not make (the pages could not
    /// be mapped) is ours: the module would see `memory.grow` fail where other nodes see it
    /// succeed, so the call stops as a host failure instead. Growth past the memory type's own
    /// limits (beyond 4 GiB: decided before this limiter is asked) is the module's and fails
    /// in wasm as the spec says.
    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        if error.to_string().contains(TYPE_LIMITS) {
            return Ok(());
        }
        Err(super::error::HostFunctionFailure::error(
            super::error::HostFailureKind::Runtime,
            format!("growing a module's linear memory failed on this node: {error:?}"),
        ))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.table_elements {
            self.record(Resource::TableElements, desired, self.limits.table_elements);
        }
        self.inner.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::error::{HostFailureKind, HostFunctionFailure};

    #[test]
    fn a_growth_the_host_cannot_map_is_a_host_failure_and_one_past_the_type_is_not() {
        let mut limiter = Limiter::new(Limits::PINNED);
        let err = limiter
            .memory_grow_failed(wasmtime::format_err!("mmap failed: Cannot allocate memory"))
            .unwrap_err();
        let failure = err.downcast_ref::<HostFunctionFailure>().unwrap();
        assert_eq!(failure.kind, HostFailureKind::Runtime);
        assert!(
            failure.message.contains("Cannot allocate memory"),
            "{failure}"
        );
        // What wasmtime says when the module asks for more than its memory type can address.
        assert!(
            limiter
                .memory_grow_failed(wasmtime::format_err!("{TYPE_LIMITS}"))
                .is_ok()
        );
        assert_eq!(limiter.breach(), None);
    }
}

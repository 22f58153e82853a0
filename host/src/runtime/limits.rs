//! Per-store resource limits that remember which limit was hit, so a breach surfaces as a typed
//! error rather than an anonymous trap.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

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
#[derive(Debug, Clone, Copy)]
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

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            table_elements: 100_000,
            instances: 8,
            tables: 8,
            memories: 1,
        }
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

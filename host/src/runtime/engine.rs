//! The process-wide wasmtime [`Engine`] and its deterministic configuration.
//!
//! One engine per process: engines do not share compiled code or pools, and several of them
//! multiply memory. Everything that decides consensus outcomes is deterministic here: NaNs are
//! canonicalized, relaxed SIMD is off (and the threads proposal is not even compiled in: the
//! `threads` cargo feature of wasmtime is off), and execution is bounded by fuel (counted
//! per operator), never by wall-clock time.

use std::sync::OnceLock;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

/// Largest wasm stack a guest may use (pinned in the engine profile). Guest threads get
/// [`GUEST_THREAD_STACK`], far more, so a runaway recursion always hits this limit (a clean
/// stack-overflow trap, classified as a host failure) before the native stack's end.
pub const MAX_WASM_STACK: usize = 1 << 20;
/// Native stack of the threads guests run on.
pub const GUEST_THREAD_STACK: usize = 16 << 20;
/// Upper bound on any one linear memory, whatever a [`RuntimeConfig`](super::RuntimeConfig)
/// asks for: the pooling allocator sizes its slots with it.
pub const MAX_MEMORY_CEILING: usize = 256 << 20;
/// Component instances the pool can hold at once (calls in flight across all modules).
const POOL_COMPONENT_INSTANCES: u32 = 256;
/// Bytes of each pooled linear memory kept resident between calls (reset in place).
const KEEP_RESIDENT: usize = 2 << 20;
/// Set to `1` to have `perf` name guest functions (writes `/tmp/perf-<pid>.map`).
pub const PERFMAP_ENV: &str = "MODNODE_WASM_PERFMAP";

/// The wasmtime configuration every modnode process uses: this build's
/// [`EngineProfile`](super::profile::EngineProfile) plus local tuning (pooling, stacks).
///
/// # Panics
/// Never in practice: the build profile's fuel table is fixed and covered by a test.
pub fn config() -> Config {
    let profile = super::profile::EngineProfile::build();
    let operator_cost = match profile.fuel.operator_cost() {
        Ok(cost) => cost,
        Err(e) => panic!("this build's engine profile is invalid: {e}"),
    };
    let mut config = Config::new();
    config
        .consume_fuel(true)
        .operator_cost(operator_cost)
        .cranelift_nan_canonicalization(profile.determinism.nan_canonicalization)
        .cranelift_opt_level(OptLevel::Speed)
        .wasm_relaxed_simd(false)
        .concurrency_support(false)
        .max_wasm_stack(
            usize::try_from(profile.determinism.max_wasm_stack).unwrap_or(MAX_WASM_STACK),
        )
        .parallel_compilation(true)
        .memory_init_cow(true);
    // The pool is sized from the profile's limits, so a module runs into those (pinned, the
    // same on every node) and never into a pool slot's size (rounded to the host's page size).
    let limits = profile.limits;
    let per_component = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let core_instances = per_component(limits.instances);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_COMPONENT_INSTANCES)
        .total_core_instances(POOL_COMPONENT_INSTANCES.saturating_mul(core_instances))
        .total_memories(POOL_COMPONENT_INSTANCES.saturating_mul(per_component(limits.memories)))
        .total_tables(POOL_COMPONENT_INSTANCES.saturating_mul(per_component(limits.tables)))
        .max_core_instances_per_component(core_instances)
        .max_memories_per_component(per_component(limits.memories))
        .max_tables_per_component(per_component(limits.tables))
        .max_memories_per_module(1)
        .table_elements(limits.table_elements)
        .max_memory_size(MAX_MEMORY_CEILING.max(limits.memory_bytes))
        .max_unused_warm_slots(16)
        // Reset the pages a call touched with memset instead of madvise, so the next call on
        // the slot does not page-fault them back in (measured: ~40 µs per call otherwise).
        // PAGEMAP_SCAN limits the memset to pages that are actually resident.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(64 << 10)
        .pagemap_scan(wasmtime::Enabled::Auto);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    if std::env::var_os(PERFMAP_ENV).is_some_and(|v| v == "1") {
        // Names JIT-compiled guest functions in /tmp/perf-<pid>.map for `perf report`; it does
        // not change what the code computes.
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

/// The process-wide engine, created on first use.
///
/// # Panics
/// Never in practice: [`config`] is a fixed, valid configuration for the platforms modnode
/// builds on; if wasmtime rejects it the process cannot run any module at all.
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| match Engine::new(&config()) {
        Ok(engine) => engine,
        Err(e) => panic!("wasmtime rejected modnode's engine configuration: {e:?}"),
    })
}

/// The configuration uploads are compiled with: [`config`] on one core (no parallel
/// compilation: a hostile module costs the node at most one core) and without the instance
/// pool (a compile-only engine never instantiates, so it reserves no pool memory). Neither
/// setting is part of what compilation reads ([`compatibility_hash`] is the same, a test
/// checks), so its artifacts load in [`engine`] as if compiled there.
pub fn compile_config() -> Config {
    let mut config = config();
    config
        .parallel_compilation(false)
        .allocation_strategy(InstanceAllocationStrategy::OnDemand);
    config
}

/// The engine uploads are compiled with ([`compile_config`]), created on first use. Block
/// execution never uses it: it runs on [`engine`], which compiles the node's own modules in
/// parallel at start.
///
/// # Panics
/// Never in practice, as [`engine`].
pub fn compile_engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| match Engine::new(&compile_config()) {
        Ok(engine) => engine,
        Err(e) => panic!("wasmtime rejected modnode's compile-engine configuration: {e:?}"),
    })
}

/// A stable digest of everything that makes compiled artifacts compatible with this engine
/// (wasmtime version, target, configuration). Part of the artifact cache key.
pub fn compatibility_hash(engine: &Engine) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    use std::hash::{Hash, Hasher};

    struct Sha(Sha256);
    impl Hasher for Sha {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = Sha(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compile_engine_makes_artifacts_the_node_engine_loads() {
        assert_eq!(
            compatibility_hash(compile_engine()),
            compatibility_hash(engine())
        );
        let bytes = crate::artifacts::embedded("gossip-policy-v1").unwrap();
        let artifact = compile_engine().precompile_component(bytes).unwrap();
        // SAFETY: the bytes are this process's own compiler output, just produced.
        let loaded = unsafe { wasmtime::component::Component::deserialize(engine(), &artifact) };
        assert!(loaded.is_ok(), "{loaded:?}");
    }
}

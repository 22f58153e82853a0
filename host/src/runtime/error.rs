//! Typed errors of loading and calling modules.

use std::path::PathBuf;

use super::limits::Resource;

/// Why a module could not be validated, compiled or prepared.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a valid modnode component; says exactly what is wrong.
    #[error(transparent)]
    Invalid(#[from] super::inspect::ValidationError),
    /// wasmtime could not compile the component.
    #[error("compiling module {module} failed: {message}")]
    Compile {
        /// Module name or hash.
        module: String,
        /// wasmtime's message.
        message: String,
    },
    /// The component does not fit the host's implementation of its world.
    #[error("module {module} cannot be linked against the host: {message}")]
    Link {
        /// Module name or hash.
        module: String,
        /// wasmtime's message.
        message: String,
    },
    /// The component's exports do not have the types of its world (a function missing or of
    /// another signature): the module's fault, named with the function and the expected type.
    #[error("module {module} does not implement its world: {source}")]
    Signature {
        /// Module name or hash.
        module: String,
        /// Which function, and what the world expects.
        source: Box<super::signatures::SignatureError>,
    },
    /// The artifact cache directory could not be used.
    #[error("module artifact cache at {path}: {source}")]
    Cache {
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The module failed while describing itself during warm-up.
    #[error("module {module} failed its warm-up call: {source}")]
    Warmup {
        /// Module name or hash.
        module: String,
        /// What went wrong.
        source: Box<CallError>,
    },
}

/// Why a call into a module failed. The call had no effect on host state.
///
/// Two classes that never mix: a [`ModuleFault`] is the module's deterministic outcome (every
/// node running the same module on the same input gets it: a block it causes is invalid), a
/// [`HostFailure`] is ours (a poisoned lock, a full instance pool, I/O): transient or local, never
/// a reason to reject a block or penalise a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The module failed deterministically.
    #[error(transparent)]
    Module(#[from] ModuleFault),
    /// The host failed while serving the call.
    #[error(transparent)]
    Host(#[from] HostFailure),
}

impl CallError {
    /// Whether this is the module's deterministic outcome (as opposed to a host failure).
    pub fn is_deterministic(&self) -> bool {
        matches!(self, CallError::Module(_))
    }

    /// Whether the module is to blame on this node: a module fault, or exhausting the wasm
    /// stack (not deterministic across builds, so never block-invalid, but this build hits it
    /// every time). What a local kind's circuit breaker counts against a candidate.
    pub fn blames_module(&self) -> bool {
        match self {
            CallError::Module(_) => true,
            CallError::Host(f) => f.kind == HostFailureKind::StackExhausted,
        }
    }

    /// The module fault, if this is one.
    pub fn module_fault(&self) -> Option<&ModuleFault> {
        match self {
            CallError::Module(f) => Some(f),
            CallError::Host(_) => None,
        }
    }
}

/// A module's deterministic failure: same module, same input, same fault on every node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModuleFault {
    /// The call used up its fuel budget (deterministic: same input, same point).
    #[error("module {module} ran out of fuel (budget {budget})")]
    OutOfFuel {
        /// Module name.
        module: String,
        /// The budget that was exhausted.
        budget: u64,
    },
    /// The module tried to take more of a resource than allowed.
    #[error("module {module} exceeded its {resource} limit: asked for {requested}, limit {limit}")]
    LimitExceeded {
        /// Module name.
        module: String,
        /// Which resource.
        resource: Resource,
        /// What it asked for.
        requested: u64,
        /// The limit.
        limit: u64,
    },
    /// The module returned a list or string longer than its kind's bound
    /// ([`OutputBounds`](super::kinds::OutputBounds)); the host did not use it.
    #[error(transparent)]
    OutputOverBound(Box<OverBound>),
    /// Any other trap (unreachable, out-of-bounds access, division by zero, ...).
    #[error("module {module} trapped: {message}")]
    Trap {
        /// Module name.
        module: String,
        /// The trap and the innermost wasm frame, in one line.
        message: String,
    },
}

/// An output of a module over its kind's bound (see [`ModuleFault::OutputOverBound`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "module {module} returned {output} of {len} {unit}, over the {kind} bound of {bound} \
     {unit}: the module is at fault; fix it or use another version"
)]
pub struct OverBound {
    /// Module name.
    pub module: String,
    /// The module's kind, whose bound it is.
    pub kind: super::Kind,
    /// Which output (`plan().targets`, `describe().description`, ...).
    pub output: String,
    /// What was returned.
    pub len: u64,
    /// The bound.
    pub bound: u64,
    /// Unit of `len` and `bound` (`bytes`, `items`).
    pub unit: &'static str,
}

/// What part of the host failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFailureKind {
    /// A lock was poisoned by a panic elsewhere; restart the node.
    Poisoned,
    /// Every pooled instance slot is in use; transient, retry later.
    PoolExhausted,
    /// Reading or writing local data failed.
    Io,
    /// The runtime itself failed (fuel accounting, thread pool).
    Runtime,
    /// The call exhausted the wasm stack: how deep a guest gets depends on this build's native
    /// code, so it is not the module's deterministic outcome (see the engine profile's docs).
    StackExhausted,
    /// The module could not be instantiated for a reason of this host's (a memory mapping, a
    /// pool slot): instantiation does not depend on the call's input, so a module that cannot
    /// be instantiated deterministically is never prepared in the first place.
    Instantiation,
}

impl std::fmt::Display for HostFailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HostFailureKind::Poisoned => "poisoned lock",
            HostFailureKind::PoolExhausted => "instance pool exhausted",
            HostFailureKind::Io => "I/O",
            HostFailureKind::Runtime => "runtime",
            HostFailureKind::StackExhausted => "wasm stack exhausted",
            HostFailureKind::Instantiation => "instantiation",
        })
    }
}

/// The host failed while serving a call: our problem, never the module's or a peer's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("host failure ({kind}) while running module {module}: {message}")]
pub struct HostFailure {
    /// Module name.
    pub module: String,
    /// What part of the host failed.
    pub kind: HostFailureKind,
    /// What failed.
    pub message: String,
}

impl HostFailure {
    /// A host failure of `kind` while running `module`.
    pub fn new(module: &str, kind: HostFailureKind, message: impl Into<String>) -> Self {
        Self {
            module: module.to_string(),
            kind,
            message: message.into(),
        }
    }
}

/// Raised inside a host function (as a `wasmtime::Error`) when the host, not the module, failed;
/// [`CallError::classify`] turns it back into a [`HostFailure`] instead of a trap.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct HostFunctionFailure {
    /// What part of the host failed.
    pub kind: HostFailureKind,
    /// What failed.
    pub message: String,
}

impl HostFunctionFailure {
    /// A `wasmtime::Error` carrying a host failure, for host functions to return.
    pub fn error(kind: HostFailureKind, message: impl std::fmt::Display) -> wasmtime::Error {
        wasmtime::Error::new(Self {
            kind,
            message: message.to_string(),
        })
    }
}

impl CallError {
    /// Classifies a wasmtime error from a call into module `module` (instantiation included:
    /// `instantiated` says whether the instance existed when it failed). `breach` is the limit
    /// the call's limiter saw exceeded, if any.
    ///
    /// Module faults are only what every node running this profile gets from the same module
    /// and input: fuel, a pinned limit, a trap raised by the module's own code. Stack
    /// exhaustion depends on this build's native frames and is a host failure; so is any
    /// failure to instantiate other than a pinned limit or fuel (a failed memory mapping, a
    /// pool slot): instantiation does not depend on the input, so a module whose
    /// instantiation fails deterministically fails its `describe` and is never prepared.
    pub(crate) fn classify(
        module: &str,
        error: &wasmtime::Error,
        breach: Option<super::limits::Breach>,
        budget: u64,
        instantiated: bool,
    ) -> Self {
        let module = module.to_string();
        let host = |kind: HostFailureKind, message: String| {
            CallError::Host(HostFailure {
                module: module.clone(),
                kind,
                message,
            })
        };
        if let Some(f) = error.downcast_ref::<HostFunctionFailure>() {
            return host(f.kind, f.message.clone());
        }
        if error
            .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
            .is_some()
        {
            return host(HostFailureKind::PoolExhausted, format!("{error:?}"));
        }
        if let Some(b) = breach {
            return ModuleFault::LimitExceeded {
                module,
                resource: b.resource,
                requested: b.requested,
                limit: b.limit,
            }
            .into();
        }
        match error.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::OutOfFuel) => ModuleFault::OutOfFuel { module, budget }.into(),
            Some(wasmtime::Trap::StackOverflow) => host(
                HostFailureKind::StackExhausted,
                format!(
                    "the call exhausted the {} bytes of wasm stack this build gives a guest; \
                     not counted against the module or the block: {}",
                    super::profile::EngineProfile::build()
                        .determinism
                        .max_wasm_stack,
                    trap_in_one_line(error)
                ),
            ),
            _ if !instantiated => host(
                HostFailureKind::Instantiation,
                format!("cannot instantiate the module on this node: {error:?}"),
            ),
            _ => ModuleFault::Trap {
                module,
                message: trap_in_one_line(error),
            }
            .into(),
        }
    }
}

/// A trap in one line: what trapped and where, instead of wasmtime's multi-line report (a
/// frame per line — thousands for a deep recursion — and a "Caused by" section).
fn trap_in_one_line(error: &wasmtime::Error) -> String {
    let trap = error
        .downcast_ref::<wasmtime::Trap>()
        .map_or_else(|| error.root_cause().to_string(), ToString::to_string);
    let Some(frames) = error
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .map(wasmtime::WasmBacktrace::frames)
    else {
        return trap;
    };
    match frames.first() {
        None => trap,
        Some(innermost) => {
            let function = innermost.func_name().map_or_else(
                || format!("wasm function {}", innermost.func_index()),
                String::from,
            );
            let offset = innermost
                .module_offset()
                .map(|o| format!(" at offset {o:#x}"))
                .unwrap_or_default();
            format!(
                "{trap} (in {function}{offset}, {} wasm frames deep)",
                frames.len()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(error: wasmtime::Error, instantiated: bool) -> CallError {
        CallError::classify("m", &error, None, 7, instantiated)
    }

    #[test]
    fn only_fuel_and_limits_fail_an_instantiation_deterministically() {
        let trap = |t: wasmtime::Trap| wasmtime::Error::from(t);
        // The same trap is the module's in a call, ours while instantiating.
        assert!(matches!(
            classify(trap(wasmtime::Trap::MemoryOutOfBounds), true),
            CallError::Module(ModuleFault::Trap { .. })
        ));
        assert!(matches!(
            classify(trap(wasmtime::Trap::MemoryOutOfBounds), false),
            CallError::Host(HostFailure {
                kind: HostFailureKind::Instantiation,
                ..
            })
        ));
        assert!(matches!(
            classify(wasmtime::format_err!("mmap failed"), false),
            CallError::Host(HostFailure {
                kind: HostFailureKind::Instantiation,
                ..
            })
        ));
        assert_eq!(
            classify(trap(wasmtime::Trap::OutOfFuel), false),
            CallError::Module(ModuleFault::OutOfFuel {
                module: "m".into(),
                budget: 7
            })
        );
        let breach = super::super::limits::Breach {
            resource: Resource::Memory,
            requested: 2,
            limit: 1,
        };
        assert!(matches!(
            CallError::classify("m", &wasmtime::format_err!("grow"), Some(breach), 7, false),
            CallError::Module(ModuleFault::LimitExceeded { .. })
        ));
    }

    #[test]
    fn stack_exhaustion_is_ours_yet_blames_the_module_for_local_breakers() {
        for instantiated in [true, false] {
            let e = classify(wasmtime::Trap::StackOverflow.into(), instantiated);
            assert!(!e.is_deterministic(), "{e:?}");
            assert!(e.blames_module(), "{e:?}");
        }
        let pool = CallError::Host(HostFailure::new(
            "m",
            HostFailureKind::PoolExhausted,
            "full",
        ));
        assert!(!pool.blames_module());
    }
}

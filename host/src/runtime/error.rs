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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
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
    /// The module's wasm stack overflowed.
    #[error("module {module} overflowed its stack")]
    StackOverflow {
        /// Module name.
        module: String,
    },
    /// Any other trap (unreachable, out-of-bounds access, division by zero, ...).
    #[error("module {module} trapped: {message}")]
    Trap {
        /// Module name.
        module: String,
        /// The trap and wasm backtrace.
        message: String,
    },
    /// The host failed while serving the call (e.g. a poisoned lock).
    #[error("host error while running module {module}: {message}")]
    Host {
        /// Module name.
        module: String,
        /// What failed.
        message: String,
    },
}

impl CallError {
    /// Classifies a wasmtime error from a call into module `module`.
    pub(crate) fn classify(
        module: &str,
        error: &wasmtime::Error,
        breach: Option<super::limits::Breach>,
        budget: u64,
    ) -> Self {
        let module = module.to_string();
        if let Some(b) = breach {
            return CallError::LimitExceeded {
                module,
                resource: b.resource,
                requested: b.requested,
                limit: b.limit,
            };
        }
        match error.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::OutOfFuel) => CallError::OutOfFuel { module, budget },
            Some(wasmtime::Trap::StackOverflow) => CallError::StackOverflow { module },
            _ => CallError::Trap {
                module,
                message: format!("{error:?}"),
            },
        }
    }
}

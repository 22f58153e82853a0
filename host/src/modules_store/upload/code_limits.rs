//! Bounds on a component's code, read from its bytes before anything validates or compiles it.
//!
//! What makes a compile slow or large is the number of functions, their bodies and their
//! locals: the compiler works function by function and keeps per-function state, so 990k tiny
//! functions or 50k locals per function cost minutes of CPU and gigabytes of memory while the
//! bytes stay within the upload size. Each bound below is read off the section headers and
//! the function bodies' local declarations in one pass over the bytes (the component's nested
//! core modules included), so a hostile module is refused in milliseconds and never reaches
//! the validator or the compiler. The embedded modules stay far below every bound (a unit test
//! checks each is under a quarter of it).

use wasmparser::{Parser, Payload};

use super::UploadError;

/// One bound on a module's code: what is counted, the largest value accepted, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeLimit {
    /// What is counted, as the refusal names it.
    pub what: &'static str,
    /// The largest value accepted.
    pub max: u64,
    /// Why the bound exists.
    pub reason: &'static str,
}

/// Core modules nested in one component.
pub const CORE_MODULES: CodeLimit = CodeLimit {
    what: "core modules in the component",
    max: 64,
    reason: "each is compiled and instantiated separately; a module is a handful of them",
};
/// Functions a core module defines or imports.
pub const FUNCTIONS_PER_MODULE: CodeLimit = CodeLimit {
    what: "functions in a core module",
    max: 20_000,
    reason: "the compiler keeps state per function: 990k tiny functions took ~57 s and 4.8 GB",
};
/// Functions of all core modules together.
pub const FUNCTIONS_TOTAL: CodeLimit = CodeLimit {
    what: "functions in all core modules",
    max: 40_000,
    reason: "the same per-function cost, summed over the component's modules",
};
/// Locals one function declares (parameters excluded).
pub const LOCALS_PER_FUNCTION: CodeLimit = CodeLimit {
    what: "locals of one function",
    max: 4_096,
    reason: "register allocation grows with the locals: 50k locals per function burnt cores \
             for minutes",
};
/// Locals of all functions of a core module together.
pub const LOCALS_PER_MODULE: CodeLimit = CodeLimit {
    what: "locals of all functions in a core module",
    max: 500_000,
    reason: "bounds the allocator's work over the whole module, not just its largest function",
};
/// Types a core module declares.
pub const TYPES_PER_MODULE: CodeLimit = CodeLimit {
    what: "types in a core module",
    max: 10_000,
    reason: "every type is interned and checked by the compiler and at link time",
};
/// Imports plus exports of a core module.
pub const IMPORTS_EXPORTS_PER_MODULE: CodeLimit = CodeLimit {
    what: "imports and exports of a core module",
    max: 10_000,
    reason: "each is resolved by name at instantiation, on every call's fresh instance",
};
/// Globals a core module declares.
pub const GLOBALS_PER_MODULE: CodeLimit = CodeLimit {
    what: "globals in a core module",
    max: 10_000,
    reason: "each is initialised at every instantiation",
};
/// Data segments of a core module.
pub const DATA_SEGMENTS_PER_MODULE: CodeLimit = CodeLimit {
    what: "data segments in a core module",
    max: 10_000,
    reason: "each is copied into memory at every instantiation",
};
/// Bytes of all data segments of a core module.
pub const DATA_BYTES_PER_MODULE: CodeLimit = CodeLimit {
    what: "bytes of data segments in a core module",
    max: 4 << 20,
    reason: "initial memory image kept per module and copied into every instance",
};
/// Tables a core module declares.
pub const TABLES_PER_MODULE: CodeLimit = CodeLimit {
    what: "tables in a core module",
    max: 16,
    reason: "each is allocated at every instantiation",
};
/// Initial elements of all tables of a core module.
pub const TABLE_ELEMENTS_PER_MODULE: CodeLimit = CodeLimit {
    what: "initial table elements of a core module",
    max: 100_000,
    reason: "tables are allocated and initialised at every instantiation",
};
/// Element segments of a core module.
pub const ELEMENT_SEGMENTS_PER_MODULE: CodeLimit = CodeLimit {
    what: "element segments in a core module",
    max: 10_000,
    reason: "each is applied at every instantiation",
};
/// Component-level canonical functions (lifts, lowers, resource intrinsics).
pub const CANONICAL_FUNCTIONS: CodeLimit = CodeLimit {
    what: "canonical functions of the component",
    max: 10_000,
    reason: "each lift and lower gets a compiled trampoline",
};

/// The largest value of each measure over a component, for the limits' own test and for
/// reporting how far a module is from them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CodeMeasures {
    /// The largest function body, in bytes.
    pub max_body_bytes: u64,
    /// Core modules in the component.
    pub core_modules: u64,
    /// Functions in all core modules.
    pub functions_total: u64,
    /// Canonical functions of the component.
    pub canonical_functions: u64,
    /// The most functions of one module.
    pub functions_per_module: u64,
    /// The most locals of one function.
    pub locals_per_function: u64,
    /// The most locals of one module.
    pub locals_per_module: u64,
    /// The most types of one module.
    pub types_per_module: u64,
    /// The most imports plus exports of one module.
    pub imports_exports_per_module: u64,
    /// The most globals of one module.
    pub globals_per_module: u64,
    /// The most data segments of one module.
    pub data_segments_per_module: u64,
    /// The most data bytes of one module.
    pub data_bytes_per_module: u64,
    /// The most tables of one module.
    pub tables_per_module: u64,
    /// The most initial table elements of one module.
    pub table_elements_per_module: u64,
    /// The most element segments of one module.
    pub element_segments_per_module: u64,
}

impl CodeMeasures {
    /// Each limit with the value measured against it.
    pub fn against_limits(&self) -> [(CodeLimit, u64); 14] {
        [
            (CORE_MODULES, self.core_modules),
            (FUNCTIONS_PER_MODULE, self.functions_per_module),
            (FUNCTIONS_TOTAL, self.functions_total),
            (LOCALS_PER_FUNCTION, self.locals_per_function),
            (LOCALS_PER_MODULE, self.locals_per_module),
            (TYPES_PER_MODULE, self.types_per_module),
            (IMPORTS_EXPORTS_PER_MODULE, self.imports_exports_per_module),
            (GLOBALS_PER_MODULE, self.globals_per_module),
            (DATA_SEGMENTS_PER_MODULE, self.data_segments_per_module),
            (DATA_BYTES_PER_MODULE, self.data_bytes_per_module),
            (TABLES_PER_MODULE, self.tables_per_module),
            (TABLE_ELEMENTS_PER_MODULE, self.table_elements_per_module),
            (
                ELEMENT_SEGMENTS_PER_MODULE,
                self.element_segments_per_module,
            ),
            (CANONICAL_FUNCTIONS, self.canonical_functions),
        ]
    }
}

/// Counts of the core module being read.
#[derive(Debug, Default)]
struct ModuleCounts {
    functions: u64,
    locals: u64,
    types: u64,
    imports_exports: u64,
    data_bytes: u64,
    table_elements: u64,
}

/// Raises `seen` to `value` if larger and refuses `value` over `limit`.
fn bound(seen: &mut u64, value: u64, limit: &CodeLimit) -> Result<(), UploadError> {
    *seen = (*seen).max(value);
    if value > limit.max {
        return Err(UploadError::CodeLimit {
            what: limit.what,
            value,
            max: limit.max,
            reason: limit.reason,
        });
    }
    Ok(())
}

fn add(a: u64, b: impl Into<u64>) -> u64 {
    a.saturating_add(b.into())
}

/// Checks `bytes` against every bound of this module and a function body of at most
/// `max_body_bytes`, stopping at the first bound exceeded. Bytes that do not parse pass:
/// validation, which runs next, names what is malformed. (The module lifecycle does not call
/// this: it counts the same bounds with a [`CodeCounter`] inside its one validating pass.)
pub fn check_code_limits(bytes: &[u8], max_body_bytes: usize) -> Result<CodeMeasures, UploadError> {
    crate::runtime::inspect::passes::count();
    let mut counter = CodeCounter::new(max_body_bytes);
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else {
            break;
        };
        counter.visit(&payload)?;
        if counter.stopped {
            break;
        }
    }
    Ok(counter.measures)
}

/// The bounds counted payload by payload, as a pass over the bytes shows them (see
/// [`check_code_limits`]); a payload it cannot read stops the counting (validation names it).
#[derive(Debug)]
pub struct CodeCounter {
    measures: CodeMeasures,
    /// A core module's counts; components nest, so a stack of the modules being read.
    modules: Vec<Option<ModuleCounts>>,
    max_body_bytes: usize,
    stopped: bool,
}

impl CodeCounter {
    /// Nothing counted yet; function bodies may be `max_body_bytes` long.
    pub fn new(max_body_bytes: usize) -> Self {
        Self {
            measures: CodeMeasures::default(),
            modules: Vec::new(),
            max_body_bytes,
            stopped: false,
        }
    }

    /// Stops counting (the caller took note of a bound exceeded and reads on).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Counts `payload`; an error is the first bound exceeded.
    pub fn visit(&mut self, payload: &Payload<'_>) -> Result<(), UploadError> {
        if self.stopped {
            return Ok(());
        }
        let m = &mut self.measures;
        let max_body_bytes = self.max_body_bytes;
        let current = self.modules.last_mut().and_then(Option::as_mut);
        match (payload, current) {
            (
                Payload::Version {
                    encoding: wasmparser::Encoding::Module,
                    ..
                },
                _,
            ) => {
                let modules_seen = add(m.core_modules, 1u8);
                bound(&mut m.core_modules, modules_seen, &CORE_MODULES)?;
                self.modules.push(Some(ModuleCounts::default()));
            }
            (Payload::Version { .. }, _) => self.modules.push(None),
            (Payload::End(_), _) => {
                self.modules.pop();
            }
            (Payload::TypeSection(r), Some(c)) => {
                c.types = add(c.types, r.count());
                bound(&mut m.types_per_module, c.types, &TYPES_PER_MODULE)?;
            }
            (Payload::ImportSection(r), Some(c)) => {
                // Function imports count as functions too; an import group may hold several.
                for import in r.clone().into_imports().flatten() {
                    if matches!(import.ty, wasmparser::TypeRef::Func(_)) {
                        c.functions = add(c.functions, 1u8);
                        bound(
                            &mut m.functions_per_module,
                            c.functions,
                            &FUNCTIONS_PER_MODULE,
                        )?;
                    }
                    c.imports_exports = add(c.imports_exports, 1u8);
                    bound(
                        &mut m.imports_exports_per_module,
                        c.imports_exports,
                        &IMPORTS_EXPORTS_PER_MODULE,
                    )?;
                }
            }
            (Payload::ExportSection(r), Some(c)) => {
                c.imports_exports = add(c.imports_exports, r.count());
                bound(
                    &mut m.imports_exports_per_module,
                    c.imports_exports,
                    &IMPORTS_EXPORTS_PER_MODULE,
                )?;
            }
            (Payload::FunctionSection(r), Some(c)) => {
                c.functions = add(c.functions, r.count());
                bound(
                    &mut m.functions_per_module,
                    c.functions,
                    &FUNCTIONS_PER_MODULE,
                )?;
                let total = add(m.functions_total, r.count());
                bound(&mut m.functions_total, total, &FUNCTIONS_TOTAL)?;
            }
            (Payload::GlobalSection(r), Some(_)) => {
                bound(
                    &mut m.globals_per_module,
                    r.count().into(),
                    &GLOBALS_PER_MODULE,
                )?;
            }
            (Payload::DataSection(r), Some(c)) => {
                bound(
                    &mut m.data_segments_per_module,
                    r.count().into(),
                    &DATA_SEGMENTS_PER_MODULE,
                )?;
                for data in r.clone().into_iter().flatten() {
                    c.data_bytes = add(
                        c.data_bytes,
                        u64::try_from(data.data.len()).unwrap_or(u64::MAX),
                    );
                    bound(
                        &mut m.data_bytes_per_module,
                        c.data_bytes,
                        &DATA_BYTES_PER_MODULE,
                    )?;
                }
            }
            (Payload::TableSection(r), Some(c)) => {
                bound(
                    &mut m.tables_per_module,
                    r.count().into(),
                    &TABLES_PER_MODULE,
                )?;
                for table in r.clone().into_iter().flatten() {
                    c.table_elements = add(c.table_elements, table.ty.initial);
                    bound(
                        &mut m.table_elements_per_module,
                        c.table_elements,
                        &TABLE_ELEMENTS_PER_MODULE,
                    )?;
                }
            }
            (Payload::ElementSection(r), Some(_)) => {
                bound(
                    &mut m.element_segments_per_module,
                    r.count().into(),
                    &ELEMENT_SEGMENTS_PER_MODULE,
                )?;
            }
            (Payload::CodeSectionEntry(body), Some(c)) => {
                let size = body.range().len();
                m.max_body_bytes = m
                    .max_body_bytes
                    .max(u64::try_from(size).unwrap_or(u64::MAX));
                if size > max_body_bytes {
                    return Err(UploadError::CodeTooLarge {
                        what: "a function body",
                        size,
                        limit: max_body_bytes,
                    });
                }
                let mut locals = 0u64;
                let Ok(reader) = body.get_locals_reader() else {
                    self.stopped = true;
                    return Ok(());
                };
                for local in reader {
                    let Ok((count, _)) = local else {
                        self.stopped = true;
                        return Ok(());
                    };
                    locals = add(locals, count);
                    bound(&mut m.locals_per_function, locals, &LOCALS_PER_FUNCTION)?;
                }
                c.locals = add(c.locals, locals);
                bound(&mut m.locals_per_module, c.locals, &LOCALS_PER_MODULE)?;
            }
            (Payload::ComponentCanonicalSection(r), _) => {
                let canonical = add(m.canonical_functions, r.count());
                bound(&mut m.canonical_functions, canonical, &CANONICAL_FUNCTIONS)?;
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::modules_store::upload::{ModuleService, UploadConfig};

    /// A gossip-policy component whose one core module holds `functions` functions of
    /// `locals` i64 locals each.
    fn hostile(functions: usize, locals: usize) -> Vec<u8> {
        let locals = " i64".repeat(locals);
        let func = format!("(func (local{locals}))\n");
        wat::parse_str(format!(
            r#"(component
                 (core module {})
                 (instance $i)
                 (export "modnode:gossip-policy/policy@1.0.0" (instance $i)))"#,
            func.repeat(functions)
        ))
        .unwrap()
    }

    #[test]
    fn every_embedded_module_is_far_below_every_limit() {
        for (name, bytes) in crate::artifacts::EMBEDDED {
            let measured = check_code_limits(bytes, usize::MAX).unwrap();
            assert!(measured.functions_total > 0, "{name}: {measured:?}");
            for (limit, value) in measured.against_limits() {
                assert!(
                    value <= limit.max / 4,
                    "{name}: {} is {value}, over a quarter of its limit {}",
                    limit.what,
                    limit.max
                );
            }
        }
    }

    #[test]
    fn each_limit_names_itself_the_value_and_the_bound() {
        let many = check_code_limits(&hostile(20_001, 0), usize::MAX).unwrap_err();
        let text = many.to_string();
        assert!(
            text.contains("functions in a core module is 20001"),
            "{text}"
        );
        assert!(text.contains("the limit is 20000"), "{text}");
        let locals = check_code_limits(&hostile(1, 5_000), usize::MAX).unwrap_err();
        let text = locals.to_string();
        assert!(text.contains("locals of one function is 5000"), "{text}");
        assert!(text.contains("the limit is 4096"), "{text}");
        let module_locals = check_code_limits(&hostile(200, 4_000), usize::MAX).unwrap_err();
        assert!(
            module_locals
                .to_string()
                .contains("locals of all functions in a core module"),
            "{module_locals}"
        );
        let body = check_code_limits(&hostile(1, 0), 1).unwrap_err();
        assert!(body.to_string().contains("function body"), "{body}");
    }

    #[test]
    fn a_core_module_is_refused_as_not_a_component_whatever_its_code() {
        let dir = tempfile::tempdir().unwrap();
        let config = UploadConfig {
            max_function_body_bytes: 1,
            ..UploadConfig::default()
        };
        let service = ModuleService::open(dir.path(), dir.path().join("cache"), config).unwrap();
        let core = wat::parse_str("(module (func (export \"f\") (nop) (nop)))").unwrap();
        let err = service.upload(&core, "test").unwrap_err();
        assert_eq!(err.code(), "not-a-component", "{err}");
    }

    #[test]
    fn a_hostile_module_is_refused_before_compiling_fast_naming_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let service = ModuleService::open(
            dir.path(),
            dir.path().join("cache"),
            UploadConfig::default(),
        )
        .unwrap();
        for bytes in [hostile(30_000, 0), hostile(2, 50_000)] {
            let started = Instant::now();
            let counted = crate::modules_store::upload::refusals("code-too-large");
            let err = service.upload(&bytes, "test").unwrap_err();
            assert!(
                crate::modules_store::upload::refusals("code-too-large") > counted,
                "the refusal is not counted for /metrics"
            );
            let text = err.to_string();
            assert_eq!(err.code(), "code-too-large", "{text}");
            assert!(
                text.contains("functions in a core module") || text.contains("locals of one"),
                "{text}"
            );
            assert!(text.contains("before compiling"), "{text}");
            // Compiling ran into the 20 s deadline before; the bytes are read in milliseconds
            // (a bound loose enough for a loaded machine, still far below the compile).
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{:?}",
                started.elapsed()
            );
            assert!(service.store().list().unwrap().is_empty());
        }
    }
}

//! Static validation of module components: which world a component implements, which contract
//! version it was built for, and whether it imports only modnode's host interfaces. Runs on the
//! bytes alone, before anything is compiled.

use std::fmt;

use sha2::{Digest, Sha256};
use wasmparser::{
    Encoding, FuncValidatorAllocations, Parser, Payload, ValidPayload, Validator, WasmFeatures,
};

use crate::hashes::ModuleHash;

/// Largest component accepted, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 16 << 20;

pub use super::kinds::Kind;

/// The version of the shared `modnode:types` package this host implements.
const TYPES_CONTRACT: Version = Version {
    major: 1,
    minor: 0,
    patch: 0,
};

/// A semantic version of a WIT package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major: incompatible changes.
    pub major: u64,
    /// Minor: additions.
    pub minor: u64,
    /// Patch: fixes.
    pub patch: u64,
}

impl Version {
    fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('.');
        let v = Version {
            major: parts.next()?.parse().ok()?,
            minor: parts.next()?.parse().ok()?,
            patch: parts.next()?.split(['-', '+']).next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(v)
    }

    /// A module built against `self` runs on a host implementing `host`: same major version, and
    /// nothing newer than the host knows.
    pub fn runs_on(self, host: Version) -> bool {
        self.major == host.major && self <= host
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A parsed `namespace:package/interface@version` name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InterfaceName<'a> {
    namespace: &'a str,
    package: &'a str,
    interface: &'a str,
    version: Option<Version>,
}

impl<'a> InterfaceName<'a> {
    fn parse(name: &'a str) -> Option<Self> {
        let (path, version) = match name.split_once('@') {
            Some((path, v)) => (path, Some(Version::parse(v)?)),
            None => (name, None),
        };
        let (namespace, rest) = path.split_once(':')?;
        let (package, interface) = rest.split_once('/')?;
        Some(Self {
            namespace,
            package,
            interface,
            version,
        })
    }
}

/// Why a component was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// The file is larger than [`MAX_COMPONENT_BYTES`].
    #[error("module is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        /// Actual size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly file: {reason}")]
    NotWasm {
        /// What the first bytes look like.
        reason: String,
    },
    /// A core module where a component is required.
    #[error(
        "this is a core WebAssembly module, not a component; modnode loads components \
         (turn it into one with `modnode module componentize <core.wasm> -o <component.wasm>`)"
    )]
    CoreModule,
    /// The component does not validate.
    #[error("malformed component: {message}")]
    Malformed {
        /// The validator's message, with the byte offset.
        message: String,
    },
    /// The component exports no modnode world's interface.
    #[error(
        "component implements no modnode world: it exports [{}]; a module must export one of {}",
        exports.join(", "),
        Kind::ALL.map(|k| format!("modnode:{}/{}", k.package(), k.export_interface())).join(", ")
    )]
    UnknownWorld {
        /// What it exports.
        exports: Vec<String>,
    },
    /// The component exports the interfaces of several worlds.
    #[error("component exports the interfaces of several module kinds: {0}")]
    AmbiguousWorld(String),
    /// The component was built against a contract version this host does not implement.
    #[error(
        "incompatible contract version: the module was built for {found}, \
         this node implements {supported}; rebuild the module against one of those"
    )]
    IncompatibleContract {
        /// The package and version the module uses.
        found: String,
        /// Every package and version this host implements for the kind, comma-separated.
        supported: String,
    },
    /// The component imports something besides modnode's host interfaces.
    #[error(
        "module imports `{import}`, which is not a modnode host interface; a {kind} module may \
         import only [{}]",
        allowed.join(", ")
    )]
    ForbiddenImport {
        /// The offending import.
        import: String,
        /// The module's kind.
        kind: Kind,
        /// What it may import.
        allowed: Vec<String>,
    },
}

/// What static validation learned about a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    /// The world it implements.
    pub kind: Kind,
    /// The contract version it was built against: its export's package version, as the module
    /// declares it. The host runs it on [`host_contract`](Self::host_contract).
    pub contract: Version,
    /// SHA-256 of the bytes.
    pub sha256: ModuleHash,
    /// Size in bytes.
    pub size: usize,
    /// Top-level import names.
    pub imports: Vec<String>,
    /// Top-level export names.
    pub exports: Vec<String>,
}

impl ComponentInfo {
    /// The contract the host runs this module on (same major, not older than
    /// [`contract`](Self::contract)); validation refused every module without one.
    pub fn host_contract(&self) -> Option<&'static super::kinds::Contract> {
        self.kind.implementing(self.contract)
    }

    /// Whether it exports a migration the chain runs once at its activation height
    /// (`modnode:deposits/migration@<contract>`), as `module inspect` and `module list` show.
    pub fn has_migration(&self) -> bool {
        migration_of(self.kind, &self.exports).is_some()
    }

    /// `modnode:<package>@<contract>`: the contract as `module inspect` and `module list` show
    /// it.
    pub fn contract_name(&self) -> String {
        format!("modnode:{}@{}", self.kind.package(), self.contract)
    }
}

/// Validates a component and says what it is.
pub fn validate(bytes: &[u8]) -> Result<ComponentInfo, ValidationError> {
    check_header(bytes)?;
    let (imports, exports) = top_level_names(bytes)?;
    passes::count();
    wasmparser::Validator::new()
        .validate_all(bytes)
        .map_err(|e| ValidationError::Malformed {
            message: e.to_string(),
        })?;
    identify(bytes, imports, exports)
}

/// Why [`validate_once`] refused a component.
#[derive(Debug)]
pub enum OnePassError<E> {
    /// The component is not valid ([`validate`] refuses it too).
    Invalid(ValidationError),
    /// It is a valid component of a known world (`info`), but uses a wasm feature outside
    /// the features asked for; the validator's message names the feature.
    Feature {
        /// What it is.
        info: Box<ComponentInfo>,
        /// The validator's message.
        message: String,
    },
    /// The caller's check of a payload refused it (it stopped the pass).
    Visit(E),
}

/// [`validate`] with only `features` enabled, in one pass over the bytes: every payload is
/// shown to `visit` first (a bound read off the bytes — `modules_store`'s code limits —
/// refuses before the validator spends time on it), then validated, and the top-level
/// imports and exports are read on the way. An accepted component is parsed exactly once; a
/// refused one may be parsed again to say why ([`OnePassError::Feature`] is only returned for
/// a component [`validate`] accepts, with what it found, so refusals keep their order: not a
/// component, unknown world, contract, imports, then features).
pub fn validate_once<E>(
    bytes: &[u8],
    features: WasmFeatures,
    mut visit: impl FnMut(&Payload<'_>) -> Result<(), E>,
) -> Result<ComponentInfo, OnePassError<E>> {
    passes::count();
    check_header(bytes).map_err(OnePassError::Invalid)?;
    let mut names = TopLevelNames::default();
    let mut validator = Validator::new_with_features(features);
    let mut parser = Parser::new(0);
    parser.set_features(features);
    // Bodies are checked after the sections, as `Validator::validate_all` does, so a refusal
    // names the same first error.
    let mut bodies = Vec::new();
    let mut refused = None;
    for payload in parser.parse_all(bytes) {
        let payload = match payload {
            Ok(payload) => payload,
            Err(e) => {
                refused = Some(e);
                break;
            }
        };
        visit(&payload).map_err(OnePassError::Visit)?;
        names.read(&payload).map_err(OnePassError::Invalid)?;
        match validator.payload(&payload) {
            Ok(ValidPayload::Func(func, body)) => bodies.push((func, body)),
            Ok(_) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    if refused.is_none() {
        let mut allocations = FuncValidatorAllocations::default();
        for (func, body) in bodies {
            let mut func = func.into_validator(allocations);
            if let Err(e) = func.validate(&body) {
                refused = Some(e);
                break;
            }
            allocations = func.into_allocations();
        }
    }
    match refused {
        None => identify(bytes, names.imports, names.exports).map_err(OnePassError::Invalid),
        // Malformed, or only outside `features`: the full validator tells which.
        Some(e) => match validate(bytes) {
            Ok(info) => Err(OnePassError::Feature {
                info: Box::new(info),
                message: e.to_string(),
            }),
            Err(invalid) => Err(OnePassError::Invalid(invalid)),
        },
    }
}

/// Counting the passes over a component's bytes, for the test that an upload parses them once.
pub mod passes {
    #[cfg(any(test, feature = "test-utils"))]
    thread_local! {
        static PASSES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Records one pass over a component's bytes on this thread (every validation and every
    /// check that reads the bytes calls it; only test builds count).
    pub fn count() {
        #[cfg(any(test, feature = "test-utils"))]
        PASSES.with(|p| p.set(p.get().saturating_add(1)));
    }

    /// Passes over component bytes made on this thread so far.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn on_this_thread() -> u64 {
        PASSES.with(std::cell::Cell::get)
    }
}

/// The size, then the header: a core module or not wasm at all is named before parsing.
fn check_header(bytes: &[u8]) -> Result<(), ValidationError> {
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(ValidationError::TooLarge {
            size: bytes.len(),
            limit: MAX_COMPONENT_BYTES,
        });
    }
    if Parser::is_core_wasm(bytes) {
        return Err(ValidationError::CoreModule);
    }
    if !Parser::is_component(bytes) {
        return Err(ValidationError::NotWasm {
            reason: describe_header(bytes),
        });
    }
    Ok(())
}

/// What a valid component's top-level names say it is.
fn identify(
    bytes: &[u8],
    imports: Vec<String>,
    exports: Vec<String>,
) -> Result<ComponentInfo, ValidationError> {
    let (kind, contract, host) = world_of(&exports)?;
    check_imports(kind, host, migration_of(kind, &exports), &imports)?;
    Ok(ComponentInfo {
        kind,
        contract,
        sha256: ModuleHash(Sha256::digest(bytes).into()),
        size: bytes.len(),
        imports,
        exports,
    })
}

/// A copy of `component` with a custom section `name` carrying `data` appended. A custom
/// section never changes what a component does, so the copy is the same code under different
/// bytes, and so a different hash: a version that differs from the original only in identity
/// (`modnode bench swap` activates one to measure a switch between equally fast versions).
pub fn with_custom_section(component: &[u8], name: &str, data: &[u8]) -> Vec<u8> {
    use wasm_encoder::Section;
    let mut out = component.to_vec();
    wasm_encoder::CustomSection {
        name: name.into(),
        data: data.into(),
    }
    .append_to(&mut out);
    out
}

fn describe_header(bytes: &[u8]) -> String {
    match bytes.get(..4) {
        None => format!("only {} bytes long", bytes.len()),
        Some(b"\0asm") => "WebAssembly magic but an unknown version or layer".into(),
        Some(magic) => format!("starts with {magic:02x?}, not the wasm magic \\0asm"),
    }
}

fn top_level_names(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), ValidationError> {
    passes::count();
    let mut names = TopLevelNames::default();
    for payload in Parser::new(0).parse_all(bytes) {
        names.read(&payload.map_err(malformed)?)?;
    }
    Ok((names.imports, names.exports))
}

fn malformed(e: wasmparser::BinaryReaderError) -> ValidationError {
    ValidationError::Malformed {
        message: e.to_string(),
    }
}

/// The component's own (top-level) import and export names, read payload by payload.
#[derive(Default)]
struct TopLevelNames {
    imports: Vec<String>,
    exports: Vec<String>,
    depth: u32,
}

impl TopLevelNames {
    fn read(&mut self, payload: &Payload<'_>) -> Result<(), ValidationError> {
        match payload {
            Payload::Version {
                encoding: Encoding::Module,
                ..
            } if self.depth == 0 => {
                return Err(ValidationError::CoreModule);
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => {
                self.depth = self.depth.saturating_add(1)
            }
            Payload::End(_) => self.depth = self.depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if self.depth == 0 => {
                for import in reader.clone() {
                    self.imports
                        .push(import.map_err(malformed)?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(reader) if self.depth == 0 => {
                for export in reader.clone() {
                    self.exports
                        .push(export.map_err(malformed)?.name.name.to_string());
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The kind, declared contract and the host contract it runs on.
fn world_of(exports: &[String]) -> Result<(Kind, Version, Version), ValidationError> {
    let mut found: Vec<(Kind, Version, &str)> = Vec::new();
    for name in exports {
        let Some(parsed) = InterfaceName::parse(name) else {
            continue;
        };
        if parsed.namespace != "modnode" {
            continue;
        }
        let Some(kind) = Kind::ALL
            .into_iter()
            .find(|k| k.package() == parsed.package && k.export_interface() == parsed.interface)
        else {
            continue;
        };
        let Some(version) = parsed.version else {
            return Err(ValidationError::IncompatibleContract {
                found: format!("{name} (unversioned)"),
                supported: kind.implemented_exports(),
            });
        };
        found.push((kind, version, name));
    }
    match found.as_slice() {
        [] => Err(ValidationError::UnknownWorld {
            exports: exports.to_vec(),
        }),
        [(kind, version, name)] => match kind.implementing(*version) {
            Some(host) => Ok((*kind, *version, host.version)),
            None => Err(ValidationError::IncompatibleContract {
                found: (*name).to_string(),
                supported: kind.implemented_exports(),
            }),
        },
        many => Err(ValidationError::AmbiguousWorld(
            many.iter()
                .map(|(_, _, n)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

/// The host contract of a deposits module's optional `migration` export
/// (`modnode:deposits/migration@<contract>`, `wit/deposits-3`), whose host interfaces the module
/// may import besides its own contract's: a `@2.0.0` module's down-migration reads the
/// `@3.0.0` queue. `None` for other kinds, modules without one, and contracts the host does not
/// implement (whose imports then stay refused).
fn migration_of(kind: Kind, exports: &[String]) -> Option<Version> {
    if kind != Kind::Deposits {
        return None;
    }
    exports.iter().find_map(|name| {
        let p = InterfaceName::parse(name)?;
        if p.namespace != "modnode" || p.package != kind.package() || p.interface != "migration" {
            return None;
        }
        kind.implementing(p.version?).map(|c| c.version)
    })
}

/// Imports must be of the contract the module's export declares (`host`: the host's version of
/// it), of its migration's contract (`migration`), or the shared types.
fn check_imports(
    kind: Kind,
    host: Version,
    migration: Option<Version>,
    imports: &[String],
) -> Result<(), ValidationError> {
    let allowed: Vec<String> = std::iter::once(format!("modnode:types/types@{TYPES_CONTRACT}"))
        .chain(
            kind.importable()
                .iter()
                .map(|i| format!("modnode:{}/{i}@{host}", kind.package())),
        )
        .chain(migration.into_iter().flat_map(|m| {
            kind.importable()
                .iter()
                .map(move |i| format!("modnode:{}/{i}@{m}", kind.package()))
        }))
        .collect();
    for import in imports {
        let parsed = InterfaceName::parse(import);
        let ok = parsed.as_ref().is_some_and(|p| {
            let host_version = if p.package == "types" && p.interface == "types" {
                Some(TYPES_CONTRACT)
            } else if p.package == kind.package() && kind.importable().contains(&p.interface) {
                Some(host)
            } else {
                None
            };
            let of_migration = migration.is_some_and(|m| {
                p.package == kind.package()
                    && kind.importable().contains(&p.interface)
                    && p.version.is_some_and(|v| v.runs_on(m))
            });
            p.namespace == "modnode"
                && (of_migration
                    || host_version.is_some_and(|host| p.version.is_some_and(|v| v.runs_on(host))))
        });
        if !ok {
            // A modnode interface at the wrong version is a contract mismatch, not a stray import.
            if let Some(p) = parsed.filter(|p| {
                p.namespace == "modnode"
                    && p.package == kind.package()
                    && kind.importable().contains(&p.interface)
            }) {
                return Err(ValidationError::IncompatibleContract {
                    found: import.clone(),
                    supported: format!("modnode:{}/{}@{host}", kind.package(), p.interface),
                });
            }
            return Err(ValidationError::ForbiddenImport {
                import: import.clone(),
                kind,
                allowed,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_compare() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("1.0.0").runs_on(v("1.0.0")));
        assert!(v("1.0.0").runs_on(v("1.2.0")));
        assert!(!v("1.3.0").runs_on(v("1.2.0")));
        assert!(!v("2.0.0").runs_on(v("1.0.0")));
        assert!(Version::parse("1.0").is_none());
        assert!(Version::parse("1.0.0.0").is_none());
    }

    #[test]
    fn interface_names_parse() {
        let n = InterfaceName::parse("modnode:deposits/processor@1.0.0").unwrap();
        assert_eq!(
            (n.namespace, n.package, n.interface),
            ("modnode", "deposits", "processor")
        );
        assert_eq!(n.version, Version::parse("1.0.0"));
        assert!(InterfaceName::parse("process").is_none());
    }

    #[test]
    fn an_appended_custom_section_reads_back_last_with_its_name_and_data() {
        let original = crate::artifacts::embedded("deposits-v2").unwrap();
        let tagged = with_custom_section(original, "modnode-test-tag", &[7; 200]);
        assert!(tagged.starts_with(original));
        let last = wasmparser::Parser::new(0)
            .parse_all(&tagged)
            .filter_map(|p| match p.unwrap() {
                wasmparser::Payload::CustomSection(c) if c.name() == "modnode-test-tag" => {
                    Some(c.data().to_vec())
                }
                _ => None,
            })
            .last();
        assert_eq!(last, Some(vec![7; 200]));
    }
}

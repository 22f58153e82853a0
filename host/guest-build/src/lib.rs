//! Builds modnode's guest crates for `wasm32-unknown-unknown` and turns each into a component.
//!
//! Used by `host/build.rs` (so a plain `cargo build` produces every module) and by the test that
//! checks artifacts are reproducible. A guest crate opts in with a `[package.metadata.modnode]`
//! table naming its artifact:
//!
//! ```toml
//! [package.metadata.modnode]
//! artifact = "deposits-v1"
//! ```
//!
//! The nested cargo build uses its own target directory (the outer build holds the lock on the
//! normal one), the `guest` profile from the workspace manifest, and path remapping so that the
//! bytes do not depend on where the checkout or the cargo home live.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The wasm target every guest is built for.
pub const GUEST_TARGET: &str = "wasm32-unknown-unknown";
/// The cargo profile guests are built with (defined in the workspace `Cargo.toml`).
pub const GUEST_PROFILE: &str = "guest";
/// Artifacts whose name starts with this are test fixtures, never embedded in the node.
pub const FIXTURE_PREFIX: &str = "fixture-";
/// Artifacts whose name starts with this are examples for module authors, never embedded.
pub const EXAMPLE_PREFIX: &str = "example-";

/// A guest crate found under `modules/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestCrate {
    /// Cargo package name.
    pub package: String,
    /// Artifact name, e.g. `deposits-v1`; the component lands in `<out>/<artifact>.wasm`.
    pub artifact: String,
    /// Directory holding the crate's `Cargo.toml`.
    pub manifest_dir: PathBuf,
}

impl GuestCrate {
    /// Whether this artifact is a test fixture.
    pub fn is_fixture(&self) -> bool {
        self.artifact.starts_with(FIXTURE_PREFIX)
    }

    /// Whether the node binary embeds this artifact (fixtures and examples it does not).
    pub fn is_embedded(&self) -> bool {
        !self.is_fixture() && !self.artifact.starts_with(EXAMPLE_PREFIX)
    }

    /// The cdylib file name cargo produces for this package.
    fn core_file_name(&self) -> String {
        format!("{}.wasm", self.package.replace('-', "_"))
    }
}

/// A component written by [`build`].
#[derive(Debug, Clone)]
pub struct Artifact {
    /// The crate it was built from.
    pub guest: GuestCrate,
    /// Path of the component file.
    pub path: PathBuf,
}

/// Where and how to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Root of the workspace (the directory of the root `Cargo.toml`).
    pub workspace_root: PathBuf,
    /// Target directory for the nested cargo build.
    pub target_dir: PathBuf,
    /// Directory the components are written to.
    pub out_dir: PathBuf,
    /// The cargo binary to run.
    pub cargo: PathBuf,
}

/// Why building guests failed.
#[derive(Debug)]
pub enum Error {
    /// A file could not be read or written.
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A guest manifest is not valid TOML or its modnode metadata is malformed.
    Manifest {
        /// The manifest at fault.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Two guest crates claim the same artifact name.
    DuplicateArtifact {
        /// The artifact name.
        artifact: String,
    },
    /// The nested cargo build failed (its output was forwarded to stderr).
    Cargo {
        /// The exit status.
        status: String,
    },
    /// `wit-component` refused a core module.
    Componentize {
        /// The artifact at fault.
        artifact: String,
        /// The encoder's message.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Manifest { path, message } => write!(f, "{}: {message}", path.display()),
            Error::DuplicateArtifact { artifact } => {
                write!(f, "two guest crates declare the artifact `{artifact}`")
            }
            Error::Cargo { status } => write!(
                f,
                "building guest modules for {GUEST_TARGET} failed ({status}); \
                 if the target is missing, `rustup target add {GUEST_TARGET}`"
            ),
            Error::Componentize { artifact, message } => {
                write!(f, "turning `{artifact}` into a component failed: {message}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Finds every guest crate below `<workspace_root>/modules` and `<workspace_root>/examples`,
/// sorted by artifact name.
pub fn discover(workspace_root: &Path) -> Result<Vec<GuestCrate>, Error> {
    let mut manifests = Vec::new();
    collect_manifests(&workspace_root.join("modules"), 0, &mut manifests)?;
    collect_manifests(&workspace_root.join("examples"), 0, &mut manifests)?;
    let mut guests = Vec::new();
    for manifest in manifests {
        if let Some(guest) = read_guest(&manifest)? {
            guests.push(guest);
        }
    }
    guests.sort_by(|a, b| a.artifact.cmp(&b.artifact));
    for pair in guests.windows(2) {
        if let [a, b] = pair
            && a.artifact == b.artifact
        {
            return Err(Error::DuplicateArtifact {
                artifact: a.artifact.clone(),
            });
        }
    }
    Ok(guests)
}

fn collect_manifests(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    if depth > 3 {
        return Ok(());
    }
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let path = entry.map_err(io(dir))?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            collect_manifests(&path, depth + 1, out)?;
        } else if path.file_name().is_some_and(|n| n == "Cargo.toml") {
            out.push(path);
        }
    }
    Ok(())
}

fn read_guest(manifest: &Path) -> Result<Option<GuestCrate>, Error> {
    let text = fs::read_to_string(manifest).map_err(io(manifest))?;
    let bad = |message: String| Error::Manifest {
        path: manifest.to_path_buf(),
        message,
    };
    let doc: toml::Table = text.parse().map_err(|e| bad(format!("{e}")))?;
    let Some(package) = doc.get("package").and_then(|p| p.as_table()) else {
        return Ok(None);
    };
    let Some(meta) = package
        .get("metadata")
        .and_then(|m| m.get("modnode"))
        .and_then(|m| m.as_table())
    else {
        return Ok(None);
    };
    let name = package
        .get("name")
        .and_then(|n| n.as_str())
        .ok_or_else(|| bad("package.name is missing".into()))?;
    let artifact = meta
        .get("artifact")
        .and_then(|a| a.as_str())
        .ok_or_else(|| bad("package.metadata.modnode.artifact must be a string".into()))?;
    if artifact.is_empty()
        || !artifact
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(bad(format!(
            "artifact name `{artifact}` must be lowercase letters, digits and dashes"
        )));
    }
    let manifest_dir = manifest
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| bad("manifest has no parent directory".into()))?;
    Ok(Some(GuestCrate {
        package: name.to_string(),
        artifact: artifact.to_string(),
        manifest_dir,
    }))
}

/// Environment variables of an enclosing cargo invocation that must not leak into the nested
/// build: wrappers (clippy's driver), flags meant for the host target, and target overrides.
const SCRUBBED_ENV: &[&str] = &[
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_LLVM_COV",
    "CARGO_INCREMENTAL",
    "RUSTDOCFLAGS",
];

/// Builds every guest crate and writes one component per crate to `opts.out_dir`.
pub fn build(opts: &BuildOptions) -> Result<Vec<Artifact>, Error> {
    let guests = discover(&opts.workspace_root)?;
    if guests.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = Command::new(&opts.cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(opts.workspace_root.join("Cargo.toml"))
        .arg("--profile")
        .arg(GUEST_PROFILE)
        .arg("--target")
        .arg(GUEST_TARGET)
        .arg("--target-dir")
        .arg(&opts.target_dir);
    for guest in &guests {
        cmd.arg("-p").arg(&guest.package);
    }
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_ENCODED_RUSTFLAGS", remap_flags(opts));
    let status = cmd.status().map_err(io(&opts.cargo))?;
    if !status.success() {
        return Err(Error::Cargo {
            status: status.to_string(),
        });
    }

    fs::create_dir_all(&opts.out_dir).map_err(io(&opts.out_dir))?;
    let core_dir = opts.target_dir.join(GUEST_TARGET).join(GUEST_PROFILE);
    let mut artifacts = Vec::with_capacity(guests.len());
    for guest in guests {
        let core_path = core_dir.join(guest.core_file_name());
        let core = fs::read(&core_path).map_err(io(&core_path))?;
        let component = componentize(&core).map_err(|message| Error::Componentize {
            artifact: guest.artifact.clone(),
            message,
        })?;
        let path = opts.out_dir.join(format!("{}.wasm", guest.artifact));
        write_if_changed(&path, &component)?;
        artifacts.push(Artifact { guest, path });
    }
    Ok(artifacts)
}

/// Turns a core module built with `wit-bindgen` into a component. The world comes from the
/// `component-type` custom section `wit-bindgen` embeds.
pub fn componentize(core: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .module(core)
        .map_err(|e| format!("{e:#}"))?
        .validate(true)
        .encode()
        .map_err(|e| format!("{e:#}"))
}

fn remap_flags(opts: &BuildOptions) -> OsString {
    let mut prefixes: Vec<(PathBuf, &str)> = vec![
        (opts.workspace_root.clone(), "/modnode"),
        (opts.target_dir.clone(), "/target"),
    ];
    if let Some(home) = cargo_home() {
        prefixes.push((home, "/cargo"));
    }
    let mut flags = OsString::new();
    for (i, (from, to)) in prefixes.iter().enumerate() {
        if i > 0 {
            flags.push("\x1f");
        }
        flags.push("--remap-path-prefix=");
        flags.push(from.as_os_str());
        flags.push("=");
        flags.push(to);
    }
    flags
}

fn cargo_home() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        return Some(PathBuf::from(home));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo"))
}

/// Writes through a temporary file and a rename, and leaves the file alone when the bytes are
/// unchanged (so its mtime does not trigger rebuilds of crates that embed it).
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    if fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    let tmp = path.with_extension("wasm.tmp");
    fs::write(&tmp, bytes).map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

/// Finds cargo's target directory from a build script's `OUT_DIR`
/// (`<target>/[<triple>/]<profile>/build/<pkg>-<hash>/out`): the nearest ancestor holding the
/// `CACHEDIR.TAG` cargo writes at the top of every target directory.
pub fn target_dir_from_out_dir(out_dir: &Path) -> Option<PathBuf> {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discover_reads_metadata_and_rejects_bad_names() {
        let dir = std::env::temp_dir().join(format!("guest-build-test-{}", std::process::id()));
        let good = dir.join("modules/a");
        let bad = dir.join("modules/b");
        fs::create_dir_all(&good).unwrap();
        fs::create_dir_all(&bad).unwrap();
        fs::write(
            good.join("Cargo.toml"),
            "[package]\nname = \"a-crate\"\n[package.metadata.modnode]\nartifact = \"a-v1\"\n",
        )
        .unwrap();
        fs::write(bad.join("Cargo.toml"), "[package]\nname = \"b\"\n").unwrap();
        let found = discover(&dir).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].artifact, "a-v1");
        assert_eq!(found[0].core_file_name(), "a_crate.wasm");

        fs::write(
            bad.join("Cargo.toml"),
            "[package]\nname = \"b\"\n[package.metadata.modnode]\nartifact = \"B V1\"\n",
        )
        .unwrap();
        let err = discover(&dir).unwrap_err().to_string();
        assert!(err.contains("B V1"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}

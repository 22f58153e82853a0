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
    /// The toolchain has no standard library for [`GUEST_TARGET`] and it could not be installed.
    MissingTarget {
        /// The sysroot that lacks the target.
        sysroot: PathBuf,
        /// What to run to install it (or why the automatic install failed).
        remedy: String,
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
            Error::MissingTarget { sysroot, remedy } => write!(
                f,
                "the Rust toolchain at {} has no {GUEST_TARGET} standard library; {remedy}",
                sysroot.display()
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
    ensure_guest_target()?;
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

/// How the missing guest target gets installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetInstall {
    /// The sysroot already holds the target's standard library.
    Present,
    /// Run `rustup target add` for this toolchain.
    Rustup {
        /// The rustup binary.
        rustup: PathBuf,
        /// The toolchain name (e.g. `1.95.0-x86_64-unknown-linux-gnu`).
        toolchain: String,
    },
    /// No rustup: the user must install the target another way.
    Manual,
}

/// Decides how to get [`GUEST_TARGET`] into `sysroot`: nothing when it is there, `rustup target
/// add` for the toolchain the sysroot belongs to when rustup is available, else by hand.
/// `toolchain_env` is `RUSTUP_TOOLCHAIN` as rustup's proxies set it.
pub fn plan_target_install(
    sysroot: &Path,
    rustup: Option<PathBuf>,
    toolchain_env: Option<String>,
) -> TargetInstall {
    if sysroot
        .join("lib/rustlib")
        .join(GUEST_TARGET)
        .join("lib")
        .is_dir()
    {
        return TargetInstall::Present;
    }
    let Some(rustup) = rustup else {
        return TargetInstall::Manual;
    };
    // A rustup toolchain's sysroot is `<rustup home>/toolchains/<name>`; that name is exact,
    // whereas RUSTUP_TOOLCHAIN may be a file override path or a short channel name.
    let from_sysroot = sysroot
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "toolchains"))
        .and_then(|_| sysroot.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    match from_sysroot.or(toolchain_env) {
        Some(toolchain) => TargetInstall::Rustup { rustup, toolchain },
        None => TargetInstall::Manual,
    }
}

/// Makes sure the rustc that cargo uses (`RUSTC`, else `rustc`) can build for
/// [`GUEST_TARGET`], installing the target with rustup when it is missing. A toolchain that
/// was installed before `rust-toolchain.toml` listed the target does not get it by itself.
fn ensure_guest_target() -> Result<(), Error> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(io(Path::new(&rustc)))?;
    if !output.status.success() {
        // Let the nested build report whatever is wrong with this rustc.
        return Ok(());
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let manual =
        format!("run `rustup target add {GUEST_TARGET}` (or install it for your toolchain)");
    match plan_target_install(
        &sysroot,
        find_rustup(),
        std::env::var("RUSTUP_TOOLCHAIN").ok(),
    ) {
        TargetInstall::Present => Ok(()),
        TargetInstall::Manual => Err(Error::MissingTarget {
            sysroot,
            remedy: manual,
        }),
        TargetInstall::Rustup { rustup, toolchain } => {
            println!(
                "cargo::warning=installing the {GUEST_TARGET} target for toolchain {toolchain}"
            );
            let status = Command::new(&rustup)
                .args(["target", "add", GUEST_TARGET, "--toolchain", &toolchain])
                .status()
                .map_err(io(&rustup))?;
            if status.success() {
                Ok(())
            } else {
                Err(Error::MissingTarget {
                    sysroot,
                    remedy: format!(
                        "`{} target add {GUEST_TARGET} --toolchain {toolchain}` failed ({status}); \
                         run it by hand",
                        rustup.display()
                    ),
                })
            }
        }
    }
}

/// The rustup binary: `$CARGO_HOME/bin/rustup` if present, else the first `rustup` on `PATH`.
fn find_rustup() -> Option<PathBuf> {
    let exe = |dir: &Path| dir.join("rustup");
    if let Some(candidate) = cargo_home().map(|h| exe(&h.join("bin")))
        && candidate.is_file()
    {
        return Some(candidate);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| exe(&dir))
        .find(|candidate| candidate.is_file())
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

    #[test]
    fn target_install_plan_follows_sysroot_and_rustup() {
        let home = std::env::temp_dir().join(format!("guest-target-test-{}", std::process::id()));
        let sysroot = home.join("toolchains/1.95.0-x86_64-unknown-linux-gnu");
        fs::create_dir_all(&sysroot).unwrap();
        let rustup = Some(PathBuf::from("/opt/rustup"));

        // Missing target, rustup present: install for the sysroot's own toolchain, whatever
        // RUSTUP_TOOLCHAIN says (it may be an override path).
        assert_eq!(
            plan_target_install(&sysroot, rustup.clone(), Some("stable".into())),
            TargetInstall::Rustup {
                rustup: PathBuf::from("/opt/rustup"),
                toolchain: "1.95.0-x86_64-unknown-linux-gnu".into()
            }
        );
        // No rustup: the user is told what to do.
        assert_eq!(
            plan_target_install(&sysroot, None, None),
            TargetInstall::Manual
        );
        // A sysroot outside rustup's layout falls back to RUSTUP_TOOLCHAIN, else manual.
        let odd = home.join("custom-rust");
        fs::create_dir_all(&odd).unwrap();
        assert_eq!(
            plan_target_install(&odd, rustup.clone(), None),
            TargetInstall::Manual
        );
        assert!(matches!(
            plan_target_install(&odd, rustup.clone(), Some("nightly".into())),
            TargetInstall::Rustup { toolchain, .. } if toolchain == "nightly"
        ));
        // Target present: nothing to do.
        fs::create_dir_all(sysroot.join("lib/rustlib").join(GUEST_TARGET).join("lib")).unwrap();
        assert_eq!(
            plan_target_install(&sysroot, rustup, None),
            TargetInstall::Present
        );
        fs::remove_dir_all(&home).unwrap();

        let message = Error::MissingTarget {
            sysroot: PathBuf::from("/x"),
            remedy: "run `rustup target add wasm32-unknown-unknown`".into(),
        }
        .to_string();
        assert!(
            message.contains("/x") && message.contains("rustup target add"),
            "{message}"
        );
    }
}

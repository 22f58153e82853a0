//! Builds every guest module (see `modnode-guest-build`) into `<target>/modules/` and generates
//! `artifacts.rs`, which embeds the default (non-fixture) modules into the node binary.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    if let Err(e) = run() {
        println!("cargo::error={e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let workspace_root = manifest_dir
        .parent()
        .ok_or("host crate has no parent directory")?
        .to_path_buf();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let target_dir = modnode_guest_build::target_dir_from_out_dir(&out_dir)
        .unwrap_or_else(|| workspace_root.join("target"));
    let cargo = PathBuf::from(std::env::var("CARGO")?);

    for watched in ["modules", "examples", "wit", "Cargo.toml", "Cargo.lock"] {
        println!(
            "cargo::rerun-if-changed={}",
            workspace_root.join(watched).display()
        );
    }

    let modules_dir = target_dir.join("modules");
    let artifacts = modnode_guest_build::build(&modnode_guest_build::BuildOptions {
        workspace_root,
        target_dir: target_dir.join("guests"),
        out_dir: modules_dir.clone(),
        cargo,
    })?;

    let mut src = String::new();
    writeln!(
        src,
        "/// Directory holding every built module artifact, fixtures included."
    )?;
    writeln!(
        src,
        "pub const MODULES_DIR: &str = {:?};",
        modules_dir.display().to_string()
    )?;
    writeln!(
        src,
        "/// The default modules built into the node: (artifact name, component bytes)."
    )?;
    writeln!(src, "pub const EMBEDDED: &[(&str, &[u8])] = &[")?;
    for artifact in artifacts.iter().filter(|a| a.guest.is_embedded()) {
        writeln!(
            src,
            "    ({:?}, include_bytes!({:?})),",
            artifact.guest.artifact,
            artifact.path.display().to_string()
        )?;
    }
    writeln!(src, "];")?;
    writeln!(
        src,
        "/// Names of the test-fixture artifacts in [`MODULES_DIR`]."
    )?;
    writeln!(src, "pub const FIXTURES: &[&str] = &[")?;
    for artifact in artifacts.iter().filter(|a| a.guest.is_fixture()) {
        writeln!(src, "    {:?},", artifact.guest.artifact)?;
    }
    writeln!(src, "];")?;
    std::fs::write(out_dir.join("artifacts.rs"), src)?;
    Ok(())
}

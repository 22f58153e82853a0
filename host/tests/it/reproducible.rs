//! Building the guests twice gives byte-identical components.

use std::path::Path;

#[test]
fn rebuilding_every_guest_from_scratch_gives_identical_bytes() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let scratch = tempfile::tempdir().unwrap();
    let artifacts = modnode_guest_build::build(&modnode_guest_build::BuildOptions {
        workspace_root: workspace,
        target_dir: scratch.path().join("target"),
        out_dir: scratch.path().join("modules"),
        cargo: std::env::var_os("CARGO").map_or_else(|| "cargo".into(), Into::into),
    })
    .unwrap();
    assert!(artifacts.len() >= 4, "only {} artifacts", artifacts.len());
    for built in artifacts {
        let fresh = std::fs::read(&built.path).unwrap();
        let existing = std::fs::read(modnode::artifacts::path(&built.guest.artifact)).unwrap();
        assert!(
            fresh == existing,
            "{} differs between two builds",
            built.guest.artifact
        );
    }
}

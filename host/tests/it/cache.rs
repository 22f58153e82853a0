//! Compiled artifacts are cached on disk and reused after a restart.

use modnode::runtime::{Runtime, RuntimeConfig};

use super::artifact;

fn runtime_at(dir: &std::path::Path) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

#[test]
fn restart_loads_the_cached_artifact_instead_of_compiling() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = artifact("deposits-v2");

    let first = runtime_at(dir.path());
    let module = first.load(&bytes).unwrap();
    assert_eq!(
        (
            first.cache().stats().compiles(),
            first.cache().stats().hits()
        ),
        (1, 0)
    );
    let path = first
        .cache()
        .artifact_path(module.meta().component.sha256.as_bytes())
        .unwrap();
    assert!(path.is_file(), "artifact not written to {}", path.display());
    drop(first);

    // A new runtime over the same directory is what a restarted node builds.
    let second = runtime_at(dir.path());
    let again = second.load(&bytes).unwrap();
    assert_eq!(
        (
            second.cache().stats().compiles(),
            second.cache().stats().hits()
        ),
        (0, 1)
    );
    assert_eq!(again.meta().info, module.meta().info);
}

#[test]
fn corrupt_artifact_is_replaced_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = artifact("gossip-policy-v1");
    let rt = runtime_at(dir.path());
    let module = rt.load(&bytes).unwrap();
    let path = rt
        .cache()
        .artifact_path(module.meta().component.sha256.as_bytes())
        .unwrap();
    std::fs::write(&path, b"definitely not machine code").unwrap();

    let rt = runtime_at(dir.path());
    rt.load(&bytes).unwrap();
    let stats = rt.cache().stats();
    assert_eq!(
        (stats.rejected(), stats.compiles(), stats.hits()),
        (1, 1, 0)
    );
    // The replacement is good again.
    let rt = runtime_at(dir.path());
    rt.load(&bytes).unwrap();
    assert_eq!(rt.cache().stats().hits(), 1);
}

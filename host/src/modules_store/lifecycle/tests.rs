use super::observed;
use super::{LifePath, Stage};
use crate::hashes::ModuleHash;
use crate::modules_store::upload::{ModuleService, UploadConfig, UploadOutcome};
use crate::runtime::inspect::{self, passes};

/// A gossip policy under bytes (and so a hash) no other test uses.
fn unique_policy(tag: &str) -> Vec<u8> {
    let bytes = std::fs::read(crate::artifacts::path("gossip-policy-v1")).unwrap();
    inspect::with_custom_section(&bytes, "modnode-test-tag", tag.as_bytes())
}

fn hash(bytes: &[u8]) -> ModuleHash {
    inspect::validate(bytes).unwrap().sha256
}

#[test]
fn an_upload_parses_the_component_bytes_once() {
    let bytes = unique_policy("lifecycle-parse-once");
    let dir = tempfile::tempdir().unwrap();
    let service = ModuleService::open(
        dir.path(),
        dir.path().join("cache"),
        UploadConfig::default(),
    )
    .unwrap();

    // The counter sees every pass: `validate` reads the names, then validates.
    let before = passes::on_this_thread();
    inspect::validate(&bytes).unwrap();
    assert_eq!(passes::on_this_thread() - before, 2);

    let before = passes::on_this_thread();
    let outcome = service.upload(&bytes, "test").unwrap();
    assert!(matches!(outcome, UploadOutcome::Ready(_)), "{outcome:?}");
    assert_eq!(
        passes::on_this_thread() - before,
        1,
        "an accepted upload reads its bytes once: bounds, features and validation in one pass"
    );
}

#[test]
fn an_upload_passes_every_stage_in_order() {
    let bytes = unique_policy("lifecycle-upload-stages");
    let hash = hash(&bytes);
    let dir = tempfile::tempdir().unwrap();
    let service = ModuleService::open(
        dir.path(),
        dir.path().join("cache"),
        UploadConfig::default(),
    )
    .unwrap();
    observed::take();
    service.upload(&bytes, "test").unwrap();
    let stages: Vec<(LifePath, Stage)> = observed::take()
        .into_iter()
        .filter(|(_, _, h)| *h == hash)
        .map(|(path, stage, _)| (path, stage))
        .collect();
    assert_eq!(
        stages,
        [
            Stage::Validated,
            Stage::Compiled,
            Stage::Warmed,
            Stage::Stored,
            Stage::Admitted
        ]
        .map(|stage| (LifePath::Upload, stage))
    );
    assert!(service.ready(&hash).is_some());
}

#[test]
fn a_refused_upload_stops_at_its_stage_and_is_not_admitted() {
    // A component of no modnode world is refused at validation: no later stage runs.
    let bytes = wat::parse_str("(component)").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let service = ModuleService::open(
        dir.path(),
        dir.path().join("cache"),
        UploadConfig::default(),
    )
    .unwrap();
    observed::take();
    let refused = service.upload(&bytes, "test").unwrap_err();
    assert_eq!(refused.code(), "unknown-world", "{refused}");
    assert_eq!(observed::take(), []);
}

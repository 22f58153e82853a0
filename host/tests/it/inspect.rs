//! Static validation rejects everything that is not a modnode component, each with its own error.

use modnode::runtime::inspect::{Kind, ValidationError, validate};

use super::artifact;

fn component(wat: &str) -> Vec<u8> {
    wat::parse_str(wat).unwrap()
}

#[test]
fn real_modules_are_recognised() {
    for (name, kind, expected) in [
        ("deposits-v1", Kind::Deposits, "2.0.0"),
        ("deposits-v2", Kind::Deposits, "2.0.0"),
        ("checkpoint-v1", Kind::Checkpoint, "2.0.0"),
        ("checkpoint-v2", Kind::Checkpoint, "2.0.0"),
        ("gossip-policy-v1", Kind::GossipPolicy, "1.0.0"),
        ("gossip-policy-v2-stateful", Kind::GossipPolicy, "2.0.0"),
    ] {
        let info = validate(&artifact(name)).unwrap();
        assert_eq!(info.kind, kind, "{name}");
        assert_eq!(
            info.host_contract().map(|c| c.version),
            Some(info.contract),
            "{name}"
        );
        assert_eq!(info.contract.to_string(), expected, "{name}");
        assert!(
            info.exports.contains(&kind.export_name(info.contract)),
            "{name}: {:?}",
            info.exports
        );
        assert!(
            info.imports.iter().all(|i| i.starts_with("modnode:")),
            "{name}: {:?}",
            info.imports
        );
    }
}

#[test]
fn not_wasm() {
    let err = validate(b"#!/bin/sh\necho hi\n").unwrap_err();
    assert!(matches!(err, ValidationError::NotWasm { .. }), "{err}");
    assert!(err.to_string().contains("not the wasm magic"), "{err}");
    assert!(matches!(
        validate(b"").unwrap_err(),
        ValidationError::NotWasm { .. }
    ));
}

#[test]
fn core_module_is_not_a_component() {
    let core = wat::parse_str("(module (func (export \"f\")))").unwrap();
    let err = validate(&core).unwrap_err();
    assert_eq!(err, ValidationError::CoreModule);
    assert!(err.to_string().contains("modnode module componentize"));
}

#[test]
fn truncated_component_is_malformed() {
    let bytes = artifact("deposits-v1");
    let err = validate(&bytes[..bytes.len() / 2]).unwrap_err();
    assert!(matches!(err, ValidationError::Malformed { .. }), "{err}");
}

#[test]
fn unknown_world() {
    let err = validate(&component(
        r#"(component (instance $i) (export "acme:thing/api@1.0.0" (instance $i)))"#,
    ))
    .unwrap_err();
    match &err {
        ValidationError::UnknownWorld { exports } => assert_eq!(exports, &["acme:thing/api@1.0.0"]),
        other => panic!("expected UnknownWorld, got {other:?}"),
    }
    assert!(
        err.to_string().contains("modnode:deposits/processor"),
        "{err}"
    );
}

#[test]
fn incompatible_contract_version() {
    let err = validate(&component(
        r#"(component (instance $i) (export "modnode:deposits/processor@4.0.0" (instance $i)))"#,
    ))
    .unwrap_err();
    assert_eq!(
        err,
        ValidationError::IncompatibleContract {
            found: "modnode:deposits/processor@4.0.0".into(),
            supported: "modnode:deposits/processor@2.0.0, modnode:deposits/processor@3.0.0".into(),
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("@4.0.0") && msg.contains("@2.0.0") && msg.contains("@3.0.0"),
        "{msg}"
    );

    // A newer minor than the host implements is just as incompatible.
    let err = validate(&component(
        r#"(component (instance $i) (export "modnode:gossip-policy/policy@1.1.0" (instance $i)))"#,
    ))
    .unwrap_err();
    assert!(
        matches!(err, ValidationError::IncompatibleContract { .. }),
        "{err}"
    );
}

#[test]
fn wasi_import_is_forbidden() {
    let err = validate(&component(
        r#"(component
             (import "wasi:cli/environment@0.2.0" (instance))
             (instance $i)
             (export "modnode:deposits/processor@2.0.0" (instance $i)))"#,
    ))
    .unwrap_err();
    match &err {
        ValidationError::ForbiddenImport {
            import,
            kind,
            allowed,
        } => {
            assert_eq!(import, "wasi:cli/environment@0.2.0");
            assert_eq!(*kind, Kind::Deposits);
            assert!(allowed.contains(&"modnode:deposits/registry@2.0.0".to_string()));
        }
        other => panic!("expected ForbiddenImport, got {other:?}"),
    }
}

#[test]
fn import_of_another_kinds_interface_is_forbidden() {
    let err = validate(&component(
        r#"(component
             (import "modnode:checkpoint/state-reader@2.0.0" (instance))
             (instance $i)
             (export "modnode:gossip-policy/policy@1.0.0" (instance $i)))"#,
    ))
    .unwrap_err();
    assert!(
        matches!(
            err,
            ValidationError::ForbiddenImport {
                kind: Kind::GossipPolicy,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn two_worlds_at_once_are_ambiguous() {
    let err = validate(&component(
        r#"(component (instance $i)
             (export "modnode:deposits/processor@2.0.0" (instance $i))
             (export "modnode:checkpoint/chunker@2.0.0" (instance $i)))"#,
    ))
    .unwrap_err();
    assert!(matches!(err, ValidationError::AmbiguousWorld(_)), "{err}");
}

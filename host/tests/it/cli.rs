//! The `modnode` binary's module commands, end to end.

use std::process::Command;

fn modnode(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn inspect_prints_what_a_module_is() {
    let path = modnode::artifacts::path("deposits-v2");
    let (ok, out, err) = modnode(&["module", "inspect", "--json", path.to_str().unwrap()]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "deposits");
    assert_eq!(v["contract"], "modnode:deposits@1.0.0");
    assert_eq!(v["module_version"], 2);
    assert_eq!(v["size"], std::fs::metadata(&path).unwrap().len());
    assert_eq!(v["sha256"].as_str().unwrap().len(), 64);
    assert!(
        v["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == "modnode:deposits/crypto@1.0.0")
    );
}

#[test]
fn inspect_rejects_with_a_specific_message_and_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("text.wasm", b"hello".to_vec(), "not a WebAssembly file"),
        (
            "core.wasm",
            wat::parse_str("(module)").unwrap(),
            "core WebAssembly module, not a component",
        ),
        (
            "other.wasm",
            wat::parse_str(r#"(component (instance $i) (export "acme:x/y@1.0.0" (instance $i)))"#)
                .unwrap(),
            "implements no modnode world",
        ),
        (
            "wasi.wasm",
            wat::parse_str(
                r#"(component (import "wasi:io/streams@0.2.0" (instance)) (instance $i)
                   (export "modnode:checkpoint/chunker@1.0.0" (instance $i)))"#,
            )
            .unwrap(),
            "imports `wasi:io/streams@0.2.0`, which is not a modnode host interface",
        ),
    ];
    for (name, bytes, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let (ok, _, err) = modnode(&["module", "inspect", path.to_str().unwrap()]);
        assert!(!ok, "{name} was accepted");
        assert!(err.contains(expected), "{name}: {err}");
        assert!(err.contains(name), "error does not name the file: {err}");
    }
    let (ok, _, err) = modnode(&["module", "inspect", "/nonexistent/x.wasm"]);
    assert!(!ok && err.contains("/nonexistent/x.wasm"), "{err}");
}

#[test]
fn componentize_turns_a_guest_core_module_into_the_same_component() {
    let core = std::path::Path::new(modnode::artifacts::MODULES_DIR)
        .parent()
        .unwrap()
        .join("guests/wasm32-unknown-unknown/guest/gossip_policy_v1.wasm");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("policy.wasm");
    let (ok, stdout, err) = modnode(&[
        "module",
        "componentize",
        core.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(stdout.contains("gossip-policy module"), "{stdout}");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(modnode::artifacts::path("gossip-policy-v1")).unwrap()
    );

    // A core module without wit-bindgen's type information cannot become a component.
    let bare = dir.path().join("bare.wasm");
    std::fs::write(&bare, wat::parse_str("(module)").unwrap()).unwrap();
    let (ok, _, err) = modnode(&[
        "module",
        "componentize",
        bare.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("bare.wasm"), "{err}");
}

use serde_json::json;

use super::modules::{parse_activate, parse_kind};
use super::{ErrorBody, Health, Kind, Mode, ModuleOp};

fn bytes(body: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(body).unwrap()
}

#[test]
fn activation_requests_are_parsed_strictly_with_the_culprit_named() {
    let hash = "ab".repeat(32);
    let op = |body| parse_activate(&bytes(&body));
    assert_eq!(
        op(json!({"hash": hash})),
        Ok(ModuleOp::Activate {
            hash: crate::hashes::ModuleHash([0xab; 32]),
            mode: Mode::Live
        })
    );
    assert_eq!(
        op(json!({"hash": hash, "mode": "canary", "percent": 10})),
        Ok(ModuleOp::Activate {
            hash: crate::hashes::ModuleHash([0xab; 32]),
            mode: Mode::Canary(10)
        })
    );
    for (body, culprit) in [
        (json!({}), "`hash`"),
        (json!({"hash": "abcd"}), "\"abcd\""),
        (json!({"hash": hash, "mode": "fast"}), "\"fast\""),
        (json!({"hash": hash, "mode": "canary"}), "`percent`"),
        (
            json!({"hash": hash, "mode": "canary", "percent": 0}),
            "1 to 100",
        ),
        (
            json!({"hash": hash, "mode": "canary", "percent": 101}),
            "1 to 100",
        ),
    ] {
        let err = op(body.clone()).unwrap_err();
        assert!(err.contains(culprit), "{body}: {err}");
    }
}

/// A module operation's body is parsed once into its typed request: a field the request
/// does not have is refused by name (before: ignored, so a typo like `percnt` was lost),
/// and so is a body that is not a JSON object.
#[test]
fn module_operation_bodies_with_unknown_fields_are_refused_naming_the_field() {
    let hash = "ab".repeat(32);
    let err =
        parse_activate(&bytes(&json!({"hash": hash, "mode": "live", "percnt": 10}))).unwrap_err();
    assert!(err.contains("`percnt`"), "{err}");
    assert_eq!(
        parse_kind(&bytes(&json!({"kind": "deposits"}))),
        Ok(Kind::Deposits)
    );
    let err = parse_kind(&bytes(&json!({"kind": "deposits", "force": true}))).unwrap_err();
    assert!(err.contains("`force`"), "{err}");
    let err = parse_kind(&bytes(&json!({}))).unwrap_err();
    assert!(err.contains("`kind`"), "{err}");
    let err = parse_kind(&bytes(&json!({"kind": "storage"}))).unwrap_err();
    assert!(err.contains("storage"), "{err}");
    for body in [&b"[1]"[..], b"not json", b""] {
        assert!(parse_kind(body).is_err(), "{body:?}");
        assert!(parse_activate(body).is_err(), "{body:?}");
    }
}

/// The typed answers serialise to the JSON the CLI, the testnet runner and the tests read.
#[test]
fn typed_answers_keep_their_json_shapes() {
    let value = |v: &dyn erased::Ser| v.to_value();
    assert_eq!(
        value(&Health {
            status: "ok",
            reason: None
        }),
        json!({"status": "ok"})
    );
    assert_eq!(
        value(&Health {
            status: "failing",
            reason: Some("no peers".into())
        }),
        json!({"status": "failing", "reason": "no peers"})
    );
    assert_eq!(
        value(&ErrorBody {
            error: "gone".into(),
            reason: None
        }),
        json!({"error": "gone"})
    );
    assert_eq!(
        value(&ErrorBody {
            error: "big".into(),
            reason: Some("too-large")
        }),
        json!({"error": "big", "reason": "too-large"})
    );
}

mod erased {
    /// A serialisable answer, as a JSON value.
    pub trait Ser {
        fn to_value(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_value(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap()
        }
    }
}

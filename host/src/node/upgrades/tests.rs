use super::listing::readiness_of;
use super::*;
use crate::state::UpgradeOp;
use serde_json::json;

const OLD: ModuleHash = ModuleHash([1; 32]);
const NEW: ModuleHash = ModuleHash([2; 32]);
const H: u64 = 10;

/// A `GET /modules` listing as `module_ops::list` builds it: the deposits slot running
/// the node's own default, both versions ready.
fn listing() -> serde_json::Value {
    let ready = |hash: &ModuleHash, name: &str, contract: &str| {
        json!({"name": name, "sha256": hex::encode(hash), "module_version": 1,
            "contract": contract, "migration": false, "warmup": {}})
    };
    json!({"kinds": [{
        "kind": "deposits",
        "slot": {"active": {"name": "deposits-default", "hash": "00"}},
        "ready": [
            ready(&OLD, "old", "modnode:deposits@2.0.0"),
            ready(&NEW, "new", "modnode:deposits@3.0.0"),
        ],
    }]})
}

/// The listing at head `head` of a chain running OLD from genesis and NEW from H.
fn listing_at(head: u64) -> serde_json::Value {
    let mut schedule = Schedule::genesis(&[(Kind::Deposits, OLD)]);
    schedule.entries.push(UpgradeOp {
        kind: Kind::Deposits,
        module: NEW,
        height: H,
    });
    let readiness = readiness_of(&schedule, head, &HashMap::new(), &[], &[9; 32], |_| true);
    let mut listing = listing();
    annotate_listing(&mut listing, &readiness, &running_at(&schedule, head));
    listing
}

#[test]
fn a_module_scheduled_at_h_is_only_scheduled_at_h_minus_1_and_only_active_from_h() {
    let before = listing_at(H - 1);
    let slot = &before["kinds"][0]["slot"];
    assert_eq!(slot["active"]["hash"], hex::encode(OLD), "{before}");
    assert_eq!(slot["scheduled"]["hash"], hex::encode(NEW), "{before}");
    assert_eq!(slot["scheduled"]["height"], H, "{before}");
    assert_eq!(before["scheduled"].as_array().map(Vec::len), Some(1));

    for head in [H, H + 1] {
        let after = listing_at(head);
        let slot = &after["kinds"][0]["slot"];
        assert_eq!(slot["active"]["hash"], hex::encode(NEW), "{after}");
        // `module list` shows the contract the chain now runs the kind on.
        assert_eq!(
            slot["active"]["contract"], "modnode:deposits@3.0.0",
            "{after}"
        );
        assert!(slot.get("scheduled").is_none(), "{after}");
        assert_eq!(after["scheduled"], json!([]), "{after}");
    }
}

//! Module lifecycle operations on a running network over real QUIC, through the admin API and
//! the `modnode module …` commands: canary, live activation, rollback and shadow of the gossip
//! policy on a relaying node while blocks flow; the circuit breaker rolling back a trapping
//! policy; the refusals (no token, unknown hash, consensus kind).
//! Blocks are the gossip traffic that must cross the switching node (deposits reach blocks
//! only through the deposit contract, never through gossip).
//!
//! Waits are liveness bounds (generous, polled), not performance targets.

use std::path::Path;
use std::process::Command;

use modnode::admin::AdminError;
use modnode::admin::client::{self, Target};
use modnode::node::Node;
use modnode::runtime::{Kind, Mode};
use modnode_gossip::policy::{MessageKind, MessageMeta, PeerStats, Policy as _};
use serde_json::Value;
use tempfile::TempDir;

use super::artifact;
use super::network::{eventually, genesis, start};

/// `count` nodes, each bootstrapping from the one before; the first `authorities` produce.
async fn network(name: &str, tmp: &[TempDir], authorities: usize) -> Vec<Node> {
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let genesis = genesis(name, &paths, authorities);
    let mut nodes: Vec<Node> = Vec::new();
    for dir in &paths {
        let bootstrap = nodes
            .last()
            .map(|n: &Node| vec![n.peer_addr().unwrap()])
            .unwrap_or_default();
        nodes.push(start(dir, &genesis, bootstrap).await);
    }
    eventually("every node at height 3", || {
        nodes.iter().all(|n| n.status().height >= 3)
    })
    .await;
    nodes
}

/// Waits until every node is three blocks further than the highest node is now: blocks made
/// at the authorities must have crossed the switching node.
async fn three_more_blocks(nodes: &[Node]) {
    let target = nodes.iter().map(|n| n.status().height).max().unwrap_or(0) + 3;
    eventually("three more blocks at every node", || {
        nodes.iter().all(|n| n.status().height >= target)
    })
    .await;
}

/// The gossip-policy slot in an answer of `POST /modules/activate` or `/modules/rollback`.
fn slot(answer: &Value) -> &Value {
    assert_eq!(answer["kind"], "gossip-policy", "{answer}");
    &answer["slot"]
}

fn hash_of(name: &str) -> String {
    let bytes = modnode::artifacts::embedded(name)
        .map(<[u8]>::to_vec)
        .unwrap_or_else(|| artifact(name));
    modnode::runtime::inspect::validate(&bytes)
        .map(|i| hex::encode(i.sha256))
        .unwrap()
}

fn refused(result: Result<Value, AdminError>, status: u16, text: &str) {
    match result {
        Err(AdminError::Refused {
            status: got,
            message,
            ..
        }) => {
            assert_eq!(got, status, "{message}");
            assert!(message.contains(text), "{message:?} lacks {text:?}");
        }
        other => panic!("expected HTTP {status}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_policy_canary_live_rollback_and_shadow_through_the_admin_api_on_a_live_network() {
    let tmp: Vec<TempDir> = (0..3).map(|_| TempDir::new().unwrap()).collect();
    // Nodes 0 and 1 are the authorities; node 2 follows behind the relaying node 1.
    let nodes = network("modnode-it-live-swap", &tmp, 2).await;
    let api = Target::data_dir(tmp[1].path()).unwrap();
    let (v1, v2) = (hash_of("gossip-policy-v1"), hash_of("gossip-policy-v2"));

    // Canary, live, rollback: each while blocks keep crossing the switching node.
    let answer = client::activate_module(&api, &v1, Mode::Canary(50))
        .await
        .unwrap();
    assert_eq!(slot(&answer)["canary"]["percent"], 50);
    three_more_blocks(&nodes).await;
    let canary = nodes[1]
        .modules()
        .kind_status(Kind::GossipPolicy)
        .canary
        .unwrap();
    assert!(canary.calls > 0, "the canary served no call: {canary:?}");
    assert_eq!(canary.faults, 0);

    let answer = client::activate_module(&api, &v1, Mode::Live)
        .await
        .unwrap();
    let live = slot(&answer);
    assert_eq!(live["active"]["hash"], *v1);
    assert_eq!(live["previous"]["hash"], *v2);
    assert!(
        live["canary"].is_null(),
        "going live ends the same version's canary"
    );
    three_more_blocks(&nodes).await;
    // No call failed: v1 served every plan on probation without a fault.
    let status = nodes[1].modules().kind_status(Kind::GossipPolicy);
    assert_eq!(status.active.hash.to_hex(), v1);
    assert_eq!(status.active_faults, Some(0));

    let answer = client::rollback_module(&api, Kind::GossipPolicy)
        .await
        .unwrap();
    let back = slot(&answer);
    assert_eq!(back["active"]["hash"], *v2);
    assert_eq!(back["previous"]["hash"], *v1);
    three_more_blocks(&nodes).await;
    // Not one plan failed on the switching node while it swapped, so no message fell back
    // to flooding, and no breaker tripped.
    let status = nodes[1].modules().kind_status(Kind::GossipPolicy);
    assert_eq!((status.failed_calls, status.breaker_trips), (0, 0));

    // Shadow: v1 plans differently from v2 on the real blocks; v2 beside itself never does.
    client::activate_module(&api, &v1, Mode::Shadow)
        .await
        .unwrap();
    let modules = nodes[1].modules().clone();
    eventually("the v1 shadow diverges on real traffic", || {
        modules.flush_shadow();
        modules
            .kind_status(Kind::GossipPolicy)
            .shadow
            .is_some_and(|s| s.divergences > 0)
    })
    .await;
    let shadow = modules.kind_status(Kind::GossipPolicy).shadow.unwrap();
    let d = shadow.recent_divergences.last().unwrap();
    assert!(
        d.input.contains("MessageMeta"),
        "the input is logged: {d:?}"
    );
    assert_ne!(d.active, d.shadow);
    assert_eq!(
        modules.kind_status(Kind::GossipPolicy).active.hash.to_hex(),
        v2,
        "a shadow has no effect"
    );

    // `GET /modules` shows it per kind, beside every ready version and its warm-up.
    let listing = client::modules(&api).await.unwrap();
    let policy = listing["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "gossip-policy")
        .unwrap();
    assert!(policy["slot"]["shadow"]["divergences"].as_u64().unwrap() > 0);
    assert_eq!(policy["slot"]["previous"]["hash"], *v1);
    let ready: Vec<&str> = policy["ready"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|v| assert!(v["warmup"]["fuel"].as_u64().unwrap() > 0, "{v}"))
        .map(|v| v["sha256"].as_str().unwrap())
        .collect();
    assert!(ready.contains(&&*v1) && ready.contains(&&*v2), "{ready:?}");

    client::activate_module(&api, &v2, Mode::Shadow)
        .await
        .unwrap();
    eventually("the identical shadow compared ten real plans", || {
        modules.flush_shadow();
        modules
            .kind_status(Kind::GossipPolicy)
            .shadow
            .is_some_and(|s| s.compared >= 10)
    })
    .await;
    let same = modules.kind_status(Kind::GossipPolicy).shadow.unwrap();
    assert_eq!(same.divergences, 0, "{same:?}");
    assert_eq!(same.faults, 0);

    // Cancelling stops the shadow and leaves the active version.
    let answer = client::cancel_candidate(&api, Kind::GossipPolicy)
        .await
        .unwrap();
    assert!(slot(&answer)["shadow"].is_null(), "{answer}");
    assert_eq!(slot(&answer)["active"]["hash"], *v2);
    refused(
        client::cancel_candidate(&api, Kind::GossipPolicy).await,
        409,
        "no shadow or canary",
    );

    // The refusals name what is wrong.
    refused(
        client::activate_module(&api, &"ab".repeat(32), Mode::Live).await,
        404,
        &"ab".repeat(32),
    );
    refused(
        client::activate_module(&api, &hash_of("deposits-v2"), Mode::Live).await,
        409,
        "module propose",
    );
    refused(
        client::activate_module(&api, &v2, Mode::Live).await,
        409,
        "already the active",
    );
    let no_token =
        Target::url(&format!("http://{}", nodes[1].admin_addr().unwrap()), None).unwrap();
    refused(
        client::activate_module(&no_token, &v1, Mode::Live).await,
        401,
        "Authorization",
    );
    refused(
        client::rollback_module(&no_token, Kind::GossipPolicy).await,
        401,
        "Authorization",
    );
    assert_eq!(
        modules.kind_status(Kind::GossipPolicy).active.hash.to_hex(),
        v2
    );
    for node in nodes {
        node.shutdown().await;
    }
}

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

/// A gossip message that has travelled `hops` hops, as the engine asks the policy about it.
fn relayed(hops: u32) -> (MessageMeta, Vec<PeerStats>) {
    let meta = MessageMeta {
        kind: MessageKind::Deposit,
        size: 600,
        local_origin: false,
        hops,
        network_size: 8,
    };
    let peers = (0..6)
        .map(|peer| PeerStats {
            peer,
            rtt_us: 1_000 + peer * 500,
            queue_depth: 0,
            recent_failures: 0,
            has_message: false,
            is_origin: peer == 0,
        })
        .collect();
    (meta, peers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_commands_upload_activate_roll_back_and_show_the_circuit_breaker() {
    let tmp: Vec<TempDir> = (0..2).map(|_| TempDir::new().unwrap()).collect();
    let nodes = network("modnode-it-module-cli", &tmp, 2).await;
    let data = tmp[0].path().to_str().unwrap();
    let url = format!("http://{}", nodes[0].admin_addr().unwrap());

    // Upload warms the module on the plans the node made for its real blocks.
    let trap = modnode::artifacts::path("fixture-policy-trap");
    let (ok, out, err) = modnode(&[
        "module",
        "upload",
        "--json",
        "--data-dir",
        data,
        trap.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let uploaded: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(uploaded["status"], "ready");
    assert!(
        uploaded["module"]["warm_real_inputs"].as_u64().unwrap() > 0,
        "{uploaded}"
    );
    let hash = uploaded["module"]["sha256"].as_str().unwrap().to_string();
    assert!(!err.contains("warning"), "{err}");
    // A copy still describing itself as a module the node holds (the walkthrough's policy
    // says gossip-policy v3, the built-in's name) is stored, with a warning naming the other.
    let copied = modnode::artifacts::path("example-gossip-policy-custom");
    let (ok, _, err) = modnode(&[
        "module",
        "upload",
        "--data-dir",
        data,
        copied.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let builtin_v3 = modnode::artifacts::embedded("gossip-policy-v3").unwrap();
    let builtin_v3 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(builtin_v3));
    assert!(
        err.contains("warning") && err.contains("gossip-policy-v3") && err.contains(&builtin_v3),
        "{err}"
    );

    // Without the token the node refuses and nothing changes.
    let (ok, _, err) = modnode(&[
        "module", "activate", &hash, "--canary", "50", "--node", &url,
    ]);
    assert!(!ok);
    assert!(err.contains("HTTP 401"), "{err}");
    assert!(
        nodes[0]
            .modules()
            .kind_status(Kind::GossipPolicy)
            .canary
            .is_none()
    );
    let (ok, _, err) = modnode(&["module", "rollback", "gossip-policy", "--node", &url]);
    assert!(!ok);
    assert!(err.contains("HTTP 401"), "{err}");

    let (ok, out, err) = modnode(&[
        "module",
        "activate",
        &hash,
        "--canary",
        "50",
        "--data-dir",
        data,
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("is now canary 50%"), "{out}");

    // Far-relayed messages make the fixture trap. Every plan still succeeds (the active
    // version serves a failed canary call) and the breaker rolls the canary back.
    let mut policy = nodes[0].modules().gossip_policy();
    for _ in 0..20 {
        let (meta, peers) = relayed(5);
        let plan = policy.plan(&meta, &peers);
        assert!(!plan.targets.is_empty(), "a plan call failed");
    }
    let (ok, out, err) = modnode(&["module", "list", "--data-dir", data]);
    assert!(ok, "{err}");
    assert!(out.contains("1 automatic rollbacks"), "{out}");
    assert!(
        out.contains("(canary 50%) after 3 faults") && out.contains("unreachable"),
        "{out}"
    );
    assert!(!out.contains("  canary:"), "the canary is gone: {out}");
    assert!(out.contains("from admin upload from 127.0.0.1"), "{out}");
    // Each version shows the contract it runs on: both gossip-policy contracts side by side.
    assert!(
        out.contains(" on modnode:gossip-policy@1.0.0 (warm-up"),
        "the active policy's contract: {out}"
    );
    assert!(
        out.contains("gossip-policy-v2@")
            && out.contains(" on modnode:gossip-policy@2.0.0 sha256 "),
        "the built-in stateful policy is ready on @2.0.0: {out}"
    );
    assert!(out.contains(" on modnode:deposits@2.0.0"), "{out}");

    // Live and back again through the CLI; the deposits kind is refused with the way to go.
    let v1 = hash_of("gossip-policy-v1");
    let (ok, out, err) = modnode(&["module", "activate", &v1, "--data-dir", data]);
    assert!(ok, "{err}");
    assert!(out.contains("is now live"), "{out}");
    assert!(out.contains("previous:  gossip-policy-v2@"), "{out}");
    let (ok, out, err) = modnode(&["module", "rollback", "gossip-policy", "--data-dir", data]);
    assert!(ok, "{err}");
    assert!(out.contains("rolled back to gossip-policy-v2@"), "{out}");
    let (ok, _, err) = modnode(&["module", "rollback", "deposits", "--data-dir", data]);
    assert!(!ok);
    assert!(
        err.contains("HTTP 409") && err.contains("module propose"),
        "{err}"
    );
    let (ok, _, err) = modnode(&["module", "activate", "12ab", "--data-dir", data]);
    assert!(!ok);
    assert!(
        err.contains("64 hex digits") && err.contains("12ab"),
        "{err}"
    );
    for node in nodes {
        node.shutdown().await;
    }
}

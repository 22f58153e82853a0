//! On-chain upgrades on a devnet over real QUIC: authorities vote an upgrade of the deposits
//! module into their blocks; one alone cannot schedule it, a majority does; every node switches
//! at the height with identical blocks; a node started after the height range-syncs through it;
//! a node that cannot get the module stops at the height and resumes once a peer serves it; a
//! peer asking for modules in a loop gets a bounded share and is banned; a `modnode run`
//! process killed around the height restarts onto the canonical chain.
//!
//! Waits are liveness bounds (generous, polled), not performance targets.

use std::path::Path;

use modnode::admin::client::{self, Target};
use modnode::chain::genesis::Genesis;
use modnode::hashes::ModuleHash;
use modnode::node::Node;
use modnode::runtime::Kind;
use tempfile::TempDir;

use super::artifact;
use super::devnet::{RunProcess, height, process_reaches, propose, same_block_at, sha, start_all};
use super::network::{
    LIVENESS, SLOT_MS, closed_for_violation, dirs, eventually, genesis, genesis_hash, genesis_json,
    raw_peer, start,
};

/// A devnet genesis whose first `authorities` of `dirs` produce, running `deposits-v1` from
/// genesis.
fn upgrade_genesis(chain_id: &str, dirs: &[&Path], authorities: usize) -> Genesis {
    let mut g = genesis(chain_id, dirs, authorities);
    g.deposits_module = Some(sha(&artifact("deposits-v1")).0);
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authority_votes_schedule_deposits_v2_and_every_node_switches_at_the_height() {
    let tmp = dirs(4);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let genesis = upgrade_genesis("modnode-it-upgrade", &paths, 3);
    let lead = genesis.upgrade_lead_blocks;
    let v1 = sha(&artifact("deposits-v1"));
    let v2 = sha(&artifact("deposits-v2"));
    let nodes = start_all(&paths[..3], &genesis).await;
    eventually("three authorities at height 2", || {
        nodes.iter().all(|n| height(n) >= 2)
    })
    .await;

    // One authority of three votes alone: its votes are recorded, never a majority, and they
    // expire once the lead is reached.
    let alone = height(&nodes[0]) + lead + 8;
    propose(paths[0], &v2, alone).await;
    eventually("authority 0's vote in the state", || {
        nodes[1]
            .upgrades()
            .schedule()
            .pending
            .iter()
            .any(|p| p.op.height == alone && p.voters == vec![0])
    })
    .await;
    eventually("the lone vote's deadline passing", || {
        nodes.iter().all(|n| height(n) >= alone - lead)
    })
    .await;
    for node in &nodes {
        let schedule = node.upgrades().schedule();
        assert_eq!(schedule.module_at(Kind::Deposits, alone + 100), Some(v1));
        assert!(schedule.pending.iter().all(|p| p.op.height != alone));
    }

    // Two of three: scheduled everywhere, reported ready before the height.
    let h = height(&nodes[0]) + lead + 8;
    propose(paths[0], &v2, h).await;
    propose(paths[1], &v2, h).await;
    eventually("v2 scheduled at H on every node", || {
        nodes
            .iter()
            .all(|n| n.upgrades().schedule().module_at(Kind::Deposits, h) == Some(v2))
    })
    .await;
    assert!(
        height(&nodes[2]) < h,
        "scheduled too late to test readiness"
    );
    let target = Target::data_dir(paths[2]).unwrap();
    // Polled until the readiness arrives or the height passes (the entry is then "active"
    // and the assertions below say so), not for a fixed 5 s that a loaded machine outlasts.
    let deadline = tokio::time::Instant::now() + LIVENESS;
    let mut listing = client::modules(&target).await.unwrap();
    while listing["scheduled"][0]["authorities_ready"] != 3
        && listing["scheduled"][0]["height"] == h
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        listing = client::modules(&target).await.unwrap();
    }
    let entry = &listing["scheduled"][0];
    assert_eq!(entry["sha256"], hex::encode(v2), "{listing}");
    assert_eq!(entry["height"], h, "{listing}");
    assert_eq!(entry["ready_here"], true, "{listing}");
    assert_eq!(entry["authorities_ready"], 3, "{listing}");

    // Every node crosses H on the same blocks (same state roots).
    eventually("every node past H", || {
        nodes.iter().all(|n| height(n) >= h + 2)
    })
    .await;
    let refs: Vec<&Node> = nodes.iter().collect();
    for at in [h - 1, h, h + 1] {
        same_block_at(&refs, at).await;
    }

    // A node started after H range-syncs from genesis through H with the right versions.
    let late = start(paths[3], &genesis, vec![nodes[2].peer_addr().unwrap()]).await;
    let goal = height(&nodes[0]) + 1;
    eventually("the late node past H", || height(&late) >= goal).await;
    assert_eq!(
        late.upgrades().schedule().module_at(Kind::Deposits, h),
        Some(v2)
    );
    same_block_at(&[&nodes[0], &late], h + 1).await;
    late.shutdown().await;
    for node in nodes {
        node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_module_stops_at_the_height_and_resumes_once_a_peer_serves_it() {
    let tmp = dirs(3);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let genesis = upgrade_genesis("modnode-it-upgrade-fetch", &paths, 2);
    let lead = genesis.upgrade_lead_blocks;
    // A module no node embeds: only the authorities get it, by upload.
    let fixture = artifact("fixture-deposits-linear-scan");
    let module = sha(&fixture);
    let nodes = start_all(&paths, &genesis).await;
    let (authorities, follower) = nodes.split_at(2);
    let follower = &follower[0];
    for (dir, node) in paths.iter().zip(authorities) {
        client::upload_module(&Target::data_dir(dir).unwrap(), fixture.clone())
            .await
            .unwrap();
        // Nobody serves module bytes for now.
        node.upgrades().set_serving(false);
    }
    eventually("every node at height 2", || {
        nodes.iter().all(|n| height(n) >= 2)
    })
    .await;
    let h = height(&nodes[0]) + lead + 6;
    for dir in &paths[..2] {
        propose(dir, &module, h).await;
    }
    eventually("the fixture scheduled on the follower", || {
        follower.upgrades().schedule().module_at(Kind::Deposits, h) == Some(module)
    })
    .await;
    // The follower cannot get the module: it stops right below H while the authorities go on.
    eventually("the authorities past H and the follower at H - 1", || {
        authorities.iter().all(|n| height(n) >= h + 3) && height(follower) >= h - 1
    })
    .await;
    assert_eq!(
        height(follower),
        h - 1,
        "the follower went past H without the module"
    );
    assert!(follower.upgrades().missing().contains(&module));
    assert!(!follower.upgrades().is_ready(&module));

    // A peer serves it: the follower fetches, verifies, compiles, warms and resumes.
    authorities[0].upgrades().set_serving(true);
    let goal = height(&authorities[0]) + 1;
    eventually("the follower resuming past H", || height(follower) >= goal).await;
    assert!(follower.upgrades().is_ready(&module));
    let refs: Vec<&Node> = nodes.iter().collect();
    same_block_at(&refs, h).await;
    same_block_at(&refs, h + 1).await;

    // Restarted past H, the follower finds the fetched module in its own store (nobody serves
    // it now) and goes on.
    authorities[0].upgrades().set_serving(false);
    let mut nodes = nodes;
    let follower = nodes.pop().unwrap();
    follower.shutdown().await;
    let follower = start(paths[2], &genesis, vec![nodes[0].peer_addr().unwrap()]).await;
    assert!(height(&follower) >= h);
    assert_eq!(
        follower.upgrades().schedule().module_at(Kind::Deposits, h),
        Some(module)
    );
    let goal = height(&nodes[0]) + 2;
    eventually("the restarted follower going on", || {
        height(&follower) >= goal
    })
    .await;
    assert!(follower.upgrades().is_ready(&module));
    follower.shutdown().await;
    for node in nodes {
        node.shutdown().await;
    }
}

/// One module request on a new stream of `conn`: the bytes if served, `None` if answered "not
/// here", an error if the stream or connection broke.
async fn ask_module(conn: &quinn::Connection, hash: ModuleHash) -> Result<Option<Vec<u8>>, String> {
    use modnode::net::{codec, rpc};
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let request = rpc::Request::Module { hash };
    let (t, p) = request.encode();
    codec::write_frame(&mut send, t, &p, 64)
        .await
        .map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    let frame = codec::read_frame(&mut recv, 1 << 22)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no answer")?;
    match rpc::Response::decode(&request, frame.msg_type, &frame.payload) {
        Ok(rpc::Response::Module(bytes)) => Ok(bytes),
        other => Err(format!("not a module answer: {other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_requesting_modules_in_a_loop_gets_a_bounded_share_and_is_banned() {
    let tmp = dirs(1);
    let genesis = upgrade_genesis("modnode-it-module-flood", &[tmp[0].path()], 1);
    let node = start(tmp[0].path(), &genesis, vec![]).await;
    eventually("the node producing", || height(&node) >= 1).await;
    let v1 = artifact("deposits-v1");
    let conn = raw_peer(&node, &genesis, genesis_hash(&node).await).await;
    eventually("the raw peer counted", || node.status().peers == 1).await;

    // A request alone is answered with the module.
    let started = std::time::Instant::now();
    let alone = ask_module(&conn, sha(&v1)).await.unwrap();
    assert_eq!(alone.as_ref(), Some(&v1));

    // Then 40 at once, as fast as QUIC carries them.
    let mut served = 1u64;
    let asks: Vec<_> = (0..40)
        .map(|_| {
            let conn = conn.clone();
            let hash = sha(&v1);
            tokio::spawn(async move { ask_module(&conn, hash).await })
        })
        .collect();
    for ask in asks {
        if let Ok(Some(bytes)) = ask.await.unwrap() {
            assert_eq!(bytes, v1, "served bytes are the module");
            served += 1;
        }
    }
    // One request in flight per peer, a burst of 4 then one a second: never all 40.
    let allowed = 4 + started.elapsed().as_secs();
    assert!(
        served <= allowed,
        "{served} of 41 served, at most {allowed} allowed"
    );
    // Asking on past the refusals is a violation: disconnected (and banned). Under load the
    // node's CONNECTION_CLOSE can be lost among the answers flooding loopback; the peer then
    // learns of the close only from the stateless reset its next packets get once the node has
    // forgotten the connection, so a reset counts too (the violation is checked on the node).
    let closed = tokio::time::timeout(LIVENESS, conn.closed()).await.unwrap();
    assert!(
        closed_for_violation(&closed) || closed == quinn::ConnectionError::Reset,
        "{closed:?}"
    );
    assert!(
        node.metrics()
            .peer_violations
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    eventually("the peer gone", || node.status().peers == 0).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_process_killed_around_the_activation_height_restarts_onto_the_canonical_chain() {
    use rand::{Rng, SeedableRng};
    let tmp = dirs(3);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let mut json = genesis_json("modnode-it-upgrade-kill", &paths, 2, 32, 8);
    json["deposits_module"] = hex::encode(sha(&artifact("deposits-v1"))).into();
    let genesis = Genesis::from_json(&json.to_string(), "<test>").unwrap();
    let genesis_file = paths[2].join("genesis.json");
    std::fs::write(&genesis_file, json.to_string()).unwrap();
    let v2 = sha(&artifact("deposits-v2"));
    let nodes = start_all(&paths[..2], &genesis).await;
    let bootstrap = nodes[1].peer_addr().unwrap().to_string();

    // The follower process joins and syncs; then both authorities vote deposits-v2 in at H.
    let process = RunProcess::start(paths[2], &genesis_file, &bootstrap);
    process_reaches(paths[2], 2, "the process syncing").await;
    let h = height(&nodes[0]) + genesis.upgrade_lead_blocks + 8;
    for dir in &paths[..2] {
        propose(dir, &v2, h).await;
    }

    // SIGKILL somewhere between importing H - 1 and a slot later (around importing H).
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x4b1d);
    process_reaches(paths[2], h - 1, "the process at H - 1").await;
    let delay = rng.random_range(0..SLOT_MS);
    tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    process.kill();

    // Restarted, it replays from its store, rejoins and goes past H with the network.
    let process = RunProcess::start(paths[2], &genesis_file, &bootstrap);
    let goal = height(&nodes[0]).max(h) + 3;
    process_reaches(paths[2], goal, "the restarted process past H").await;
    let target = Target::data_dir(paths[2]).unwrap();
    let listing = client::modules(&target).await.unwrap();
    let deposits = listing["kinds"]
        .as_array()
        .and_then(|k| k.iter().find(|k| k["kind"] == "deposits"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        deposits["slot"]["active"]["hash"],
        hex::encode(v2),
        "{listing}"
    );
    let status = process.interrupt();
    assert!(
        status.success(),
        "the restarted process exited with {status}"
    );

    // Its stored chain is the authorities' chain through H (no fork), scheduled alike.
    let chain = modnode::node::open_chain(paths[2], genesis.clone()).unwrap();
    assert!(chain.head().height >= goal);
    assert_eq!(chain.schedule().module_at(Kind::Deposits, h), Some(v2));
    for at in [h - 1, h, h + 1, goal] {
        let theirs = nodes[0].chain().blocks(at, 1, usize::MAX).await.unwrap();
        let ours = chain.block_at(at).unwrap().map(|b| b.encode());
        assert_eq!(ours.as_ref(), theirs.first(), "block at height {at}");
    }
    drop(chain);
    for node in nodes {
        node.shutdown().await;
    }
}

/// Runs the `modnode` binary; returns (success, stdout, stderr).
async fn modnode_cli(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_modnode"))
            .args(&args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_propose_and_list_from_the_command_line() {
    let tmp = dirs(1);
    let dir = tmp[0].path();
    // One authority: its vote alone is the majority.
    let genesis = genesis("modnode-it-propose-cli", &[dir], 1);
    let node = start(dir, &genesis, vec![]).await;
    eventually("the node producing", || height(&node) >= 1).await;
    let v1 = hex::encode(sha(&artifact("deposits-v1")));
    let data_dir = dir.display().to_string();
    let propose = |module: &str, at: u64| {
        vec![
            "module".to_string(),
            "propose".into(),
            module.to_string(),
            "--kind".into(),
            "deposits".into(),
            "--activate-at".into(),
            at.to_string(),
            "--data-dir".into(),
            data_dir.clone(),
        ]
    };
    // `module list`, which must succeed; its output.
    let list = || async {
        let (ok, out, err) = modnode_cli(vec![
            "module".into(),
            "list".into(),
            "--data-dir".into(),
            data_dir.clone(),
        ])
        .await;
        assert!(ok, "{err}");
        out
    };
    // Refusals name the reason and exit non-zero.
    let unknown = hex::encode([0x42; 32]);
    let (ok, _, err) = modnode_cli(propose(&unknown, height(&node) + 50)).await;
    assert!(!ok && err.contains("not stored"), "{err}");
    let (ok, _, err) = modnode_cli(propose(&v1, height(&node) + 1)).await;
    assert!(!ok && err.contains("too late"), "{err}");
    // A module of another kind under `--kind deposits` is refused, naming both kinds (it was
    // scheduled before, and the chain halted at its height).
    let policy = hex::encode(sha(&artifact("gossip-policy-v2")));
    let (ok, _, err) = modnode_cli(propose(&policy, height(&node) + 50)).await;
    assert!(
        !ok && err.contains("is a gossip-policy module, not a deposits module"),
        "{err}"
    );
    assert!(node.upgrades().schedule().pending.is_empty());
    // Parked near u64::MAX: refused.
    let (ok, _, err) = modnode_cli(propose(&v1, u64::MAX - 1)).await;
    assert!(!ok && err.contains("too far"), "{err}");

    // A revocation before the gate removes a scheduled upgrade, and the listing says so.
    let revoked = height(&node) + genesis.upgrade_lead_blocks + 40;
    let (ok, _, err) = modnode_cli(propose(&v1, revoked)).await;
    assert!(ok, "{err}");
    eventually("the upgrade to revoke scheduled", || {
        node.upgrades()
            .schedule()
            .upcoming(0)
            .any(|e| e.height == revoked)
    })
    .await;
    let (ok, _, err) = modnode_cli(vec![
        "module".into(),
        "revoke".into(),
        v1.clone(),
        "--height".into(),
        revoked.to_string(),
        "--data-dir".into(),
        data_dir.clone(),
    ])
    .await;
    assert!(ok, "{err}");
    eventually("the upgrade revoked", || {
        node.upgrades().schedule().dropped.iter().any(|d| {
            d.op.height == revoked && d.reason == modnode::state::schedule::DropReason::Cancelled
        })
    })
    .await;
    let out = list().await;
    assert!(
        out.contains(&format!(
            "dropped:   deposits {v1} at height {revoked} (cancelled"
        )),
        "{out}"
    );

    // H leaves room for three command-line runs on a loaded machine (40 slots of 300 ms); the
    // listing's "before H" lines are asserted only when the node was still below H after it
    // answered, so a slow machine cannot make a correct listing fail the test.
    let h = height(&node) + genesis.upgrade_lead_blocks + 40;
    let (ok, out, err) = modnode_cli(propose(&v1, h)).await;
    assert!(ok, "{err}");
    assert!(out.contains("proposed"), "{out}");
    eventually("deposits-v1 scheduled", || {
        node.upgrades().schedule().module_at(Kind::Deposits, h)
            == Some(sha(&artifact("deposits-v1")))
    })
    .await;
    let out = list().await;
    let below_h = height(&node) < h;
    assert!(
        !below_h
            || out.contains(&format!(
                "scheduled: {v1} at height {h} (peers ready: 0, authorities ready: 1)"
            )),
        "{out}"
    );
    assert!(!below_h || out.contains("active:    deposits-v2@"), "{out}");
    // From H on, the chain runs deposits-v1, and the listing says so.
    eventually("the node past H", || height(&node) >= h).await;
    let out = list().await;
    assert!(out.contains("active:    deposits-v1@"), "{out}");
    assert!(!out.contains("scheduled:"), "{out}");
    node.shutdown().await;
}

//! deposits@3 rolled out on a devnet over real QUIC: the authorities vote the switch from
//! deposits-v2 to deposits-v3 at height H while deposits keep arriving through the dev deposit
//! contract. Before H a deposit is applied in the block that carries it; from H on it is
//! queued and applied by an epoch transition once final. Every deposit is applied exactly once
//! on every node and every node holds the same blocks and state roots at every height — through
//! a `modnode run` process SIGKILLed at H, one SIGKILLed in an epoch transition after H, a node
//! range-synced from genesis after H, and a reorganisation across H and an epoch boundary.
//!
//! Every node is read through its admin API (`/blocks`, `/state`), processes and in-process
//! nodes alike. Waits are liveness bounds (generous, polled), not performance targets.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use modnode::admin::client::{self, Target};
use modnode::chain::block::{Block, DepositData};
use modnode::chain::genesis::Genesis;
use modnode::chain::workload;
use modnode::deposit_source::client::RpcClient;
use modnode::node::{DepositSourceConfig, Node};
use modnode::runtime::Kind;
use serde_json::Value;
use tempfile::TempDir;

use super::artifact;
use super::devnet::{
    RunProcess, height, process_reaches, process_status, propose, sha, share_module_cache,
};
use super::network::{
    LIVENESS, SLOT_MS, dirs, eventually, genesis_json, hosting, start, start_with,
};

const ETH: u64 = 1_000_000_000;
/// Slots per epoch of the devnets: an epoch transition every 1.2 s.
pub(super) const SLOTS_PER_EPOCH: u64 = 4;
/// Validators in the genesis.
pub(super) const GENESIS_VALIDATORS: u64 = 8;
/// Blocks between the lead before H and the height the authorities vote from: their votes
/// must be in blocks before H - lead even when a loaded machine lets slots pass without blocks.
pub(super) const VOTE_MARGIN: u64 = 16;
/// How often the depositor sends a deposit: ~8 per epoch, averaging 14 ETH, so the churn limit
/// of this small chain (128 ETH per epoch) drains the queue as fast as it fills.
const DEPOSIT_EVERY: Duration = Duration::from_millis(150);

/// A genesis whose first `authorities` of `dirs` produce, running deposits-v2 from genesis,
/// with epochs of [`SLOTS_PER_EPOCH`] and `finality` (in blocks) as the depth at which a
/// queued deposit becomes final; and its JSON (for `modnode run` processes).
pub(super) fn v3_genesis(
    chain_id: &str,
    dirs: &[&Path],
    authorities: usize,
    finality: u64,
    edit: impl FnOnce(&mut Value),
) -> (Genesis, Value) {
    let validators = u32::try_from(GENESIS_VALIDATORS).unwrap();
    let mut json = genesis_json(chain_id, dirs, authorities, finality, validators);
    json["slots_per_epoch"] = SLOTS_PER_EPOCH.into();
    json["deposits_module"] = hex::encode(sha(&artifact("deposits-v2"))).into();
    edit(&mut json);
    let genesis = Genesis::from_json(&json.to_string(), "<test>").unwrap();
    (genesis, json)
}

/// The `i`-th deposit of a test: a new validator (its own key) of 8 ETH, every fourth of
/// 32 ETH (so the churn limit is sometimes reached and its remainder carried).
fn deposit(i: u64, fork: [u8; 4]) -> DepositData {
    let amount = if i % 4 == 3 { 32 * ETH } else { 8 * ETH };
    workload::new_validator(50_000 + i, amount, fork)
}

/// Sends a deposit to the dev deposit contract every [`DEPOSIT_EVERY`] until stopped.
pub(super) struct Depositor {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<DepositData>>,
}

impl Depositor {
    pub(super) fn start(url: &str, fork: [u8; 4]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let contract = RpcClient::new(url).unwrap();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut sent = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                let index = sent.len() as u64;
                let d = deposit(index, fork);
                assert_eq!(contract.submit_deposit(&d).await.unwrap(), index);
                sent.push(d);
                // Pacing of the load, not a wait for a condition.
                tokio::time::sleep(DEPOSIT_EVERY).await;
            }
            sent
        });
        Self { stop, task }
    }

    /// Stops sending; every deposit sent, in contract index order.
    pub(super) async fn stop(self) -> Vec<DepositData> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// Polls the asynchronous `check` until it holds (`Ok`); panics with `what` and the last
/// reason it gave (`Err`) after [`LIVENESS`].
pub(super) async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + LIVENESS;
    while let Err(why) = check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}; last: {why}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /state?{query}` on the node of `dir`, or why it did not answer.
pub(super) async fn try_state(dir: &Path, query: &str) -> Result<Value, String> {
    let target = Target::data_dir(dir).map_err(|e| e.to_string())?;
    client::state(&target, query)
        .await
        .map_err(|e| e.to_string())
}

/// `GET /state?{query}` on the node of `dir`, asked again while it does not answer (a process
/// restarting, a query shed while the node catches up).
pub(super) async fn state(dir: &Path, query: &str) -> Value {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        match try_state(dir, query).await {
            Ok(answer) => return answer,
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "GET /state?{query} on {}: {e}",
                dir.display()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The canonical blocks 0..=`to` of the node on `dir` as `/blocks` lists them (height, hash,
/// slot, state root).
async fn chain_of(dir: &Path, to: u64) -> Vec<Value> {
    blocks_of(dir, 0, to).await
}

/// The canonical blocks `first..=to` of the node on `dir` as `/blocks` lists them (height,
/// hash, slot, state root).
pub(super) async fn blocks_of(dir: &Path, first: u64, to: u64) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let deadline = tokio::time::Instant::now() + LIVENESS;
    while first + (out.len() as u64) <= to {
        let from = first + out.len() as u64;
        let page = match Target::data_dir(dir) {
            Ok(target) => client::blocks(&target, from, to + 1 - from)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let page = page.and_then(|page| match page["blocks"].as_array() {
            Some(blocks) if !blocks.is_empty() => Ok(blocks.clone()),
            _ => Err(format!("no block at height {from}: {page}")),
        });
        match page {
            Ok(blocks) => out.extend(blocks),
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "GET /blocks on {}: {e}",
                    dir.display()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    out
}

/// A number field of a JSON answer.
pub(super) fn num(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

/// Asserts that every node of `dirs` holds the same canonical blocks — hash, slot and state
/// root — at every height from genesis to `to`; returns them.
async fn same_chain(dirs: &[&Path], to: u64) -> Vec<Value> {
    let first = chain_of(dirs[0], to).await;
    for dir in &dirs[1..] {
        let theirs = chain_of(dir, to).await;
        for (ours, theirs) in first.iter().zip(&theirs) {
            assert_eq!(ours, theirs, "{} and {}", dirs[0].display(), dir.display());
        }
    }
    first
}

/// Waits until every node in `paths` has applied all `n` deposits (the queue drained).
pub(super) async fn every_deposit_applied(paths: &[&Path], n: u64) {
    until(
        "every deposit applied on every node and the queue drained",
        || async move {
            for dir in paths {
                let s = try_state(dir, "").await?;
                let done = num(&s, "eth1_deposit_index") == n
                    && num(&s, "pending_deposits") == 0
                    && num(&s, "validators") == GENESIS_VALIDATORS + n;
                if !done {
                    return Err(format!("{n} deposits; {}: {s}", dir.display()));
                }
            }
            Ok(())
        },
    )
    .await;
}

/// The lowest head height among the nodes in `paths`.
pub(super) async fn common_height(paths: &[&Path]) -> u64 {
    let mut top = u64::MAX;
    for dir in paths {
        top = top.min(num(&state(dir, "").await, "height"));
    }
    top
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuous_deposits_across_the_switch_to_deposits_v3_apply_once_everywhere_through_kills_and_a_late_sync()
 {
    use rand::{Rng, SeedableRng};
    const FINALITY: u64 = 4;
    let tmp = dirs(5);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let (genesis, json) = v3_genesis("modnode-it-v3-devnet", &paths, 2, FINALITY, |_| {});
    let genesis_file = paths[2].join("genesis.json");
    std::fs::write(&genesis_file, json.to_string()).unwrap();
    let fork = genesis.genesis_fork_version;
    let v3 = sha(&artifact("deposits-v3"));

    // Two authorities (node 0 hosts the dev deposit contract, node 1 follows it) and two
    // `modnode run` followers.
    let a0 = start_with(paths[0], &genesis, vec![], hosting()).await;
    share_module_cache(paths[0], &paths[1..]);
    let url = a0.deposit_contract_url().unwrap().to_string();
    let a1 = start_with(
        paths[1],
        &genesis,
        vec![a0.peer_addr().unwrap()],
        DepositSourceConfig::follow_dev(url.clone()),
    )
    .await;
    let boot2 = a1.peer_addr().unwrap().to_string();
    let boot3 = a0.peer_addr().unwrap().to_string();
    let p2 = RunProcess::start(paths[2], &genesis_file, &boot2);
    let p3 = RunProcess::start(paths[3], &genesis_file, &boot3);
    process_reaches(paths[2], 2, "process 2 syncing").await;
    process_reaches(paths[3], 2, "process 3 syncing").await;

    // Deposits from now on; some applied under deposits-v2, then the switch is voted in.
    let depositor = Depositor::start(&url, fork);
    eventually("deposits applied under deposits-v2", || {
        a0.status().deposit_index >= 3
    })
    .await;
    let h = height(&a0) + genesis.upgrade_lead_blocks + VOTE_MARGIN;
    for dir in &paths[..2] {
        propose(dir, &v3, h).await;
    }
    let authorities = [&a0, &a1];
    until(
        "deposits-v3 scheduled at H on both authorities",
        || async move {
            for node in authorities {
                let schedule = node.upgrades().schedule();
                if schedule.module_at(Kind::Deposits, h) != Some(v3) {
                    return Err(format!("H = {h}, {:?}: {schedule:?}", node.status()));
                }
            }
            Ok(())
        },
    )
    .await;

    // SIGKILL of process 2 somewhere between importing H - 1 and a slot later.
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7633);
    process_reaches(paths[2], h - 1, "process 2 at H - 1").await;
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..SLOT_MS))).await;
    p2.kill();
    let p2 = RunProcess::start(paths[2], &genesis_file, &boot2);

    // SIGKILL of process 3 in the first epoch transition that can apply deposits queued from H
    // on (a block at H + FINALITY or later): once its head is in the last slot of an epoch at
    // H + FINALITY - 1 or later, in the first half of the next slot — when the epoch's first
    // block is produced and imported.
    let deadline = tokio::time::Instant::now() + LIVENESS;
    let epoch_slot = loop {
        let status = process_status(paths[3]).await.unwrap_or_default();
        if let (Some(at), Some(slot)) = (status["height"].as_u64(), status["slot"].as_u64())
            && at + 1 >= h + FINALITY
            && (slot + 1) % SLOTS_PER_EPOCH == 0
        {
            break slot + 1;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "process 3 never reached the last slot of an epoch after H"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let kill_at =
        genesis.genesis_time_ms + epoch_slot * genesis.slot_ms + rng.random_range(0..SLOT_MS / 2);
    let wait = kill_at.saturating_sub(modnode::clock::unix_ms());
    tokio::time::sleep(Duration::from_millis(wait)).await;
    p3.kill();
    let p3 = RunProcess::start(paths[3], &genesis_file, &boot3);

    // A node started from genesis now range-syncs through H and the epochs after it.
    eventually("the chain past that epoch transition", || {
        height(&a0) >= h + FINALITY
    })
    .await;
    let late = start(paths[4], &genesis, vec![a1.peer_addr().unwrap()]).await;
    let goal = height(&a0);
    eventually("the late node synced past H", || height(&late) >= goal).await;
    assert!(
        late.metrics()
            .blocks_synced
            .load(std::sync::atomic::Ordering::Relaxed)
            >= h,
        "the late node range-synced through H"
    );
    for dir in &paths[2..4] {
        process_reaches(dir, goal, "a restarted process catching up").await;
    }

    // The deposits stop; every node applies each of them once the queue drains.
    let deposits = depositor.stop().await;
    let n = deposits.len() as u64;
    every_deposit_applied(&paths, n).await;

    // The same blocks and state roots at every height on every node.
    let top = common_height(&paths).await;
    let blocks = same_chain(&paths, top).await;

    // Before H each deposit is applied by the block carrying it; from H on it is queued and
    // the registry changes only in epoch transitions, every deposit consumed being either a
    // validator or queued.
    let mut queued_after_h = false;
    let mut previous = state(paths[0], "height=0").await;
    for at in 1..=top {
        let s = state(paths[0], &format!("height={at}")).await;
        let (validators, index, pending) = (
            num(&s, "validators"),
            num(&s, "eth1_deposit_index"),
            num(&s, "pending_deposits"),
        );
        if at < h {
            assert_eq!(pending, 0, "height {at}: {s}");
            assert_eq!(validators, GENESIS_VALIDATORS + index, "height {at}: {s}");
        } else {
            assert_eq!(
                validators + pending,
                GENESIS_VALIDATORS + index,
                "height {at}: {s}"
            );
            let epoch = genesis.starts_epoch(
                num(&blocks[at as usize - 1], "slot"),
                num(&blocks[at as usize], "slot"),
            );
            if !epoch {
                assert_eq!(
                    validators,
                    num(&previous, "validators"),
                    "height {at} is no epoch transition: {s}"
                );
            }
            queued_after_h |= pending > 0;
        }
        previous = s;
    }
    assert!(queued_after_h, "no deposit went through the queue");
    let before_h = num(
        &state(paths[0], &format!("height={}", h - 1)).await,
        "eth1_deposit_index",
    );
    assert!(
        before_h >= 3 && n > before_h,
        "{before_h} of {n} deposits before H"
    );

    // Each deposit exactly once on every node: its validator, with its amount as balance.
    let genesis_sum: u128 = state(paths[0], "height=0").await["balance_sum_gwei"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let deposited: u128 = deposits.iter().map(|d| u128::from(d.amount)).sum();
    for dir in &paths {
        let head = state(dir, "").await;
        assert_eq!(
            head["balance_sum_gwei"],
            (genesis_sum + deposited).to_string(),
            "{}",
            dir.display()
        );
        for d in &deposits {
            let s = state(dir, &format!("pubkey=0x{}", hex::encode(d.pubkey))).await;
            assert_eq!(
                s["validator"]["balance"],
                d.amount,
                "{}: {s}",
                dir.display()
            );
        }
    }

    drop((p2, p3));
    late.shutdown().await;
    a1.shutdown().await;
    a0.shutdown().await;
}

/// The blocks of `node` from `from` to its head, decoded.
async fn blocks_from(node: &Node, from: u64) -> Vec<Block> {
    let count = height(node).saturating_sub(from) + 1;
    node.chain()
        .blocks(from, count, usize::MAX)
        .await
        .unwrap()
        .iter()
        .map(|b| Block::decode(b, 16).unwrap())
        .collect()
}

/// Whether the canonical chain of `node` runs an epoch transition at a height of at least
/// `at` (a block whose slot is in a later epoch than its parent's).
async fn epoch_transition_from(node: &Node, genesis: &Genesis, at: u64) -> bool {
    let blocks = blocks_from(node, at.saturating_sub(1)).await;
    blocks
        .windows(2)
        .any(|w| genesis.starts_epoch(w[0].header.slot, w[1].header.slot))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_across_the_switch_to_deposits_v3_and_an_epoch_boundary_ends_on_one_chain_and_one_queue()
 {
    const FINALITY: u64 = 2;
    let tmp = dirs(4);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    // One deposit per block, so a burst of deposits is still being included, one by one, when
    // the authorities are cut apart and when the chain crosses H.
    let (genesis, _) = v3_genesis("modnode-it-v3-reorg", &paths, 3, FINALITY, |json| {
        json["max_deposits_per_block"] = 1.into();
    });
    let fork = genesis.genesis_fork_version;
    let lead = genesis.upgrade_lead_blocks;
    let v3 = sha(&artifact("deposits-v3"));
    let a = start_with(paths[0], &genesis, vec![], hosting()).await;
    share_module_cache(paths[0], &paths[1..]);
    let url = a.deposit_contract_url().unwrap().to_string();
    let follow = || DepositSourceConfig::follow_dev(url.clone());
    let b = start_with(paths[1], &genesis, vec![a.peer_addr().unwrap()], follow()).await;
    let c = start_with(paths[2], &genesis, vec![b.peer_addr().unwrap()], follow()).await;
    eventually("three authorities at height 2", || {
        [&a, &b, &c].iter().all(|n| height(n) >= 2)
    })
    .await;

    // Two of three authorities vote deposits-v3 in at H; a burst of deposits follows.
    let h = height(&a) + lead + VOTE_MARGIN;
    for dir in &paths[..2] {
        propose(dir, &v3, h).await;
    }
    let contract = RpcClient::new(&url).unwrap();
    for i in 0..12 {
        assert_eq!(contract.submit_deposit(&deposit(i, fork)).await.unwrap(), i);
    }
    // Authority 2 is cut off once its chain has passed the readiness gate (H - lead) with
    // deposits-v3 still scheduled, so its own branch switches at H too: restarted on a new port
    // with no peers, nobody can reach it.
    eventually("authority 2 past the readiness gate", || {
        height(&c) >= h - lead
    })
    .await;
    let schedule = c.upgrades().schedule();
    assert_eq!(
        schedule.module_at(Kind::Deposits, h),
        Some(v3),
        "H = {h}: {schedule:?}"
    );
    c.shutdown().await;
    let c = start_with(paths[2], &genesis, vec![], follow()).await;
    let cut = height(&c);
    assert!(
        cut < h,
        "authority 2 was cut off at {cut}, not below H = {h}"
    );
    // More deposits during the cut: only the majority adopts the contract's new checkpoint.
    for i in 12..16 {
        assert_eq!(contract.submit_deposit(&deposit(i, fork)).await.unwrap(), i);
    }

    // Both sides cross H and an epoch transition at which deposits queued at H are final.
    let genesis = &genesis;
    for (node, side) in [(&a, "the majority's branch"), (&c, "authority 2's branch")] {
        until(
            &format!("{side} past an epoch transition after H"),
            || async move {
                let past = height(node) >= h + FINALITY
                    && epoch_transition_from(node, genesis, h + FINALITY).await;
                past.then_some(())
                    .ok_or_else(|| format!("H = {h}, {:?}", node.status()))
            },
        )
        .await;
    }
    let ours_at_h = blocks_from(&c, h).await[0].hash();
    let theirs_at_h = blocks_from(&a, h).await[0].hash();
    assert_ne!(ours_at_h, theirs_at_h, "the branches split below H");

    // A follower that knows both sides joins them: authority 2 reorganises onto the majority's
    // longer chain, across H and the epoch transitions of its own branch.
    let d = start(
        paths[3],
        genesis,
        vec![a.peer_addr().unwrap(), c.peer_addr().unwrap()],
    )
    .await;
    let nodes = [&a, &b, &c, &d];
    until("one chain on every node, past the fork", || async move {
        let statuses: Vec<_> = nodes.iter().map(|n| n.status()).collect();
        let why = || format!("H = {h}, {statuses:?}");
        let top = nodes.iter().map(|n| height(n)).min().unwrap();
        if top <= h + FINALITY + 1 {
            return Err(why());
        }
        let at = top - 1;
        let first = nodes[0].chain().blocks(at, 1, usize::MAX).await.unwrap();
        for node in &nodes[1..] {
            if node.chain().blocks(at, 1, usize::MAX).await.unwrap() != first {
                return Err(format!("not one block at {at}: {}", why()));
            }
        }
        // Authority 2 holds the majority's block at H.
        let at_h = blocks_from(nodes[2], h).await.first().map(Block::hash);
        (at_h == Some(theirs_at_h))
            .then_some(())
            .ok_or_else(|| format!("authority 2 on its own branch at H: {}", why()))
    })
    .await;
    assert!(c.status().reorgs >= 1, "authority 2 left its own branch");

    // The same blocks and state roots everywhere, and at the common height the same state:
    // registry, deposit index and queue.
    let top = nodes.iter().map(|n| height(n)).min().unwrap();
    same_chain(&paths, top).await;
    let query = format!("height={top}");
    let reference = state(paths[0], &query).await;
    for dir in &paths[1..] {
        assert_eq!(state(dir, &query).await, reference, "{}", dir.display());
    }
    // The chain kept queued deposits from H on: the last of the 16 cannot all fit in the
    // blocks between their submission and H, one deposit per block.
    let mut queued_after_h = false;
    for at in h..=top {
        let s = state(paths[0], &format!("height={at}")).await;
        assert_eq!(
            num(&s, "validators") + num(&s, "pending_deposits"),
            GENESIS_VALIDATORS + num(&s, "eth1_deposit_index"),
            "height {at}: {s}"
        );
        queued_after_h |= num(&s, "pending_deposits") > 0;
    }
    assert!(queued_after_h, "no deposit went through the queue");

    for node in [d, c, b, a] {
        node.shutdown().await;
    }
}

//! The driver against the dev contract over HTTP on loopback: a reorg deeper than the follow
//! distance while the node is down, the deposit log deleted as the halt says, the endpoint's
//! chain id and code, and a provider's range limit. Waits poll a condition with a deadline.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tempfile::TempDir;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::*;
use crate::chain::block::DepositData;
use crate::chain::eth1::{
    DepositProofs, DepositProofsError, Eth1Data, ProvenDeposit, empty_deposit_root,
};
use crate::clock::unix_ms;
use crate::deposit_source::SourceError;
use crate::deposit_source::cache::DepositCache;
use crate::deposit_source::dev_contract::{DEV_CONTRACT_ADDRESS, DevContract};
use crate::deposit_source::follower::Followed;
use crate::deposit_source::server;

const DEADLINE: Duration = Duration::from_secs(30);
const DISTANCE: u64 = 2;

/// A dev contract served on loopback; the test keeps a handle on the contract itself (the reorg
/// hook is not reachable over JSON-RPC).
struct Dev {
    contract: Arc<Mutex<DevContract>>,
    url: String,
    _stop: watch::Sender<bool>,
    _dir: TempDir,
}

async fn dev(block_ms: u64) -> Dev {
    let dir = TempDir::new().unwrap();
    let contract = DevContract::open(dir.path(), block_ms, unix_ms()).unwrap();
    let contract = Arc::new(Mutex::new(contract));
    let (listener, addr) = server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(server::serve(listener, contract.clone(), stopped));
    Dev {
        contract,
        url: format!("http://{addr}"),
        _stop: stop,
        _dir: dir,
    }
}

impl Dev {
    fn deposit(&self, deposit: DepositData) -> u64 {
        let logged = self
            .contract
            .lock()
            .unwrap()
            .deposit(deposit, unix_ms())
            .unwrap();
        logged.block
    }

    fn config(&self) -> FollowerConfig {
        let mut config = FollowerConfig::new(self.url.clone(), DEV_CONTRACT_ADDRESS);
        config.follow_distance = DISTANCE;
        config.poll_interval = Duration::from_millis(20);
        config
    }
}

/// A follower running like a node's: the source restored from the log at `dir`, then `run`.
struct Running {
    source: Arc<DepositSource>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Opens the log at `dir` and restores a source from it, as `Node::start` does.
fn restore(dir: &Path) -> (FollowedLog, Arc<DepositSource>) {
    let (log, restored) = FollowedLog::open(dir, DEV_CONTRACT_ADDRESS).unwrap();
    let source = Arc::new(DepositSource::new());
    if let Some(restored) = restored {
        source.append(restored);
    }
    (log, source)
}

fn start(config: FollowerConfig, log: FollowedLog, source: Arc<DepositSource>) -> Running {
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run(config, source.clone(), Some(log), stopped));
    Running { source, stop, task }
}

impl Running {
    /// Stops the follower and waits until it dropped the log (the node is down).
    async fn stop(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap();
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn deposit(i: u8) -> DepositData {
    DepositData {
        pubkey: [i; 48],
        withdrawal_credentials: [i; 32],
        amount: 32_000_000_000,
        signature: [i; 96],
    }
}

/// What the chain agreed after applying `deposits` (the root over them, their count).
fn agreed_over(deposits: &[DepositData]) -> Eth1Data {
    let mut cache = DepositCache::new();
    for d in deposits {
        cache.push(*d).unwrap();
    }
    Eth1Data {
        deposit_root: cache.root(),
        deposit_count: deposits.len() as u64,
        block_hash: [0xab; 32],
    }
}

fn followed_count(source: &DepositSource) -> Option<u64> {
    source.followed().map(|(_, count)| count)
}

/// Follows `d0` into a log at `log_dir`, stops the node, and reorganises the dev contract's
/// blocks from `d0`'s block to the head — deeper than the follow distance — replacing `d0` with
/// `replacement`.
async fn follow_then_reorg_while_down(dev: &Dev, log_dir: &Path, replacement: DepositData) {
    let d0_block = dev.deposit(deposit(0));
    let (log, source) = restore(log_dir);
    let node = start(dev.config(), log, source);
    eventually("the deposit followed", || {
        followed_count(&node.source) == Some(1)
    })
    .await;
    let own = node.source.choose_vote(agreed_over(&[]), &[]);
    assert_eq!(
        own.deposit_count, 1,
        "a confirmed source votes what it followed"
    );
    let (followed, _) = node.source.followed().unwrap();
    node.stop().await;

    let mut contract = dev.contract.lock().unwrap();
    let head = contract.head(unix_ms());
    assert!(followed.number >= d0_block && head >= followed.number + DISTANCE);
    let depth = head - d0_block + 1;
    assert!(
        depth > DISTANCE,
        "the reorg is deeper than the follow distance"
    );
    let reorged = contract.reorg(depth, vec![replacement], unix_ms()).unwrap();
    assert_eq!(reorged.dropped, vec![deposit(0)]);
    assert_ne!(
        contract.block(followed.number, unix_ms()).unwrap().hash,
        followed.hash,
        "the followed block is reorganised"
    );
}

/// A deposit followed at block B, reorganised out deeper than the follow
/// distance while the node was down. On restart the source must not vote for the reorged-out
/// block nor prove the deposit — not before the follower has looked, not after — and it halts
/// saying exactly what to do. (Before: the restored log was voted and proven at once, and the
/// follower only logged the reorg.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposit_reorged_out_while_the_node_was_down_is_neither_voted_nor_proven() {
    let dev = dev(20).await;
    let data = TempDir::new().unwrap();
    let log_dir = data.path().join("deposit-log");
    follow_then_reorg_while_down(&dev, &log_dir, deposit(9)).await;

    // Restart: the restored log still holds deposit 0 at the reorged-out block.
    let (log, source) = restore(&log_dir);
    assert_eq!(followed_count(&source), Some(1));
    let agreed = agreed_over(&[]);
    let refused = |source: &DepositSource| {
        assert_eq!(
            source.choose_vote(agreed, &[]),
            agreed,
            "no vote for the reorged-out block"
        );
        assert!(matches!(
            source.proven_deposits(0, 1, 1),
            Err(DepositProofsError::Unavailable(_))
        ));
        assert!(source.eth1_vote().is_err());
    };
    // Before the follower has confirmed the restored log (the 0.6 s of the report).
    refused(&source);
    assert!(matches!(
        source.check_agreed(&agreed),
        Err(SourceError::Unconfirmed { .. })
    ));

    let node = start(dev.config(), log, source);
    eventually("the source halted", || node.source.halted().is_some()).await;
    let reason = node.source.halted().unwrap();
    for needle in [
        "reorganised block",
        "deeper than the follow distance",
        "delete",
        log_dir.to_str().unwrap(),
        "start it again",
        "follow distance (now 2 blocks)",
    ] {
        assert!(reason.contains(needle), "{needle:?} not in: {reason}");
    }
    refused(&node.source);
    let Err(DepositProofsError::Unavailable(why)) = node.source.proven_deposits(0, 1, 1) else {
        panic!("a halted source proved a deposit");
    };
    assert!(why.contains("halted") && why.contains("delete"), "{why}");
    // The contract moves on: the halted source still votes nothing of its own.
    dev.deposit(deposit(2));
    let head = dev.contract.lock().unwrap().head(unix_ms());
    eventually("the contract's head moved past the new deposit", || {
        dev.contract.lock().unwrap().head(unix_ms()) > head + DISTANCE
    })
    .await;
    refused(&node.source);
    assert_eq!(followed_count(&node.source), Some(1));
    node.stop().await;
}

/// The printed remedy — delete the deposit log — makes the follower read the contract again.
/// When the chain had already applied the reorged-out deposit, the new log gives another root
/// at the chain's count: the source must not vote a root of its own on top of it (nor join
/// another authority's), and says why. (Before: it voted its new root as soon as the count
/// had not gone down, and later deposits were accepted against it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_log_is_deleted_a_root_inconsistent_with_applied_deposits_is_never_voted() {
    let dev = dev(20).await;
    let data = TempDir::new().unwrap();
    let log_dir = data.path().join("deposit-log");
    follow_then_reorg_while_down(&dev, &log_dir, deposit(9)).await;
    // The chain applied deposit 0 before the reorg.
    let applied = agreed_over(&[deposit(0)]);

    std::fs::remove_dir_all(&log_dir).unwrap();
    let (log, source) = restore(&log_dir);
    assert_eq!(followed_count(&source), None);
    let node = start(dev.config(), log, source);
    dev.deposit(deposit(3));
    eventually("the new log followed", || {
        followed_count(&node.source) == Some(2)
    })
    .await;
    let source = &node.source;
    assert_eq!(source.choose_vote(applied, &[]), applied);
    let ours = source.eth1_vote().unwrap().unwrap();
    let theirs = Eth1Data {
        deposit_root: ours.deposit_root,
        deposit_count: ours.deposit_count,
        block_hash: ours.block_hash,
    };
    assert_eq!(
        source.choose_vote(applied, &[theirs, theirs]),
        applied,
        "another authority's vote on the new log is not joined either"
    );
    let err = source.check_agreed(&applied).unwrap_err();
    assert!(matches!(err, SourceError::Inconsistent { count: 1, .. }));
    let text = err.to_string();
    for needle in [
        "disagrees with the chain",
        &hex::encode(applied.deposit_root),
        "authorities must agree",
    ] {
        assert!(text.contains(needle), "{needle:?} not in: {text}");
    }
    assert!(matches!(
        source.check_root(&applied),
        Err(DepositProofsError::RootMismatch {
            deposit_count: 1,
            ..
        })
    ));
    // A chain that agreed the contract's current log is voted on as before.
    let consistent = agreed_over(&[deposit(9)]);
    assert_eq!(
        source.check_agreed(&consistent).map_err(|e| e.to_string()),
        Ok(())
    );
    assert_eq!(source.choose_vote(consistent, &[]).deposit_count, 2);
    source.check_root(&consistent).unwrap();
    let proven: Vec<ProvenDeposit> = source.proven_deposits(1, 1, 2).unwrap();
    assert_eq!(proven[0].data, deposit(3));
    node.stop().await;
}

/// Restarting on a log the contract still has: confirmed by the first poll, then voted on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_log_the_source_still_has_is_confirmed_and_voted() {
    let dev = dev(20).await;
    let data = TempDir::new().unwrap();
    let log_dir = data.path().join("deposit-log");
    dev.deposit(deposit(0));
    let (log, source) = restore(&log_dir);
    let node = start(dev.config(), log, source);
    eventually("followed", || followed_count(&node.source) == Some(1)).await;
    node.stop().await;

    let (log, source) = restore(&log_dir);
    assert!(!source.is_confirmed());
    let node = start(dev.config(), log, source);
    eventually("confirmed", || node.source.is_confirmed()).await;
    assert_eq!(node.source.halted(), None);
    let agreed = agreed_over(&[]);
    assert_eq!(node.source.choose_vote(agreed, &[]).deposit_count, 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_must_serve_the_configured_chain_and_hold_the_contract() {
    let dev = dev(20).await;
    let client = RpcClient::new(&dev.url).unwrap();
    check_endpoint(&client, &dev.config()).await.unwrap();

    let mut mainnet = dev.config();
    mainnet.chain_id = 1;
    let err = check_endpoint(&client, &mainnet).await.unwrap_err();
    assert!(
        matches!(
            err,
            StartError::WrongChain {
                expected: 1,
                actual: 1337,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_transient());
    assert!(err.to_string().contains("--eth1-chain-id"), "{err}");

    let mut elsewhere = dev.config();
    elsewhere.contract = [0x11; 20];
    let err = check_endpoint(&client, &elsewhere).await.unwrap_err();
    assert!(matches!(err, StartError::NoContract { .. }), "{err}");
    assert!(err.to_string().contains(&"11".repeat(20)), "{err}");
    assert!(err.to_string().contains("--deposit-contract"), "{err}");
}

/// A follower on the wrong chain never follows, so a restored log is never confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_on_the_wrong_chain_follows_nothing() {
    let dev = dev(20).await;
    dev.deposit(deposit(0));
    let data = TempDir::new().unwrap();
    let (log, source) = restore(&data.path().join("deposit-log"));
    let mut config = dev.config();
    config.chain_id = 1;
    let wrong = start(config, log, source);
    // A right follower on another log shows the contract's deposit is followable by now.
    let (log, source) = restore(&data.path().join("other-log"));
    let right = start(dev.config(), log, source);
    eventually("followed by the right follower", || {
        followed_count(&right.source) == Some(1)
    })
    .await;
    assert_eq!(followed_count(&wrong.source), None);
    right.stop().await;
    wrong.stop().await;
}

/// A provider limiting `eth_getLogs` ranges: the follower halves its page on the refusal
/// (before: the same range was retried forever and nothing was followed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_limited_provider_is_followed_with_smaller_pages() {
    let dev = dev(2).await;
    dev.contract.lock().unwrap().set_log_block_range(3);
    let mut deposits = Vec::new();
    for i in 0..4u8 {
        dev.deposit(deposit(i));
        deposits.push(deposit(i));
        let head = dev.contract.lock().unwrap().head(unix_ms());
        eventually("a few blocks between deposits", || {
            dev.contract.lock().unwrap().head(unix_ms()) >= head + 5
        })
        .await;
    }
    let head = dev.contract.lock().unwrap().head(unix_ms());
    assert!(head > 20);
    let client = RpcClient::new(&dev.url).unwrap();
    let mut config = dev.config();
    config.max_blocks_per_query = 1_000;
    let mut follower = Follower::new(&config);
    let source = DepositSource::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut smallest = follower.page();
    while follower.last().is_none_or(|b| b.number + DISTANCE < head) {
        assert!(tokio::time::Instant::now() < deadline, "not followed");
        poll_once(&client, &mut follower, &source, None)
            .await
            .unwrap();
        smallest = smallest.min(follower.page());
    }
    assert!(smallest <= 3, "page never shrank: {smallest}");
    assert_eq!(followed_count(&source), Some(4));
    for (i, d) in deposits.iter().enumerate() {
        assert_eq!(source.proven_deposits(i as u64, 1, 4).unwrap()[0].data, *d);
    }
}

/// The check the adaptive page rests on: which provider errors are range limits.
#[test]
fn range_limit_errors_are_recognised_and_others_are_not() {
    let rpc = |code: i64, message: &str| ClientError::Rpc {
        url: "http://x".into(),
        method: "eth_getLogs".into(),
        code,
        message: message.into(),
    };
    for (code, message) in [
        (-32005, "anything"),
        (-32000, "query returned more than 10000 results"),
        (
            -32602,
            "Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range",
        ),
        (-32000, "exceed maximum block range: 5000"),
        (-32600, "eth_getLogs is limited to a 10,000 range"),
        (-32000, "block range is too wide"),
    ] {
        assert!(rpc(code, message).is_range_limit(), "{code} {message}");
    }
    assert!(!rpc(-32601, "method not found").is_range_limit());
    assert!(!rpc(-32000, "header not found").is_range_limit());
    let timeout = ClientError::Timeout {
        url: "http://x".into(),
        method: "eth_getLogs".into(),
        seconds: 10,
    };
    assert!(!timeout.is_range_limit());
}

/// `Followed` is what the log restores: keep the helper honest about its shape.
#[test]
fn a_restored_source_is_unconfirmed_until_the_follower_confirms_it() {
    let source = DepositSource::new();
    source.append(Followed {
        deposits: vec![deposit(0)],
        first_index: 0,
        block: crate::deposit_source::dev_contract::Eth1Block {
            number: 5,
            hash: [5; 32],
            parent_hash: [4; 32],
            timestamp: 5,
        },
        deposit_count: 1,
    });
    let agreed = Eth1Data {
        deposit_root: empty_deposit_root(),
        deposit_count: 0,
        block_hash: [0; 32],
    };
    assert_eq!(source.choose_vote(agreed, &[]), agreed);
    source.confirm();
    assert_eq!(source.choose_vote(agreed, &[]).deposit_count, 1);
    source.halt("reorg; delete the log".into());
    source.confirm();
    assert_eq!(source.choose_vote(agreed, &[]), agreed);
    assert!(source.halted().unwrap().contains("delete the log"));
}

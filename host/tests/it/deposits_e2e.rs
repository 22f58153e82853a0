//! Deposits end to end over real QUIC on loopback: the dev deposit contract hosted by node 0,
//! followed over JSON-RPC by the authorities, proven into blocks, applied by every node in index
//! order; gossiped deposits change nothing; restarts of the source and of an authority lose no
//! deposit; a contract reorganised under applied deposits while the node was down is neither
//! followed nor voted on.
//!
//! Waits are liveness bounds (generous, polled), not performance targets.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;

use modnode::chain::block::{Block, DepositData};
use modnode::chain::workload;
use modnode::deposit_source::client::RpcClient;
use modnode::deposit_source::dev_contract::{DEV_CONTRACT_ADDRESS, DevContract};
use modnode::deposit_source::log::FollowedLog;
use modnode::node::{DepositSourceConfig, Node};
use modnode_gossip::policy::MessageKind;
use tempfile::TempDir;

use super::hostile::quic::{block_at, closed_for_violation, hello, loopback, push, raw_peer};
use super::network::{LIVENESS, eventually, genesis, hosting, start_with};

const GWEI_32_ETH: u64 = 32_000_000_000;

/// Every deposit the canonical chain of `node` carries, in block order.
async fn included(node: &Node, max_deposits: u16) -> Vec<DepositData> {
    let height = node.status().height;
    let mut out = Vec::new();
    for encoded in node.chain().blocks(1, height, usize::MAX).await.unwrap() {
        let block = Block::decode(&encoded, max_deposits).unwrap();
        out.extend(block.body.deposits.iter().map(|d| d.data));
    }
    out
}

/// Sum of the balances in `dir`'s stored head state (the node must be stopped).
fn total_balance(dir: &Path, genesis: &modnode::chain::genesis::Genesis) -> u128 {
    let chain = modnode::node::open_chain(dir, genesis.clone()).unwrap();
    let registry = chain.registry();
    let registry = &*registry;
    registry.balances().iter().map(|&b| u128::from(b)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_deposits_reach_every_node_in_index_order_across_restarts() {
    let tmp: Vec<TempDir> = (0..3).map(|_| TempDir::new().unwrap()).collect();
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let genesis = genesis("modnode-it-deposits", &paths, 2);
    let fork = genesis.genesis_fork_version;
    let max = genesis.max_deposits_per_block;
    let n0 = start_with(paths[0], &genesis, vec![], hosting()).await;
    let url = n0.deposit_contract_url().unwrap().to_string();
    assert_eq!(
        std::fs::read_to_string(paths[0].join(modnode::node::DEPOSIT_CONTRACT_URL_FILE)).unwrap(),
        url
    );
    let n1 = start_with(
        paths[1],
        &genesis,
        vec![n0.peer_addr().unwrap()],
        DepositSourceConfig::follow_dev(url.clone()),
    )
    .await;
    // A non-authority configured with a source runs none, and still applies every deposit.
    let n2 = start_with(
        paths[2],
        &genesis,
        vec![n1.peer_addr().unwrap()],
        DepositSourceConfig::follow_dev(url.clone()),
    )
    .await;
    assert!(n1.deposit_source().is_some() && n2.deposit_source().is_none());

    let contract = RpcClient::new(&url).unwrap();
    let mut deposits: Vec<DepositData> = (0..3)
        .map(|seed| workload::new_validator(500 + seed, GWEI_32_ETH, fork))
        .collect();
    // An invalid signature gets into the log (the contract does not check it): the module
    // skips it, and the deposits after it still apply.
    let mut forged = workload::new_validator(600, GWEI_32_ETH, fork);
    forged.signature = deposits[0].signature;
    deposits.insert(1, forged);
    for (i, d) in deposits.iter().enumerate() {
        assert_eq!(contract.submit_deposit(d).await.unwrap(), i as u64);
    }
    let before = genesis.validators.len() as u32;
    eventually("4 deposits applied by every node", || {
        [&n0, &n1, &n2]
            .iter()
            .all(|n| n.status().deposit_index == 4 && n.status().validators == before + 3)
    })
    .await;
    for node in [&n0, &n1, &n2] {
        assert_eq!(included(node, max).await, deposits, "index order");
    }

    // Node 0 — the deposit source and an authority — stops; while it is down nothing can be
    // deposited. Restarted on the same port and data, its contract has every deposit.
    let addr: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    n0.shutdown().await;
    let late = workload::new_validator(700, GWEI_32_ETH, fork);
    assert!(
        contract.submit_deposit(&late).await.is_err(),
        "the source is down"
    );
    // Restarted nodes listen on new ports: they dial both others (node 2 learned the old
    // addresses, and a node never dials an address it only saw inbound).
    let n0 = start_with(
        paths[0],
        &genesis,
        vec![n1.peer_addr().unwrap(), n2.peer_addr().unwrap()],
        DepositSourceConfig::dev(addr),
    )
    .await;
    assert_eq!(
        contract.submit_deposit(&late).await.unwrap(),
        4,
        "no deposit lost"
    );
    deposits.push(late);
    // The other authority restarts too: its follower reads the log again from the contract.
    n1.shutdown().await;
    let n1 = start_with(
        paths[1],
        &genesis,
        vec![n0.peer_addr().unwrap(), n2.peer_addr().unwrap()],
        DepositSourceConfig::follow_dev(url.clone()),
    )
    .await;
    let top_up = DepositData {
        amount: 2_000_000_000,
        ..deposits[0]
    };
    assert_eq!(contract.submit_deposit(&top_up).await.unwrap(), 5);
    deposits.push(top_up);
    eventually(
        "the deposits after the restarts applied by every node",
        || {
            [&n0, &n1, &n2]
                .iter()
                .all(|n| n.status().deposit_index == 6 && n.status().validators == before + 4)
        },
    )
    .await;
    for node in [&n0, &n1, &n2] {
        assert_eq!(included(node, max).await, deposits, "index order");
    }
    for node in [n2, n1, n0] {
        node.shutdown().await;
    }
    // Each authority's follower recorded the log it read, to follow on from after a restart;
    // the non-authority follows nothing.
    for dir in &paths[..2] {
        let (_, restored) = FollowedLog::open(
            &dir.join(modnode::node::DEPOSIT_LOG_DIR),
            DEV_CONTRACT_ADDRESS,
        )
        .unwrap();
        assert_eq!(restored.unwrap().deposits, deposits);
    }
    assert!(!paths[2].join(modnode::node::DEPOSIT_LOG_DIR).exists());
    // Every valid deposit applied exactly once: genesis plus 3 + 1 new validators and a top-up.
    let genesis_total: u128 = genesis
        .validators
        .iter()
        .map(|v| u128::from(v.balance))
        .sum();
    for dir in &paths {
        assert_eq!(
            total_balance(dir, &genesis),
            genesis_total + 4 * u128::from(GWEI_32_ETH) + 2_000_000_000
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossiped_deposits_change_nothing_and_honest_ones_still_get_in() {
    let tmp = TempDir::new().unwrap();
    let genesis = genesis("modnode-it-gossiped-deposits", &[tmp.path()], 1);
    let fork = genesis.genesis_fork_version;
    let node = start_with(tmp.path(), &genesis, vec![], hosting()).await;
    let contract = RpcClient::new(node.deposit_contract_url().unwrap()).unwrap();
    let first = workload::new_validator(800, GWEI_32_ETH, fork);
    contract.submit_deposit(&first).await.unwrap();
    eventually("the first deposit applied", || {
        node.status().deposit_index == 1
    })
    .await;
    let genesis_hash = block_at(&node, 0).await.hash().to_bytes();

    // Peers gossip a forged new validator, a replay of the applied deposit, and a top-up of
    // u64::MAX Gwei for a genesis validator: each is a protocol violation.
    let mut forged = workload::new_validator(801, GWEI_32_ETH, fork);
    forged.signature = [0; 96];
    let top_up = DepositData {
        pubkey: genesis.validators[0].pubkey,
        withdrawal_credentials: [0; 32],
        amount: u64::MAX,
        signature: [0; 96],
    };
    for d in [&forged, &first, &top_up] {
        let me = modnode::net::identity::NodeIdentity::generate().unwrap();
        let (_ep, conn) = raw_peer(&node, &me, loopback(), &hello(&genesis, genesis_hash, 0))
            .await
            .unwrap();
        push(&conn, MessageKind::Deposit, d.encode()).await;
        let closed = tokio::time::timeout(LIVENESS, conn.closed())
            .await
            .expect("a gossiped deposit went unpunished");
        assert!(closed_for_violation(&closed), "{closed:?}");
    }
    assert_eq!(node.metrics().peer_violations.load(Ordering::Relaxed), 3);

    // An honest deposit through the contract still gets in, and nothing else did.
    let honest = workload::new_validator(802, GWEI_32_ETH, fork);
    contract.submit_deposit(&honest).await.unwrap();
    let before = genesis.validators.len() as u32;
    eventually("the honest deposit applied", || {
        node.status().deposit_index == 2
    })
    .await;
    let height = node.status().height;
    eventually("a few more blocks", || node.status().height >= height + 3).await;
    assert_eq!(node.status().deposit_index, 2);
    assert_eq!(node.status().validators, before + 2);
    assert_eq!(
        included(&node, genesis.max_deposits_per_block).await,
        vec![first, honest]
    );
    node.shutdown().await;

    // Balances: genesis plus the two contract deposits, not a Gwei more.
    let genesis_total: u128 = genesis
        .validators
        .iter()
        .map(|v| u128::from(v.balance))
        .sum();
    assert_eq!(
        total_balance(tmp.path(), &genesis),
        genesis_total + 2 * u128::from(GWEI_32_ETH)
    );
}

/// A followed deposit reorganised out, end to end on one authority hosting the dev contract:
/// deposit 0 applied, then (node down) the contract reorganises it away deeper than the follow
/// distance and puts another deposit in its place. Restarted, the node halts its source and says to
/// delete the deposit log; done, the follower reads the new log — whose root at the chain's count
/// is not the chain's — and the node must not vote it in: a later deposit is followed but never
/// applied. (Before: the node voted the new root and applied the later deposit on top of a deposit
/// the contract no longer has.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_reorganised_under_applied_deposits_is_not_voted_on() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    let genesis = genesis("modnode-it-deposit-reorg", &[dir], 1);
    let fork = genesis.genesis_fork_version;
    let node = start_with(dir, &genesis, vec![], hosting()).await;
    let contract = RpcClient::new(node.deposit_contract_url().unwrap()).unwrap();
    let applied = workload::new_validator(900, GWEI_32_ETH, fork);
    contract.submit_deposit(&applied).await.unwrap();
    eventually("deposit 0 applied", || node.status().deposit_index == 1).await;
    node.shutdown().await;

    // While the node is down: the contract's blocks from deposit 0's on are replaced.
    let contract_dir = dir.join("deposit-contract");
    let replacement = workload::new_validator(901, GWEI_32_ETH, fork);
    {
        let now = modnode::clock::unix_ms();
        let mut dev = DevContract::open(&contract_dir, 100, now).unwrap();
        let head = dev.head(now);
        let logged = dev.logs(0, head, 10, now).unwrap();
        assert_eq!(logged.len(), 1);
        let reorged = dev
            .reorg(head - logged[0].block + 1, vec![replacement], now)
            .unwrap();
        assert_eq!(reorged.dropped, vec![applied]);
    }
    let node = start_with(dir, &genesis, vec![], hosting()).await;
    let source = node.deposit_source().unwrap().clone();
    eventually("the source halted", || source.halted().is_some()).await;
    let halted = source.halted().unwrap();
    let log_dir = dir.join(modnode::node::DEPOSIT_LOG_DIR);
    assert!(
        halted.contains(&format!("delete {}", log_dir.display())),
        "{halted}"
    );
    node.shutdown().await;

    // The operator does what the halt says.
    std::fs::remove_dir_all(&log_dir).unwrap();
    let node = start_with(dir, &genesis, vec![], hosting()).await;
    let contract = RpcClient::new(node.deposit_contract_url().unwrap()).unwrap();
    let later = workload::new_validator(902, GWEI_32_ETH, fork);
    assert_eq!(contract.submit_deposit(&later).await.unwrap(), 1);
    let source = node.deposit_source().unwrap().clone();
    eventually("the new log followed", || {
        source.followed().is_some_and(|(_, count)| count == 2)
    })
    .await;
    // Blocks produced after the source knew the later deposit: each would have voted it in.
    let height = node.status().height;
    eventually("a few blocks produced", || {
        node.status().height >= height + 4
    })
    .await;
    assert_eq!(
        node.status().deposit_index,
        1,
        "nothing applied on the new log"
    );
    assert_eq!(source.halted(), None);
    assert_eq!(
        included(&node, genesis.max_deposits_per_block).await,
        vec![applied]
    );
    node.shutdown().await;
}

//! `modnode testnet init`: the files it writes, and the command lines it prints run a network.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::cli::KillOnDrop;

fn init(dir: &Path, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args([
            "testnet",
            "init",
            "--nodes",
            "3",
            "--authorities",
            "2",
            "--dir",
        ])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The printed `modnode run …` lines, split into arguments (the temp paths hold no spaces).
fn command_lines(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

fn flag<'a>(args: &'a [String], name: &str) -> Vec<&'a str> {
    args.windows(2)
        .filter(|w| w[0] == name)
        .map(|w| w[1].as_str())
        .collect()
}

#[test]
fn init_writes_keys_and_genesis_and_prints_one_command_per_machine() {
    let dir = tempfile::tempdir().unwrap();
    let net = dir.path().join("net");
    let (ok, out, err) = init(
        &net,
        &["--host-of", "1=10.0.0.2", "--host-of", "2=10.0.0.3"],
    );
    assert!(ok, "{err}");
    let lines = command_lines(&out);
    assert_eq!(lines.len(), 3, "{out}");
    let genesis: serde_json::Value =
        serde_json::from_slice(&std::fs::read(net.join("genesis.json")).unwrap()).unwrap();
    let authorities = genesis["authorities"].as_array().unwrap();
    assert_eq!(authorities.len(), 2);
    for (i, args) in lines.iter().enumerate() {
        assert_eq!(&args[..2], ["modnode", "run"], "{out}");
        let data_dir = net.join(format!("node-{i}"));
        assert_eq!(flag(args, "--data-dir"), [data_dir.to_str().unwrap()]);
        assert!(
            data_dir
                .join(modnode::net::identity::KEY_FILE_NAME)
                .exists()
        );
        let genesis_copy = flag(args, "--genesis")[0];
        assert_eq!(
            std::fs::read(genesis_copy).unwrap(),
            std::fs::read(net.join("genesis.json")).unwrap()
        );
        let ip = ["127.0.0.1", "10.0.0.2", "10.0.0.3"][i];
        assert_eq!(flag(args, "--listen"), [format!("{ip}:94{i}0")]);
        assert_eq!(flag(args, "--bootstrap").len(), 2, "{out}");
        if i == 0 {
            assert_eq!(flag(args, "--dev-contract-listen"), ["127.0.0.1:9402"]);
        } else {
            assert_eq!(flag(args, "--eth1-endpoint"), ["http://127.0.0.1:9402"]);
        }
        // Every other node's line bootstraps from this one's id at its listen address.
        let me = format!(
            "{}@{}",
            if i < 2 {
                authorities[i].as_str().unwrap().to_string()
            } else {
                let peers: Vec<&str> = flag(&lines[0], "--bootstrap");
                peers[1].split('@').next().unwrap().to_string()
            },
            flag(args, "--listen")[0]
        );
        for (j, other) in lines.iter().enumerate().filter(|(j, _)| *j != i) {
            assert!(
                flag(other, "--bootstrap").contains(&me.as_str()),
                "node {j} does not bootstrap from {me}:\n{out}"
            );
        }
    }

    let (ok, _, err) = init(&net, &[]);
    assert!(!ok && err.contains("already exists"), "{err}");
    let (ok, _, err) = init(&dir.path().join("x"), &["--host-of", "5=10.0.0.9"]);
    assert!(!ok && err.contains("--host-of 5"), "{err}");
}

/// Three free consecutive blocks of ports for a base port (probed; another process could take
/// one in between, which the node would then report).
fn free_base_port() -> u16 {
    let start = 20_000 + (std::process::id() % 400) as u16 * 100;
    (0..400u16)
        .map(|k| 20_000 + (start - 20_000 + k * 100) % 40_000)
        .find(|base| {
            (0..3u16).all(|i| {
                let p = base + 10 * i;
                std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok()
                    && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok()
                    && std::net::TcpListener::bind(("127.0.0.1", p + 2)).is_ok()
            })
        })
        .expect("no free ports")
}

/// The printed command lines, run as they are, make a network: the follower (node 2) imports
/// the authorities' blocks from its peers.
#[test]
fn the_printed_commands_start_a_network_that_makes_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let net = dir.path().join("net");
    let base = free_base_port().to_string();
    let (ok, out, err) = init(
        &net,
        &[
            "--base-port",
            &base,
            "--slot-ms",
            "500",
            "--start-in-secs",
            "0",
        ],
    );
    assert!(ok, "{err}");
    let mut children = Vec::new();
    for (i, args) in command_lines(&out).into_iter().enumerate() {
        let log = std::fs::File::create(dir.path().join(format!("node-{i}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_modnode"))
            .args(&args[1..])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        children.push(KillOnDrop(child));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let follower = net.join("node-2");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = rt.block_on(modnode::admin::client::status(&follower)).ok();
        let height = status
            .as_ref()
            .and_then(|s| s["height"].as_u64())
            .unwrap_or(0);
        let peers = status
            .as_ref()
            .and_then(|s| s["peers"].as_u64())
            .unwrap_or(0);
        if height >= 3 && peers == 2 {
            break;
        }
        if Instant::now() > deadline {
            let logs: String = (0..3)
                .map(|i| {
                    std::fs::read_to_string(dir.path().join(format!("node-{i}.log")))
                        .unwrap_or_default()
                })
                .collect();
            panic!("follower at height {height} with {peers} peers:\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for child in &mut children {
        assert!(child.0.try_wait().unwrap().is_none(), "a node exited");
    }
}

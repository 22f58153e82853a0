//! The `modnode` binary's commands, end to end.

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
    assert_eq!(v["contract"], "modnode:deposits@2.0.0");
    assert_eq!(v["module_version"], 2);
    assert_eq!(v["size"], std::fs::metadata(&path).unwrap().len());
    assert_eq!(v["sha256"].as_str().unwrap().len(), 64);
    assert!(
        v["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == "modnode:deposits/crypto@2.0.0")
    );
}

/// A copied module that still describes itself as a built-in version (the walkthrough's policy
/// says gossip-policy v3) is told so: two different modules would show under one name.
#[test]
fn inspect_warns_when_a_module_takes_a_built_in_modules_name() {
    let copied = modnode::artifacts::path("example-gossip-policy-custom");
    let (ok, out, err) = modnode(&["module", "inspect", copied.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("gossip-policy-v3"), "{out}");
    assert!(
        err.contains("warning") && err.contains("gossip-policy-v3") && err.contains("describe"),
        "{err}"
    );
    // The built-in module itself is not warned about.
    let own = modnode::artifacts::path("gossip-policy-v3");
    let (ok, _, err) = modnode(&["module", "inspect", own.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(!err.contains("warning"), "{err}");
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
                   (export "modnode:checkpoint/chunker@2.0.0" (instance $i)))"#,
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

/// Kills the child if the test fails before it exits, so no node outlives the test (and holds
/// the harness's output pipe open).
pub(super) struct KillOnDrop(pub(super) std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines a child writes to `stderr`, sent one by one on the returned channel by a reader
/// thread (join it once the child is gone) — so a test can wait for a line with a deadline.
pub(super) fn stderr_lines(
    stderr: std::process::ChildStderr,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<()>,
) {
    use std::io::BufRead as _;
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    (lines, reader)
}

/// `modnode run` on the embedded dev chain with its dev deposit contract, `modnode deposit
/// submit` against the contract, the deposit in a block, Ctrl-C.
#[test]
fn run_accepts_a_submitted_deposit_and_stops_cleanly_on_ctrl_c() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let data_arg = data.to_str().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args([
            "run",
            "--data-dir",
            data_arg,
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--dev-contract-listen",
            "127.0.0.1:0",
            "--dev-block-ms",
            "100",
            "--follow-distance",
            "1",
        ])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !data.join("admin.addr").exists() {
        assert!(Instant::now() < deadline, "node never wrote admin.addr");
        std::thread::sleep(Duration::from_millis(50));
    }
    while !data.join("deposit-contract.url").exists() {
        assert!(
            Instant::now() < deadline,
            "node never wrote deposit-contract.url"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let submit = || {
        modnode(&[
            "deposit",
            "submit",
            "--data-dir",
            data_arg,
            "--dev-seed",
            "9",
        ])
    };
    let (ok, out, err) = submit();
    assert!(ok, "{err}");
    assert!(out.starts_with("deposit 0 logged"), "{out}");
    // The same deposit again is the contract's next deposit (a top-up once the first applies).
    let (ok, out, err) = submit();
    assert!(ok, "{err}");
    assert!(out.starts_with("deposit 1 logged"), "{out}");

    // Wait for a block carrying the deposit, then stop the node as Ctrl-C would.
    let stderr = child.0.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    // Both deposits in blocks: the producer logs how many each block carries.
    let carried = |line: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("deposits="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut log = String::new();
    let mut in_blocks = 0;
    while in_blocks < 2 {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no blocks with both deposits:\n{log}"));
        if line.contains("produced block") {
            in_blocks += carried(&line);
        }
        log.push_str(&line);
        log.push('\n');
    }
    assert_eq!(in_blocks, 2, "{log}");
    unsafe { libc::kill(child.0.id() as i32, libc::SIGINT) };
    let status = child.0.wait().unwrap();
    reader.join().unwrap();
    log.extend(lines.try_iter().map(|l| l + "\n"));
    assert!(status.success(), "{log}");
    // The store's recovery snapshot is written before the process says it stopped.
    let snapshot = log.find("store snapshot written");
    assert!(snapshot.is_some(), "{log}");
    assert!(log.find("stopped cleanly") > snapshot, "{log}");
}

/// Starts `modnode <args>` with stderr piped, waits until `ready` exists, sends SIGTERM (what
/// systemd, Docker and Kubernetes send) and returns (exit status, log).
fn sigterm_after_start(
    args: &[&str],
    ready: &std::path::Path,
) -> (std::process::ExitStatus, String) {
    use std::io::Read as _;
    use std::time::{Duration, Instant};
    let child = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            ready.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let mut stderr = child.0.stderr.take().unwrap();
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    let status = child.0.wait().unwrap();
    (status, log)
}

#[test]
fn sigterm_stops_run_and_devnet_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let (status, log) = sigterm_after_start(
        &[
            "run",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--dev-contract-listen",
            "127.0.0.1:0",
        ],
        &data.join("admin.addr"),
    );
    assert!(status.success(), "run exited with {status}:\n{log}");
    assert!(log.contains("stopped cleanly"), "{log}");
    assert!(log.contains("SIGTERM"), "{log}");

    // A devnet with epochs and a short finality depth (what deposits@3 needs), in its genesis.
    let net = dir.path().join("devnet");
    let (status, log) = sigterm_after_start(
        &[
            "devnet",
            "--nodes",
            "2",
            "--dir",
            net.to_str().unwrap(),
            "--slots-per-epoch",
            "4",
            "--finality-depth",
            "3",
        ],
        &net.join("node-1").join("admin.addr"),
    );
    assert!(status.success(), "devnet exited with {status}:\n{log}");
    assert!(log.contains("stopped cleanly"), "{log}");
    let genesis = std::fs::read_to_string(net.join("genesis.json")).unwrap();
    let genesis: serde_json::Value = serde_json::from_str(&genesis).unwrap();
    assert_eq!(genesis["slots_per_epoch"], 4, "{genesis}");
    assert_eq!(genesis["finality_depth"], 3, "{genesis}");
}

#[test]
fn network_commands_refuse_bad_arguments_with_the_culprit_named() {
    let (ok, _, err) = modnode(&["run", "--bootstrap", "nothex@127.0.0.1:1"]);
    assert!(!ok);
    assert!(err.contains("--bootstrap"), "{err}");
    // A contract address means nothing without an endpoint to find it at.
    let (ok, _, err) = modnode(&[
        "run",
        "--deposit-contract",
        &format!("0x{}", "11".repeat(20)),
    ]);
    assert!(!ok);
    assert!(err.contains("--eth1-endpoint"), "{err}");
    let (ok, _, err) = modnode(&["run", "--eth1-endpoint", "x", "--deposit-contract", "0x12"]);
    assert!(!ok);
    assert!(
        err.contains("--deposit-contract") && err.contains("20"),
        "{err}"
    );
    let (ok, _, err) = modnode(&["devnet", "--nodes", "2", "--authorities", "3"]);
    assert!(!ok);
    assert!(
        err.contains("--authorities 3 is more than --nodes 2"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (ok, _, err) = modnode(&["deposit", "submit", "--data-dir", data, "--dev-seed", "1"]);
    assert!(!ok);
    assert!(err.contains("deposit-contract.url"), "{err}");
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"pubkey":"0x12","withdrawal_credentials":"00","amount":1,"signature":"00"}"#,
    )
    .unwrap();
    let (ok, _, err) = modnode(&[
        "deposit",
        "submit",
        "--data-dir",
        data,
        "--json",
        bad.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("bad.json") && err.contains("pubkey"), "{err}");
}

/// A second `modnode run` on a data directory another holds, or on ports another
/// holds, fails at once with one line saying which flag to give, before it opens anything.
#[test]
fn a_second_run_on_a_held_directory_or_taken_ports_fails_in_one_line_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let only_the_lock_file = |data: &std::path::Path| {
        let names: Vec<String> = std::fs::read_dir(data)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [modnode::store::LOCK_FILE], "{}", data.display());
    };

    // The directory is held (here by this process, as another `run` would hold it).
    let held = dir.path().join("held");
    let _lock = modnode::store::DataDirLock::acquire(&held).unwrap();
    let (ok, _, err) = modnode(&[
        "run",
        "--data-dir",
        held.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--dev-contract-listen",
        "127.0.0.1:0",
    ]);
    assert!(!ok);
    assert_eq!(
        err,
        format!(
            "error: another modnode (pid {}) holds {}; stop it, or give this node another \
             --data-dir\n",
            std::process::id(),
            held.display()
        )
    );
    only_the_lock_file(&held);

    // Every port it would bind is taken, by real sockets.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let contract = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let [udp, admin, contract] = [
        udp.local_addr().unwrap(),
        admin.local_addr().unwrap(),
        contract.local_addr().unwrap(),
    ]
    .map(|a| a.to_string());
    let fresh = dir.path().join("fresh");
    let (ok, _, err) = modnode(&[
        "run",
        "--data-dir",
        fresh.to_str().unwrap(),
        "--listen",
        &udp,
        "--admin",
        &admin,
        "--dev-contract-listen",
        &contract,
    ]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    for (addr, flag) in [
        (&udp, "--listen"),
        (&admin, "--admin"),
        (&contract, "--dev-contract-listen"),
    ] {
        assert!(
            err.contains(&format!("{addr} (")),
            "{addr} not named: {err}"
        );
        assert!(
            err.contains(&format!("{flag} 127.0.0.1:0")),
            "{flag} not named: {err}"
        );
    }
    assert!(
        err.contains(&format!("--eth1-endpoint http://{contract}")),
        "{err}"
    );
    only_the_lock_file(&fresh);

    // Only the contract's port taken: only its flag is named.
    let (ok, _, err) = modnode(&[
        "run",
        "--data-dir",
        fresh.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--dev-contract-listen",
        &contract,
    ]);
    assert!(!ok);
    assert!(err.contains("--dev-contract-listen"), "{err}");
    assert!(
        !err.contains("--admin ") && !err.contains("--listen "),
        "{err}"
    );
}

#[test]
fn run_reads_its_config_file_and_logs_json_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let config = dir.path().join("modnode.toml");
    std::fs::write(
        &config,
        format!(
            "data-dir = {:?}\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n\
             dev-contract-listen = \"127.0.0.1:0\"\nlog-format = \"json\"\n\
             node-label = \"alpha\"\n",
            data.to_str().unwrap()
        ),
    )
    .unwrap();
    let (status, log) = sigterm_after_start(
        &["run", "--config", config.to_str().unwrap()],
        &data.join("admin.addr"),
    );
    assert!(status.success(), "run exited with {status}:\n{log}");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let said = |text: &str| {
        lines.iter().any(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(text))
        })
    };
    assert!(said("configuration read"), "{log}");
    assert!(said("stopped cleanly"), "{log}");
    // The node's lines carry its label as a span field (the admin API listens before the
    // signal: the test waits for its address file).
    let started = lines
        .iter()
        .find(|l| l["fields"]["message"] == "admin API listening")
        .unwrap_or_else(|| panic!("no `admin API listening` line:\n{log}"));
    let spans = started["spans"].as_array().cloned().unwrap_or_default();
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "node" && s["label"] == "alpha"),
        "{started}"
    );
}

#[test]
fn config_init_writes_a_file_show_explains_and_bad_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("modnode.toml");
    let path = file.to_str().unwrap();
    let (ok, out, err) = modnode(&["config", "init", "-o", path]);
    assert!(ok, "{err}");
    assert!(out.contains(path), "{out}");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.contains("# listen = \"127.0.0.1:9400\""),
        "{written}"
    );
    let (ok, _, err) = modnode(&["config", "init", "-o", path]);
    assert!(
        !ok && err.contains("--force"),
        "overwrote without --force: {err}"
    );

    std::fs::write(&file, "checkpoint-keep = 5\nadmin = \"127.0.0.1:9999\"\n").unwrap();
    let (ok, out, err) = modnode(&[
        "config",
        "show",
        "--config",
        path,
        "--admin",
        "127.0.0.1:7777",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("checkpoint-keep = 5  # {path}:1")),
        "{out}"
    );
    assert!(out.contains("admin = \"127.0.0.1:7777\"  # flag"), "{out}");
    assert!(
        out.contains("checkpoint-interval = 100  # default"),
        "{out}"
    );

    // A bad key stops `run` at once, naming the file, the line and the key.
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\nadmin-listen = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let (ok, _, err) = modnode(&["run", "--config", path]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{path}:2: unknown key `admin-listen`")),
        "{err}"
    );
}

#[test]
fn output_into_a_closed_pipe_ends_the_command_without_a_panic() {
    use std::os::unix::process::ExitStatusExt as _;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args(["config", "show"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
}

#[test]
fn checkpoint_export_and_restore_from_name_what_is_missing_or_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let out = dir.path().join("backup.ckpt");
    let (ok, _, err) = modnode(&[
        "checkpoint",
        "export",
        "latest",
        "-o",
        out.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("no checkpoint latest is stored"), "{err}");
    assert!(!out.exists());

    // A file that is not a checkpoint: `run` stops before starting the chain, naming it.
    let bogus = dir.path().join("bogus.ckpt");
    std::fs::write(&bogus, b"not a checkpoint at all").unwrap();
    let (ok, _, err) = modnode(&[
        "run",
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--no-admin",
        "--dev-contract-listen",
        "127.0.0.1:0",
        "--restore-from",
        bogus.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "{} is not a modnode checkpoint file",
            bogus.display()
        )),
        "{err}"
    );
}

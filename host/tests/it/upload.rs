//! Module upload through the admin API against a real module store (sled on disk) and the
//! real engine: accepted modules are compiled, warmed and stored once; every class of bad
//! module is refused with its own reason and leaves nothing behind.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use modnode::admin::client::{self, Target};
use modnode::admin::server::{self, ServerConfig};
use modnode::admin::{AdminBackend, AdminError, BoxFuture};
use modnode::modules_store::upload::{ModuleService, UploadConfig, UploadError, UploadOutcome};
use modnode::modules_store::{self, ActiveModule};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::artifact;

/// A node reduced to its module service.
struct ModulesOnly(Arc<ModuleService>);

impl AdminBackend for ModulesOnly {
    fn status(&self) -> Value {
        serde_json::json!({})
    }
    fn metrics(&self) -> String {
        String::new()
    }
    fn upload_module(
        &self,
        bytes: Vec<u8>,
        source: String,
    ) -> BoxFuture<'_, Result<UploadOutcome, UploadError>> {
        let service = self.0.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || service.upload(&bytes, &source))
                .await
                .unwrap()
        })
    }
    fn modules(&self) -> BoxFuture<'_, Result<Value, String>> {
        let active = [ActiveModule {
            kind: "gossip-policy".into(),
            name: "gossip-policy-v2@test".into(),
            sha256: "00".into(),
        }];
        let stored = self.0.store().list().map_err(|e| e.to_string());
        Box::pin(async move { Ok(modules_store::listing(&active, &stored?)) })
    }
}

struct Node {
    dir: tempfile::TempDir,
    addr: SocketAddr,
    service: Arc<ModuleService>,
    _stop: watch::Sender<bool>,
}

impl Node {
    async fn start(upload: UploadConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let service = Arc::new(
            ModuleService::open(dir.path(), dir.path().join("module-cache"), upload).unwrap(),
        );
        let (listener, token) = server::bind("127.0.0.1:0".parse().unwrap(), dir.path(), false)
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(server::serve(
            listener,
            token,
            Arc::new(ModulesOnly(service.clone())),
            ServerConfig::default(),
            stopped,
        ));
        Self {
            dir,
            addr,
            service,
            _stop: stop,
        }
    }

    fn target(&self) -> Target {
        Target::data_dir(self.dir.path()).unwrap()
    }

    async fn upload(&self, bytes: Vec<u8>) -> Result<Value, AdminError> {
        client::upload_module(&self.target(), bytes).await
    }

    /// The store is empty and no artifact or staging file exists.
    fn assert_nothing_stored(&self) {
        assert!(
            self.service.store().is_empty(),
            "a module entered the store"
        );
        let listed = self.service.store().list().unwrap();
        assert!(listed.is_empty(), "the store lists {listed:?}");
        for dir in ["module-cache", "module-staging"] {
            assert_eq!(
                files_under(&self.dir.path().join(dir)),
                0,
                "files left in {dir}"
            );
        }
    }
}

fn files_under(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| {
            let path = e.unwrap().path();
            if path.is_dir() { files_under(&path) } else { 1 }
        })
        .sum()
}

fn component(wat: &str) -> Vec<u8> {
    wat::parse_str(wat).unwrap()
}

/// Asserts `result` is a refusal with `reason`, whose message contains `text`.
fn assert_refused(result: Result<Value, AdminError>, reason: &str, text: &str) {
    match result {
        Err(AdminError::Refused {
            reason: Some(r),
            message,
            status,
        }) => {
            assert_eq!(r, reason, "{message}");
            assert!((400..500).contains(&status), "{status} {message}");
            assert!(message.contains(text), "{reason}: {message}");
        }
        other => panic!("expected a refusal with reason {reason}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_module_is_compiled_warmed_and_stored_once() {
    let node = Node::start(UploadConfig::default()).await;
    let bytes = artifact("gossip-policy-v1");
    let answer = node.upload(bytes.clone()).await.unwrap();
    assert_eq!(answer["status"], "ready", "{answer}");
    let module = &answer["module"];
    assert_eq!(module["kind"], "gossip-policy");
    assert_eq!(module["module_version"], 1);
    assert_eq!(module["contract"], "1.0.0");
    assert_eq!(module["size"], bytes.len());
    assert!(
        module["source"]
            .as_str()
            .unwrap()
            .starts_with("admin upload from 127.0.0.1"),
        "{module}"
    );
    let sha: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
    assert_eq!(module["sha256"], hex::encode(sha));
    assert_eq!(
        node.service
            .store()
            .bytes(&modnode::hashes::ModuleHash(sha))
            .unwrap(),
        Some(bytes.clone())
    );
    assert!(
        node.service
            .ready(&modnode::hashes::ModuleHash(sha))
            .is_some(),
        "not kept warm"
    );
    assert_eq!(files_under(&node.dir.path().join("module-cache")), 1);
    assert_eq!(files_under(&node.dir.path().join("module-staging")), 0);

    let again = node.upload(bytes).await.unwrap();
    assert_eq!(again["status"], "already-stored", "{again}");
    assert_eq!(again["module"], answer["module"]);
    assert_eq!(node.service.store().len(), 1);

    let listing = client::modules(&node.target()).await.unwrap();
    let policy = &listing["kinds"][2];
    assert_eq!(policy["kind"], "gossip-policy");
    assert_eq!(policy["active"]["name"], "gossip-policy-v2@test");
    assert_eq!(policy["stored"][0]["sha256"], hex::encode(sha));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_or_a_wrong_one_is_401_and_nothing_is_stored() {
    let node = Node::start(UploadConfig::default()).await;
    let bytes = artifact("gossip-policy-v1");
    for auth in [
        String::new(),
        format!("Authorization: Bearer {}\r\n", "5".repeat(64)),
        "Authorization: Basic abc\r\n".to_string(),
    ] {
        let mut stream = TcpStream::connect(node.addr).await.unwrap();
        let head = format!(
            "POST /modules HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\n\r\n",
            bytes.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(
            response.starts_with("HTTP/1.1 401") && response.contains("\"error\""),
            "{auth}: {response}"
        );
    }
    let anonymous = Target::url(&format!("http://{}", node.addr), None).unwrap();
    let err = client::upload_module(&anonymous, bytes).await.unwrap_err();
    assert!(
        matches!(err, AdminError::Refused { status: 401, .. }),
        "{err:?}"
    );
    node.assert_nothing_stored();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_module_class_is_refused_with_its_own_reason_and_nothing_stored() {
    let node = Node::start(UploadConfig {
        max_module_bytes: 32 * 1024,
        max_function_body_bytes: 4096,
        ..UploadConfig::default()
    })
    .await;
    let core = component("(module (func (export \"f\")))");
    assert_refused(node.upload(core).await, "not-a-component", "componentize");
    assert_refused(
        node.upload(b"#!/bin/sh\necho hi\n".to_vec()).await,
        "not-a-component",
        "not a WebAssembly file",
    );
    let wasi = component(
        r#"(component
             (import "wasi:cli/environment@0.2.0" (instance))
             (instance $i)
             (export "modnode:gossip-policy/policy@1.0.0" (instance $i)))"#,
    );
    assert_refused(
        node.upload(wasi).await,
        "forbidden-import",
        "wasi:cli/environment@0.2.0",
    );
    let wrong_contract = component(
        r#"(component (instance $i) (export "modnode:deposits/processor@4.0.0" (instance $i)))"#,
    );
    assert_refused(
        node.upload(wrong_contract).await,
        "incompatible-contract",
        "modnode:deposits/processor@4.0.0",
    );
    // A contract of a kind the host implements several of: the refusal names the module's and
    // every one the host implements.
    let unknown_policy_contract = component(
        r#"(component (instance $i) (export "modnode:gossip-policy/policy@3.0.0" (instance $i)))"#,
    );
    assert_refused(
        node.upload(unknown_policy_contract).await,
        "incompatible-contract",
        "built for modnode:gossip-policy/policy@3.0.0, this node implements \
         modnode:gossip-policy/policy@1.0.0, modnode:gossip-policy/policy@2.0.0",
    );
    // The size cap is checked before anything else looks at the bytes.
    let mut oversized = artifact("gossip-policy-v1");
    oversized.resize(40_000, 0);
    assert_refused(node.upload(oversized).await, "too-large", "32768");
    let threads = component(
        r#"(component
             (core module (memory 1 1 shared))
             (instance $i)
             (export "modnode:gossip-policy/policy@1.0.0" (instance $i)))"#,
    );
    assert_refused(node.upload(threads).await, "wasm-feature", "threads");
    assert_refused(
        node.upload(huge_function(2_000)).await,
        "code-too-large",
        "function body",
    );
    let no_world =
        component(r#"(component (instance $i) (export "acme:thing/api@1.0.0" (instance $i)))"#);
    assert_refused(node.upload(no_world).await, "unknown-world", "acme:thing");
    node.assert_nothing_stored();
}

/// A module whose `describe()` returns 6 MiB is refused at upload with the kind's bound named,
/// stores nothing, and the module list keeps working. (Before: it was
/// stored, and the upload answer and every `module list` failed with "length limit exceeded".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_describing_itself_at_length_is_refused_naming_the_bound() {
    let node = Node::start(UploadConfig::default()).await;
    assert_refused(
        node.upload(artifact("fixture-policy-long-describe")).await,
        "warm-up-failed",
        "returned describe().description of 6291456 bytes, over the gossip-policy bound of \
         4096 bytes",
    );
    node.assert_nothing_stored();
    let listed = client::modules(&node.target()).await.unwrap();
    assert!(listed.to_string().len() < 64 * 1024, "{listed}");
    // An ordinary module still goes in and is listed.
    let answer = node.upload(artifact("gossip-policy-v1")).await.unwrap();
    assert_eq!(answer["status"], "ready", "{answer}");
    let listed = client::modules(&node.target()).await.unwrap();
    assert!(
        listed
            .to_string()
            .contains(answer["module"]["sha256"].as_str().unwrap()),
        "{listed}"
    );
}

/// A component of the gossip-policy world whose one core function has `n` blocks of
/// arithmetic: valid, and as slow to compile as `n` makes it.
fn huge_function(n: usize) -> Vec<u8> {
    let mut body = String::new();
    for i in 0..n {
        body.push_str(&format!(
            "(local.set 0 (i64.add (i64.mul (local.get 0) (i64.const {i})) (i64.const 7)))\n"
        ));
    }
    component(&format!(
        r#"(component
             (core module (func (export "f") (param i64) (result i64) {body} (local.get 0)))
             (instance $i)
             (export "modnode:gossip-policy/policy@1.0.0" (instance $i)))"#
    ))
}

/// The live `debug compile-module` children of this process working in `dir`.
fn compile_children(dir: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    let dir = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the comm may hold spaces, so split after its ')'.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let ppid = after.split_whitespace().nth(1).unwrap_or("");
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if ppid == me && cmdline.contains("compile-module") && cmdline.contains(&dir) {
            found.push(cmdline);
        }
    }
    found
}

/// A compiler program for the node: the real `modnode` binary, except that while
/// `<script>.stall` exists it hangs (blocked opening a FIFO nobody writes, no CPU, no child
/// process) like a compile that never ends. How long a real compile takes depends on the
/// machine; a hang does not.
fn stalling_compiler(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt as _;
    let script = dir.join("compile.sh");
    let stall = dir.join("compile.sh.stall");
    let fifo = dir.join("compile.sh.fifo");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ -e \"$0.stall\" ]; then read -r _ < \"$0.fifo\"; fi\nexec {:?} \"$@\"\n",
            env!("CARGO_BIN_EXE_modnode")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    std::fs::write(&stall, b"").unwrap();
    (script, stall)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_past_its_deadline_is_killed_and_the_next_upload_is_accepted() {
    // Compiles run in a child process, as under `modnode run`; the first one hangs.
    let tools = tempfile::tempdir().unwrap();
    let (compiler, stall) = stalling_compiler(tools.path());
    let limit = Duration::from_secs(10);
    let node = Node::start(UploadConfig {
        compile_timeout: limit,
        compile_program: Some(compiler),
        ..UploadConfig::default()
    })
    .await;
    let hostile = huge_function(50_000);
    let upload = tokio::spawn({
        let target = node.target();
        async move { client::upload_module(&target, hostile).await }
    });
    // The compile runs in a child of this process, then is killed at the deadline.
    let deadline = Instant::now() + Duration::from_secs(60);
    while compile_children(node.dir.path()).is_empty() {
        assert!(Instant::now() < deadline, "no compile process started");
        assert!(!upload.is_finished(), "answered before a compile started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    assert_refused(upload.await.unwrap(), "compile-too-slow", "to compile");
    assert!(
        started.elapsed() < limit + Duration::from_secs(5),
        "refused {:?} after the compile started, the limit is {limit:?}",
        started.elapsed()
    );
    // Killed and reaped before the answer: nothing of it runs on.
    assert_eq!(compile_children(node.dir.path()), Vec::<String>::new());
    node.assert_nothing_stored();
    // The lane is free at once: the next upload is compiled (not "busy") and accepted.
    std::fs::remove_file(&stall).unwrap();
    let answer = node.upload(artifact("gossip-policy-v1")).await.unwrap();
    assert_eq!(answer["status"], "ready", "{answer}");
    assert_eq!(answer["module"]["kind"], "gossip-policy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_too_slow_to_compile_is_refused_and_leaves_nothing() {
    // A tiny bound keeps the test fast; the module takes far longer than 1 ms to compile.
    let node = Node::start(UploadConfig {
        compile_timeout: Duration::from_millis(1),
        ..UploadConfig::default()
    })
    .await;
    assert_refused(
        node.upload(huge_function(50_000)).await,
        "compile-too-slow",
        "to compile",
    );
    node.assert_nothing_stored();
    // While the abandoned compile still runs no other starts ("busy"); once it has ended, the
    // next upload is looked at again, and the abandoned compile has written nothing.
    let empty = component(
        r#"(component (instance $i) (export "modnode:gossip-policy/policy@1.0.0" (instance $i)))"#,
    );
    let mut answer = node.upload(empty.clone()).await;
    for _ in 0..1200 {
        match &answer {
            Err(AdminError::Refused {
                reason: Some(r), ..
            }) if r == "busy" => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                answer = node.upload(empty.clone()).await;
            }
            _ => break,
        }
    }
    // The empty component exports none of its world's functions, so it is refused as not
    // implementing its world (or, with a 1 ms bound, does not even compile): refused either
    // way, for its own reason.
    match &answer {
        Err(AdminError::Refused {
            reason: Some(r), ..
        }) => assert!(
            r == "wrong-signature" || r == "compile-too-slow",
            "{answer:?}"
        ),
        other => panic!("{other:?}"),
    }
    node.assert_nothing_stored();
}

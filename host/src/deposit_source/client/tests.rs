//! The client against a hostile JSON-RPC endpoint on loopback: a 32 MB `[0,0,…]` answer to
//! `eth_getLogs` is refused once the bound is passed (the bytes read are counted, memory is not
//! measured), with or without an announced length; the follower's page shrinks on it; a head
//! going back is counted once per change.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::*;
use crate::deposit_source::DepositSource;
use crate::deposit_source::follower::{Follower, FollowerConfig, poll_once};

/// The answer of the hostile endpoint's `eth_getLogs`: 32 MB of `[0,0,…]`.
const HOSTILE_BYTES: usize = 32_000_000;
/// Bytes per write of the fake endpoint.
const WRITE: usize = 64 << 10;

/// How the fake endpoint sends a body.
#[derive(Clone, Copy)]
enum Framing {
    /// With its `Content-Length`.
    Length,
    /// Chunked, no length announced.
    Chunked,
}

/// A JSON-RPC endpoint on loopback answering each call with `answer(method, params)`; counts
/// the body bytes it wrote (until the client hangs up).
async fn fake(
    framing: Framing,
    answer: impl Fn(&str, &Value) -> Vec<u8> + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let written = Arc::new(AtomicUsize::new(0));
    let answer = Arc::new(answer);
    let counter = written.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                let body_at = loop {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&request[..body_at]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap_or(0);
                while request.len() < body_at + length {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let call: Value = serde_json::from_slice(&request[body_at..]).unwrap();
                let body = answer(call["method"].as_str().unwrap(), &call["params"]);
                let head = match framing {
                    Framing::Length => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    ),
                    Framing::Chunked => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_string(),
                };
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for piece in body.chunks(WRITE) {
                    let sent = match framing {
                        Framing::Length => stream.write_all(piece).await,
                        Framing::Chunked => {
                            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                            framed.extend_from_slice(piece);
                            framed.extend_from_slice(b"\r\n");
                            stream.write_all(&framed).await
                        }
                    };
                    if sent.is_err() {
                        return;
                    }
                    counter.fetch_add(piece.len(), Ordering::Relaxed);
                }
                if let Framing::Chunked = framing {
                    let _ = stream.write_all(b"0\r\n\r\n").await;
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    (url, written)
}

/// `{"jsonrpc":"2.0","id":1,"result":[0,0,…]}` of about `bytes` bytes.
fn zeros(bytes: usize) -> Vec<u8> {
    let head = br#"{"jsonrpc":"2.0","id":1,"result":[0"#;
    let pairs = bytes.saturating_sub(head.len() + 2) / 2;
    [head.as_slice(), &b",0".repeat(pairs), b"]}"].concat()
}

fn result(value: Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "jsonrpc": "2.0", "id": 1, "result": value })).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_32_mb_answer_to_get_logs_is_refused_after_reading_at_most_its_bound() {
    let hostile = Arc::new(zeros(HOSTILE_BYTES));
    for framing in [Framing::Chunked, Framing::Length] {
        let answer = hostile.clone();
        let (url, written) = fake(framing, move |_, _| answer.to_vec()).await;
        let client = RpcClient::new(&url).unwrap();
        let err = client.deposit_logs(&[7; 20], 0, 99).await.unwrap_err();
        let ClientError::TooLarge {
            limit, read, size, ..
        } = &err
        else {
            panic!("not refused as too large: {err}");
        };
        assert_eq!(*limit, wire::MAX_LOGS_ANSWER_BYTES);
        assert!(*limit < HOSTILE_BYTES);
        // The reader stops at the first read past the bound.
        assert!(
            *read <= limit + WRITE + 1024,
            "read {read} bytes of a {limit}-byte bound"
        );
        let text = err.to_string();
        assert!(text.contains(&url), "{text}");
        assert!(text.contains("eth_getLogs"), "{text}");
        assert!(text.contains(&limit.to_string()), "{text}");
        assert!(err.is_range_limit(), "a smaller page may fit: {err}");
        match framing {
            // Announced too long: refused before reading the body.
            Framing::Length => {
                assert_eq!(*read, 0);
                assert!(size.contains(&hostile.len().to_string()), "{size}");
            }
            Framing::Chunked => assert!(*read > *limit),
        }
        // The endpoint could not push the whole answer: the client hung up (its socket
        // buffers hold a few MB at most).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let sent = written.load(Ordering::Relaxed);
            if sent < HOSTILE_BYTES {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the whole answer was sent: {sent}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_the_wrong_shape_under_the_bound_is_refused_at_its_first_element() {
    let (url, _) = fake(Framing::Length, |_, _| zeros(1 << 20)).await;
    let client = RpcClient::new(&url).unwrap();
    let err = client.deposit_logs(&[7; 20], 0, 9).await.unwrap_err();
    assert!(matches!(err, ClientError::BadResponse { .. }), "{err}");
    assert!(!err.is_range_limit());
    let err = client.block_number().await.unwrap_err();
    assert!(
        matches!(err, ClientError::TooLarge { .. }),
        "a quantity's bound is a few KiB: {err}"
    );
}

/// A block of the fake chain: hash `[n + 1; 32]`, parent `[n; 32]`.
fn block_json(number: u64) -> Value {
    serde_json::json!({
        "number": format!("0x{number:x}"),
        "hash": format!("0x{}", hex::encode([number as u8 + 1; 32])),
        "parentHash": format!("0x{}", hex::encode([number as u8; 32])),
        "timestamp": "0x1",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_going_back_is_counted_once_per_change_and_nothing_new_is_read() {
    let head = Arc::new(AtomicU64::new(10));
    let shared = head.clone();
    let (url, _) = fake(Framing::Length, move |method, params| match method {
        "eth_blockNumber" => result(format!("0x{:x}", shared.load(Ordering::Relaxed)).into()),
        "eth_getLogs" => result(serde_json::json!([])),
        "eth_getBlockByNumber" => {
            let n = u64::from_str_radix(params[0].as_str().unwrap().trim_start_matches("0x"), 16)
                .unwrap();
            result(block_json(n))
        }
        other => panic!("unexpected call {other}"),
    })
    .await;
    let client = RpcClient::new(&url).unwrap();
    let mut config = FollowerConfig::new(url.clone(), [7; 20]);
    config.follow_distance = 2;
    let mut follower = Follower::new(&config);
    let source = DepositSource::new();
    assert!(
        poll_once(&client, &mut follower, &source, None)
            .await
            .unwrap()
    );
    assert_eq!(follower.last().map(|b| b.number), Some(8));
    let went_back = || source.counters().head_went_back.load(Ordering::Relaxed);
    assert_eq!(went_back(), 0);
    head.store(5, Ordering::Relaxed);
    assert!(
        !poll_once(&client, &mut follower, &source, None)
            .await
            .unwrap()
    );
    assert_eq!(went_back(), 1);
    assert!(
        !poll_once(&client, &mut follower, &source, None)
            .await
            .unwrap()
    );
    assert_eq!(went_back(), 1, "a head that stays back is counted once");
    head.store(4, Ordering::Relaxed);
    assert!(
        !poll_once(&client, &mut follower, &source, None)
            .await
            .unwrap()
    );
    assert_eq!(went_back(), 2);
    assert_eq!(
        follower.last().map(|b| b.number),
        Some(8),
        "nothing new read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_get_logs_answer_shrinks_the_followers_page_and_is_counted() {
    let (url, _) = fake(Framing::Length, |method, _| match method {
        "eth_blockNumber" => result("0x64".into()),
        "eth_getLogs" => zeros(HOSTILE_BYTES),
        other => panic!("unexpected call {other}"),
    })
    .await;
    let client = RpcClient::new(&url).unwrap();
    let mut config = FollowerConfig::new(url.clone(), [7; 20]);
    config.max_blocks_per_query = 8;
    let mut follower = Follower::new(&config);
    let source = DepositSource::new();
    let err = poll_once(&client, &mut follower, &source, None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("over its bound"), "{err}");
    assert_eq!(follower.page(), 1, "halved down to one block");
    // 8 → 4 → 2 → 1 blocks, and the one-block answer refused too.
    assert_eq!(
        source.counters().answers_too_large.load(Ordering::Relaxed),
        4
    );
    assert_eq!(follower.last(), None);
}

/// The bound of an `eth_getLogs` answer rests on the size of one log: the dev contract's log,
/// in the real contract's shape, with the largest numbers and pretty-printed, fits in
/// `MAX_LOG_JSON_BYTES`, and decodes through the typed structures to what was logged.
#[test]
fn a_deposit_log_fits_the_per_log_bound_and_decodes_typed() {
    use crate::deposit_source::dev_contract::LoggedDeposit;
    use crate::deposit_source::rpc::log_json;
    let logged = LoggedDeposit {
        index: u64::MAX,
        block: u64::MAX,
        deposit: crate::chain::block::DepositData {
            pubkey: [0xff; 48],
            withdrawal_credentials: [0xff; 32],
            amount: u64::MAX,
            signature: [0xff; 96],
        },
    };
    let json = log_json(&logged, &[0xff; 32], u64::MAX);
    let compact = serde_json::to_vec(&json).unwrap();
    let pretty = serde_json::to_vec_pretty(&json).unwrap();
    assert!(compact.len() < 1_800, "{}", compact.len());
    assert!(pretty.len() <= wire::MAX_LOG_JSON_BYTES, "{}", pretty.len());
    let log: wire::LogJson = serde_json::from_slice(&pretty).unwrap();
    let log = log.parse().unwrap();
    assert_eq!(log.block_number, u64::MAX);
    assert_eq!(log.log_index, Some(u64::MAX));
    assert_eq!(log.block_hash, [0xff; 32]);
    let (deposit, index) = crate::deposit_source::abi::decode_deposit_event(&log.data).unwrap();
    assert_eq!((deposit, index), (logged.deposit, u64::MAX));
}

/// An endpoint that drops its first `drops` connections unanswered, then answers
/// `eth_blockNumber` with `0x2a`; counts the connections it accepted.
async fn flaky(drops: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            if counter.fetch_add(1, Ordering::Relaxed) < drops {
                drop(stream);
                continue;
            }
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let body = result("0x2a".into());
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (url, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_retried_with_backoff_and_a_source_that_stays_down_is_reported() {
    // Two drops: the third attempt answers.
    let (url, accepted) = flaky(2).await;
    let client = RpcClient::new(&url).unwrap();
    assert_eq!(client.block_number().await.unwrap(), 42);
    assert_eq!(accepted.load(Ordering::Relaxed), 3);
    // Three drops: the retries run out and the last failure is reported, as unreachable.
    let (url, accepted) = flaky(3).await;
    let client = RpcClient::new(&url).unwrap();
    let err = client.block_number().await.unwrap_err();
    assert!(matches!(err, ClientError::Unreachable { .. }), "{err}");
    assert_eq!(accepted.load(Ordering::Relaxed), 3);
    // A JSON-RPC error is the source's answer, not a transport failure: never retried.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let (url, _) = fake(Framing::Length, move |_, _| {
        counted.fetch_add(1, Ordering::Relaxed);
        serde_json::to_vec(&serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "busy"}
        }))
        .unwrap()
    })
    .await;
    let err = RpcClient::new(&url).unwrap().chain_id().await.unwrap_err();
    assert!(
        matches!(err, ClientError::Rpc { code: -32000, .. }),
        "{err}"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

//! The admin API's routes on axum: the bearer-token check, the body limits and the JSON
//! errors. Connection handling (timeouts of the head, caps) is [`crate::http_server`]'s, with
//! [`super::server`]'s limits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::server::ServerConfig;
use super::token::AdminToken;
use super::{AdminBackend, ModuleOp, ModuleOpError};
use crate::http_server::{ClientAddr, ConnPhase, Phase};
use crate::modules_store::StoredModule;
use crate::modules_store::upload::UploadOutcome;
use crate::runtime::{Kind, Mode};
use crate::state::schedule::Action;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::BodyExt as _;

/// Content type of `/metrics`: the OpenMetrics text format (what the node's metrics render).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) token: Arc<AdminToken>,
    pub(crate) backend: Arc<dyn AdminBackend>,
    /// The reserved lane: requests with the right token served at once.
    pub(crate) lane: Arc<tokio::sync::Semaphore>,
    /// Connections the server evicted to make room (for `/metrics`).
    pub(crate) evicted: Arc<AtomicU64>,
    pub(crate) config: ServerConfig,
}

/// The whole API.
pub(crate) fn router(state: AppState) -> Router {
    let operations = Router::new()
        .route(
            "/modules",
            get(list_modules).post(upload_module).fallback(not_allowed),
        )
        .route("/state", get(state_at).fallback(not_allowed))
        .route("/blocks", get(blocks).fallback(not_allowed))
        .route(
            "/checkpoints",
            get(list_checkpoints)
                .post(create_checkpoint)
                .fallback(not_allowed),
        )
        .route(
            "/checkpoints/latest",
            get(super::checkpoint_query::latest).fallback(not_allowed),
        )
        .route(
            "/checkpoints/chunk",
            get(super::checkpoint_query::chunk).fallback(not_allowed),
        )
        .route(
            "/modules/propose",
            axum::routing::post(propose_upgrade).fallback(not_allowed),
        )
        .route(
            "/modules/activate",
            axum::routing::post(activate_module).fallback(not_allowed),
        )
        .route(
            "/modules/rollback",
            axum::routing::post(rollback_module).fallback(not_allowed),
        )
        .route(
            "/modules/cancel",
            axum::routing::post(cancel_candidate).fallback(not_allowed),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), until_started));
    let protected = Router::new()
        .route("/status", get(status).fallback(not_allowed))
        .merge(operations)
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .route("/metrics", get(metrics).fallback(not_allowed))
        .route("/livez", get(livez).fallback(not_allowed))
        .route("/readyz", get(readyz).fallback(not_allowed))
        .merge(protected)
        .fallback(not_found)
        .with_state(state)
}

/// The body of a health answer. (Fields in alphabetical order, as the hand-built objects it
/// replaces were written, so the bytes on the wire are unchanged.)
#[derive(Debug, serde::Serialize)]
struct Health {
    /// Why it is failing; absent when ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// `ok` or `failing`.
    status: &'static str,
}

/// The body of an error answer (fields in alphabetical order, as for [`Health`]):
/// `{"error": message}`, with a machine-readable `reason` where
/// the client acts on it.
#[derive(Debug, serde::Serialize)]
struct ErrorBody {
    /// What went wrong, for a person.
    error: String,
    /// A short code (`too-large`, `busy`, …), where there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

/// The answer to a module upload: `{"status": "ready" | "already-stored", "module": …}`.
#[derive(Debug, serde::Serialize)]
struct UploadAnswer<'a> {
    /// The stored module.
    module: &'a StoredModule,
    /// `ready` or `already-stored`.
    status: &'static str,
}

/// A health answer: 200 `{"status":"ok"}` or 503 `{"status":"failing","reason":…}`.
fn health(result: Result<(), String>) -> Response {
    match result {
        Ok(()) => axum::Json(Health {
            status: "ok",
            reason: None,
        })
        .into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(Health {
                status: "failing",
                reason: Some(reason),
            }),
        )
            .into_response(),
    }
}

async fn livez(State(state): State<AppState>) -> Response {
    health(state.backend.livez().await)
}

async fn readyz(State(state): State<AppState>) -> Response {
    health(state.backend.readyz().await)
}

/// Seconds a client is told to wait (`Retry-After`) while the node is starting.
const STARTING_RETRY_AFTER_S: &str = "5";

/// While the node is starting, a chain or module operation gets 503 with the reason (and a
/// `Retry-After`) instead of reaching a backend that has no chain yet.
async fn until_started(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match state.backend.starting() {
        None => next.run(request).await,
        Some(reason) => {
            let mut response = error(StatusCode::SERVICE_UNAVAILABLE, reason);
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(STARTING_RETRY_AFTER_S),
            );
            response
        }
    }
}

/// `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = ErrorBody {
        error: message.into(),
        reason: None,
    };
    (status, axum::Json(body)).into_response()
}

async fn not_found(request: Request) -> Response {
    let path: String = request.uri().path().chars().take(64).collect();
    error(StatusCode::NOT_FOUND, format!("no such path {path:?}"))
}

async fn not_allowed(request: Request) -> Response {
    let allow = match request.uri().path() {
        "/modules/activate" | "/modules/rollback" | "/modules/cancel" | "/modules/propose" => {
            "POST"
        }
        "/modules" | "/checkpoints" => "GET, POST",
        _ => "GET",
    };
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {} not allowed; use {allow}", request.method()),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// Refuses requests without the right bearer token, at once: the refusal is answered and the
/// connection closed without reading the body (a client trickling a refused body holds
/// nothing). A request with the token takes its place in the reserved lane (waiting for one
/// when the lane is full) and its connection is never evicted.
async fn authorize(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let phase = request.extensions().get::<ConnPhase>().cloned();
    let set_phase = |p| {
        if let Some(phase) = &phase {
            phase.set(p);
        }
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    let message = match presented {
        Some(t) if state.token.matches(t) => {
            set_phase(Phase::Authenticated);
            // The semaphore is never closed; should it be, the request is served anyway.
            let _place = state.lane.clone().acquire_owned().await.ok();
            return next.run(request).await;
        }
        Some(_) => "wrong admin token",
        None => {
            "missing `Authorization: Bearer <token>`; the token is in the node's data directory, file admin.token"
        }
    };
    set_phase(Phase::Refused);
    let mut response = error(StatusCode::UNAUTHORIZED, message);
    let headers = response.headers_mut();
    headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Reads a body announced by `Content-Length` of at most `limit` bytes within the I/O timeout.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Response> {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return Err(error(
            StatusCode::LENGTH_REQUIRED,
            "Transfer-Encoding is not supported; send Content-Length",
        ));
    }
    let len = headers
        .get(header::CONTENT_LENGTH)
        .ok_or_else(|| {
            error(
                StatusCode::LENGTH_REQUIRED,
                "POST needs a Content-Length header",
            )
        })?
        .to_str()
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "invalid Content-Length"))?;
    if !usize::try_from(len).is_ok_and(|l| l <= limit) {
        let message = format!("body of {len} bytes exceeds {limit} bytes");
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            axum::Json(ErrorBody {
                error: message,
                reason: Some("too-large"),
            }),
        )
            .into_response());
    }
    let collected =
        tokio::time::timeout(timeout, http_body_util::Limited::new(body, limit).collect())
            .await
            .map_err(|_| {
                error(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("request body not received within {timeout:?}"),
                )
            })?
            .map_err(|e| {
                error(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the body: {e}"),
                )
            })?;
    Ok(collected.to_bytes())
}

async fn status(State(state): State<AppState>) -> Response {
    axum::Json(state.backend.status()).into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    let mut text = state.backend.metrics();
    let admin = admin_metrics(state.evicted.load(Ordering::Relaxed));
    // The admin server's own figures go before the closing `# EOF` of the node's.
    match text.rfind("# EOF") {
        Some(at) => text.insert_str(at, &admin),
        None => text.push_str(&admin),
    }
    ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response()
}

/// The admin server's counters as OpenMetrics lines, without the closing `# EOF`.
fn admin_metrics(evicted: u64) -> String {
    // One scrape at a time sets and encodes, so each encodes its own server's figure.
    let admin = ADMIN_METRICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (registry, counter) = &*admin;
    counter.inner().store(evicted, Ordering::Relaxed);
    let mut out = String::new();
    // Writing into a String cannot fail; the encoder only fails when its writer does.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    match out.rfind("# EOF") {
        Some(at) => out.get(..at).unwrap_or_default().to_string(),
        None => out,
    }
}

/// The admin server's counters, registered on the first scrape.
static ADMIN_METRICS: std::sync::LazyLock<
    std::sync::Mutex<(
        prometheus_client::registry::Registry,
        prometheus_client::metrics::counter::Counter,
    )>,
> = std::sync::LazyLock::new(|| {
    let mut registry = prometheus_client::registry::Registry::with_prefix("modnode");
    let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
    registry.register(
        "admin_connections_evicted",
        "Unauthenticated admin connections evicted to make room for others",
        counter.clone(),
    );
    std::sync::Mutex::new((registry, counter))
});

async fn upload_module(State(state): State<AppState>, request: Request) -> Response {
    let client = request
        .extensions()
        .get::<ClientAddr>()
        .map_or_else(|| "unknown".to_string(), |c| c.0.to_string());
    let (parts, body) = request.into_parts();
    let body = match read_body(
        &parts.headers,
        body,
        state.config.max_module_bytes,
        state.config.io_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(response) => return response,
    };
    let source = format!("admin upload from {client}");
    let upload = state.backend.upload_module(body.to_vec(), source);
    match tokio::time::timeout(state.config.upload_timeout, upload).await {
        Ok(Ok(outcome)) => {
            let status = match &outcome {
                UploadOutcome::Ready(_) => "ready",
                UploadOutcome::AlreadyStored(_) => "already-stored",
            };
            let module = outcome.module();
            axum::Json(UploadAnswer { module, status }).into_response()
        }
        Ok(Err(e)) => {
            let status = match e.code() {
                "too-large" => StatusCode::PAYLOAD_TOO_LARGE,
                "busy" => StatusCode::SERVICE_UNAVAILABLE,
                _ if e.is_module_fault() => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (
                status,
                axum::Json(ErrorBody {
                    error: e.to_string(),
                    reason: Some(e.code()),
                }),
            )
                .into_response()
        }
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the node did not finish the upload within {:?}",
                state.config.upload_timeout
            ),
        ),
    }
}

async fn list_checkpoints(State(state): State<AppState>) -> Response {
    match state.backend.checkpoints().await {
        Ok(value) => axum::Json(value).into_response(),
        Err(message) => error(StatusCode::INTERNAL_SERVER_ERROR, message),
    }
}

async fn create_checkpoint(State(state): State<AppState>) -> Response {
    match state.backend.create_checkpoint().await {
        Ok(value) => axum::Json(value).into_response(),
        Err(message) => error(StatusCode::SERVICE_UNAVAILABLE, message),
    }
}

/// `POST /modules/propose` with `{"sha256", "kind", "activate_at"}` and optionally
/// `"action": "cancel"` to vote for revoking that scheduled upgrade.
async fn propose_upgrade(State(state): State<AppState>, request: Request) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Proposal {
        sha256: String,
        kind: String,
        activate_at: u64,
        /// `"upgrade"` (the default) or `"cancel"` (revoke a scheduled upgrade).
        #[serde(default = "upgrade")]
        action: Action,
    }
    fn upgrade() -> Action {
        Action::Upgrade
    }
    let (parts, body) = request.into_parts();
    let body = match read_body(
        &parts.headers,
        body,
        state.config.max_body,
        state.config.io_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(response) => return response,
    };
    let proposal: Proposal = match parse_body(&body) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("proposal: {e}")),
    };
    let propose = state.backend.propose_upgrade(
        proposal.action,
        proposal.kind,
        proposal.sha256,
        proposal.activate_at,
    );
    match tokio::time::timeout(state.config.upload_timeout, propose).await {
        Ok(Ok(value)) => axum::Json(value).into_response(),
        Ok(Err(reason)) => error(StatusCode::BAD_REQUEST, reason),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the node did not take the proposal in time",
        ),
    }
}

async fn list_modules(State(state): State<AppState>) -> Response {
    match state.backend.modules().await {
        Ok(value) => axum::Json(value).into_response(),
        Err(message) => error(StatusCode::INTERNAL_SERVER_ERROR, message),
    }
}

/// Reads a small body (the module operations), within the body-size limit.
async fn read_small_body(state: &AppState, request: Request) -> Result<Bytes, Response> {
    let (parts, body) = request.into_parts();
    read_body(
        &parts.headers,
        body,
        state.config.max_body,
        state.config.io_timeout,
    )
    .await
}

/// `body` parsed once into the request `T`, or a 400 message naming the field at fault (or
/// saying the body as a whole is, when it is not the JSON object `T` is).
fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            format!("the body: {inner}")
        } else {
            format!("field `{path}`: {inner}")
        }
    })?;
    deserializer.end().map_err(|e| format!("the body: {e}"))?;
    Ok(parsed)
}

/// `POST /modules/activate`: `{"hash", "mode", "percent"}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivateRequest {
    /// The module's full sha256 as 64 hex digits.
    hash: String,
    /// `live` (the default), `shadow` or `canary`.
    #[serde(default)]
    mode: Option<String>,
    /// For `canary`: the share of calls, 1 to 100.
    #[serde(default)]
    percent: Option<u64>,
}

/// `POST /modules/rollback` and `POST /modules/cancel`: `{"kind"}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KindRequest {
    /// The module kind, as `Kind` prints it.
    kind: String,
}

/// `{"kind"}` → the kind, or why not (answered as a 400).
fn parse_kind(body: &[u8]) -> Result<Kind, String> {
    let request: KindRequest = parse_body(body)?;
    request.kind.parse::<Kind>()
}

/// `{"hash","mode","percent"}` → the operation, or why not (answered as a 400).
fn parse_activate(body: &[u8]) -> Result<ModuleOp, String> {
    let request: ActivateRequest = parse_body(body)?;
    let hex_hash = request.hash.as_str();
    let hash: crate::hashes::ModuleHash = hex_hash.parse().map_err(|_| {
        format!("`hash` must be a module's full sha256 as 64 hex digits, not {hex_hash:?}")
    })?;
    let mode = match request.mode.as_deref().unwrap_or("live") {
        "live" => Mode::Live,
        "shadow" => Mode::Shadow,
        "canary" => {
            let percent = request
                .percent
                .and_then(|p| u8::try_from(p).ok())
                .filter(|p| (1..=100).contains(p))
                .ok_or("canary needs `percent`, a share of calls from 1 to 100")?;
            Mode::Canary(percent)
        }
        other => {
            return Err(format!(
                "unknown `mode` {other:?}; use live, shadow or canary"
            ));
        }
    };
    Ok(ModuleOp::Activate { hash, mode })
}

async fn run_op(state: &AppState, op: ModuleOp) -> Response {
    match tokio::time::timeout(state.config.upload_timeout, state.backend.module_op(op)).await {
        Ok(Ok(value)) => axum::Json(value).into_response(),
        Ok(Err(e)) => {
            let status = match e {
                ModuleOpError::Unknown(_) => StatusCode::NOT_FOUND,
                ModuleOpError::Refused(_) => StatusCode::CONFLICT,
                ModuleOpError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            error(status, e.to_string())
        }
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the node did not finish the module operation in time",
        ),
    }
}

async fn activate_module(State(state): State<AppState>, request: Request) -> Response {
    let body = match read_small_body(&state, request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    match parse_activate(&body) {
        Ok(op) => run_op(&state, op).await,
        Err(message) => error(StatusCode::BAD_REQUEST, message),
    }
}

/// A module operation on the kind named by the body's `kind` field.
async fn kind_op(state: &AppState, request: Request, op: fn(Kind) -> ModuleOp) -> Response {
    let body = match read_small_body(state, request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    match parse_kind(&body) {
        Ok(kind) => run_op(state, op(kind)).await,
        Err(message) => error(StatusCode::BAD_REQUEST, message),
    }
}

async fn rollback_module(State(state): State<AppState>, request: Request) -> Response {
    kind_op(&state, request, |kind| ModuleOp::Rollback { kind }).await
}

async fn cancel_candidate(State(state): State<AppState>, request: Request) -> Response {
    kind_op(&state, request, |kind| ModuleOp::Cancel { kind }).await
}

async fn state_at(State(state): State<AppState>, request: Request) -> Response {
    use super::state_query::{StateQuery, StateQueryError};
    let query = match StateQuery::parse(request.uri().query()) {
        Ok(query) => query,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    match tokio::time::timeout(state.config.backend_timeout, state.backend.state(query)).await {
        Ok(Ok(value)) => axum::Json(value).into_response(),
        Ok(Err(e)) => {
            let status = match e {
                StateQueryError::BadQuery(_) => StatusCode::BAD_REQUEST,
                StateQueryError::NotFound(_) => StatusCode::NOT_FOUND,
                StateQueryError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                StateQueryError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            error(status, e.to_string())
        }
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the state was not ready in time; retry later",
        ),
    }
}

/// `GET /blocks?from=H&count=N`.
async fn blocks(State(state): State<AppState>, request: Request) -> Response {
    let query = match super::blocks_query::BlocksQuery::parse(request.uri().query()) {
        Ok(query) => query,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match tokio::time::timeout(state.config.backend_timeout, state.backend.blocks(query)).await {
        Ok(Ok(value)) => axum::Json(value).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the chain worker did not answer in time; retry later",
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{ErrorBody, Health, Kind, Mode, ModuleOp, parse_activate, parse_kind};

    fn bytes(body: &serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(body).unwrap()
    }

    #[test]
    fn activation_requests_are_parsed_strictly_with_the_culprit_named() {
        let hash = "ab".repeat(32);
        let op = |body| parse_activate(&bytes(&body));
        assert_eq!(
            op(json!({"hash": hash})),
            Ok(ModuleOp::Activate {
                hash: crate::hashes::ModuleHash([0xab; 32]),
                mode: Mode::Live
            })
        );
        assert_eq!(
            op(json!({"hash": hash, "mode": "canary", "percent": 10})),
            Ok(ModuleOp::Activate {
                hash: crate::hashes::ModuleHash([0xab; 32]),
                mode: Mode::Canary(10)
            })
        );
        for (body, culprit) in [
            (json!({}), "`hash`"),
            (json!({"hash": "abcd"}), "\"abcd\""),
            (json!({"hash": hash, "mode": "fast"}), "\"fast\""),
            (json!({"hash": hash, "mode": "canary"}), "`percent`"),
            (
                json!({"hash": hash, "mode": "canary", "percent": 0}),
                "1 to 100",
            ),
            (
                json!({"hash": hash, "mode": "canary", "percent": 101}),
                "1 to 100",
            ),
        ] {
            let err = op(body.clone()).unwrap_err();
            assert!(err.contains(culprit), "{body}: {err}");
        }
    }

    /// A module operation's body is parsed once into its typed request: a field the request
    /// does not have is refused by name (before: ignored, so a typo like `percnt` was lost),
    /// and so is a body that is not a JSON object.
    #[test]
    fn module_operation_bodies_with_unknown_fields_are_refused_naming_the_field() {
        let hash = "ab".repeat(32);
        let err = parse_activate(&bytes(&json!({"hash": hash, "mode": "live", "percnt": 10})))
            .unwrap_err();
        assert!(err.contains("`percnt`"), "{err}");
        assert_eq!(
            parse_kind(&bytes(&json!({"kind": "deposits"}))),
            Ok(Kind::Deposits)
        );
        let err = parse_kind(&bytes(&json!({"kind": "deposits", "force": true}))).unwrap_err();
        assert!(err.contains("`force`"), "{err}");
        let err = parse_kind(&bytes(&json!({}))).unwrap_err();
        assert!(err.contains("`kind`"), "{err}");
        let err = parse_kind(&bytes(&json!({"kind": "storage"}))).unwrap_err();
        assert!(err.contains("storage"), "{err}");
        for body in [&b"[1]"[..], b"not json", b""] {
            assert!(parse_kind(body).is_err(), "{body:?}");
            assert!(parse_activate(body).is_err(), "{body:?}");
        }
    }

    /// The typed answers serialise to the JSON the CLI, the testnet runner and the tests read.
    #[test]
    fn typed_answers_keep_their_json_shapes() {
        let value = |v: &dyn erased::Ser| v.to_value();
        assert_eq!(
            value(&Health {
                status: "ok",
                reason: None
            }),
            json!({"status": "ok"})
        );
        assert_eq!(
            value(&Health {
                status: "failing",
                reason: Some("no peers".into())
            }),
            json!({"status": "failing", "reason": "no peers"})
        );
        assert_eq!(
            value(&ErrorBody {
                error: "gone".into(),
                reason: None
            }),
            json!({"error": "gone"})
        );
        assert_eq!(
            value(&ErrorBody {
                error: "big".into(),
                reason: Some("too-large")
            }),
            json!({"error": "big", "reason": "too-large"})
        );
    }

    mod erased {
        /// A serialisable answer, as a JSON value.
        pub trait Ser {
            fn to_value(&self) -> serde_json::Value;
        }
        impl<T: serde::Serialize> Ser for T {
            fn to_value(&self) -> serde_json::Value {
                serde_json::to_value(self).unwrap()
            }
        }
    }
}

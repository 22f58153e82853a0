//! The admin API's routes on axum: the bearer-token check, the body limits and the JSON
//! errors. Connection handling (timeouts of the head, caps) is in [`super::server`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::BodyExt as _;
use serde_json::json;

use super::server::{ConnPhase, Phase, ServerConfig};
use super::token::AdminToken;
use super::{AdminBackend, ModuleOp, ModuleOpError};
use crate::modules_store::upload::UploadOutcome;
use crate::runtime::{Kind, Mode};
use crate::state::schedule::Action;

/// Content type of `/metrics`.
const METRICS_TYPE: &str = crate::node::metrics::METRICS_CONTENT_TYPE;

/// The client's address, put on every request by the connection handler.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub(crate) SocketAddr);

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

/// A health answer: 200 `{"status":"ok"}` or 503 `{"status":"failing","reason":…}`.
fn health(result: Result<(), String>) -> Response {
    match result {
        Ok(()) => axum::Json(json!({ "status": "ok" })).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({ "status": "failing", "reason": reason })),
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
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
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
            axum::Json(json!({"error": message, "reason": "too-large"})),
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
    ([(header::CONTENT_TYPE, METRICS_TYPE)], text).into_response()
}

/// The admin server's counters as OpenMetrics lines, without the closing `# EOF`.
fn admin_metrics(evicted: u64) -> String {
    use prometheus_client::metrics::counter::Counter;
    let mut registry = prometheus_client::registry::Registry::with_prefix("modnode");
    let counter = Counter::<u64>::default();
    counter.inc_by(evicted);
    registry.register(
        "admin_connections_evicted",
        "Unauthenticated admin connections evicted to make room for others",
        counter,
    );
    let mut out = String::new();
    // Writing into a String cannot fail; the encoder only fails when its writer does.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    match out.rfind("# EOF") {
        Some(at) => out.get(..at).unwrap_or_default().to_string(),
        None => out,
    }
}

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
            axum::Json(json!({"status": status, "module": outcome.module()})).into_response()
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
                axum::Json(json!({"error": e.to_string(), "reason": e.code()})),
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
    let proposal: Proposal = match serde_json::from_slice(&body) {
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

/// Reads a small JSON object body (the module operations).
async fn read_json(state: &AppState, request: Request) -> Result<serde_json::Value, Response> {
    let (parts, body) = request.into_parts();
    let body = read_body(
        &parts.headers,
        body,
        state.config.max_body,
        state.config.io_timeout,
    )
    .await?;
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )),
    }
}

/// The string field `name` of `body`, or why not (answered as a 400).
fn field<'a>(body: &'a serde_json::Value, name: &str) -> Result<&'a str, String> {
    body.get(name)
        .and_then(|v| v.as_str())
        .ok_or_else(|| format!("missing string field `{name}`"))
}

/// `{"hash","mode","percent"}` → the operation, or why not (answered as a 400).
fn parse_activate(body: &serde_json::Value) -> Result<ModuleOp, String> {
    let hex_hash = field(body, "hash")?;
    let hash: [u8; 32] = hex::decode(hex_hash)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            format!("`hash` must be a module's full sha256 as 64 hex digits, not {hex_hash:?}")
        })?;
    let mode = match body.get("mode").and_then(|v| v.as_str()).unwrap_or("live") {
        "live" => Mode::Live,
        "shadow" => Mode::Shadow,
        "canary" => {
            let percent = body
                .get("percent")
                .and_then(serde_json::Value::as_u64)
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
    let body = match read_json(&state, request).await {
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
    let body = match read_json(state, request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    match field(&body, "kind").and_then(str::parse::<Kind>) {
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

    use super::{Mode, ModuleOp, parse_activate};

    #[test]
    fn activation_requests_are_parsed_strictly_with_the_culprit_named() {
        let hash = "ab".repeat(32);
        let op = |body| parse_activate(&body);
        assert_eq!(
            op(json!({"hash": hash})),
            Ok(ModuleOp::Activate {
                hash: [0xab; 32],
                mode: Mode::Live
            })
        );
        assert_eq!(
            op(json!({"hash": hash, "mode": "canary", "percent": 10})),
            Ok(ModuleOp::Activate {
                hash: [0xab; 32],
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
}

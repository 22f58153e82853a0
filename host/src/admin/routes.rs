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
use crate::modules_store::ModuleRecord;
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
    module: &'a ModuleRecord,
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

mod modules;

use modules::{
    activate_module, cancel_candidate, list_modules, propose_upgrade, rollback_module,
    upload_module,
};

#[cfg(test)]
mod tests;

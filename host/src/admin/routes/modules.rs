//! The module routes: upload, list, activate, roll back, cancel a candidate, and propose an
//! on-chain upgrade — each body parsed once into its request type.

use super::*;

pub(super) async fn upload_module(State(state): State<AppState>, request: Request) -> Response {
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

/// `POST /modules/propose` with `{"sha256", "kind", "activate_at"}` and optionally
/// `"action": "cancel"` to vote for revoking that scheduled upgrade.
pub(super) async fn propose_upgrade(State(state): State<AppState>, request: Request) -> Response {
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

pub(super) async fn list_modules(State(state): State<AppState>) -> Response {
    match state.backend.modules().await {
        Ok(value) => axum::Json(value).into_response(),
        Err(message) => error(StatusCode::INTERNAL_SERVER_ERROR, message),
    }
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
pub(super) fn parse_kind(body: &[u8]) -> Result<Kind, String> {
    let request: KindRequest = parse_body(body)?;
    request.kind.parse::<Kind>()
}

/// `{"hash","mode","percent"}` → the operation, or why not (answered as a 400).
pub(super) fn parse_activate(body: &[u8]) -> Result<ModuleOp, String> {
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

pub(super) async fn activate_module(State(state): State<AppState>, request: Request) -> Response {
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

pub(super) async fn rollback_module(State(state): State<AppState>, request: Request) -> Response {
    kind_op(&state, request, |kind| ModuleOp::Rollback { kind }).await
}

pub(super) async fn cancel_candidate(State(state): State<AppState>, request: Request) -> Response {
    kind_op(&state, request, |kind| ModuleOp::Cancel { kind }).await
}

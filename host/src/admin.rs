//! The node's admin API: a strict HTTP/1.1 JSON API on a local socket (axum on hyper), and its
//! client.
//!
//! The node binds it with [`server::bind`] (by default on `127.0.0.1:0`; a non-loopback address
//! only with `--admin-public`), which creates or loads the bearer token in
//! `<data_dir>/admin.token` (mode `0600`) and writes the bound address to
//! `<data_dir>/admin.addr`; [`server::serve`] then answers until told to shut down. The
//! [`client`] finds a running node from its data directory alone (anyone who can read the
//! token file may administer the node), or from a URL and a token file.
//!
//! Routes:
//! - `GET /status` (token): the node's status as JSON, from [`AdminBackend::status`].
//! - `GET /livez` and `GET /readyz` (no token): `200 {"status":"ok"}`, or `503
//!   {"status":"failing","reason":…}` ([`AdminBackend::livez`], [`AdminBackend::readyz`]).
//! - `GET /metrics` (no token): OpenMetrics text. Left open so a scraper needs no secret;
//!   metrics carry no secrets and the socket is local unless the operator binds it elsewhere.
//! - `POST /modules` (token): a module component as the raw body
//!   (`application/wasm`, at most the configured module size), handed to
//!   [`AdminBackend::upload_module`]; answers `{"status":"ready"|"already-stored","module":{…}}`
//!   once the module is validated, compiled and warmed, or an error with a `reason` code.
//! - `GET /modules` (token): per kind, the slot (active, scheduled, shadow with divergences,
//!   canary share, previous, breaker) and every stored or built-in version with its warm-up.
//! - `POST /modules/activate` (token): `{"hash":"<sha256 hex>","mode":"live"|"shadow"|"canary",
//!   "percent":N}` puts a ready module of a local kind into service ([`ModuleOp::Activate`]);
//!   answers the kind's slot status. Unknown hash → 404; not ready, consensus kind, already
//!   active → 409.
//! - `POST /modules/rollback` (token): `{"kind":"<kind>"}` back to the previous version at
//!   once ([`ModuleOp::Rollback`]).
//! - `POST /modules/cancel` (token): `{"kind":"<kind>"}` stops the kind's shadow or canary
//!   ([`ModuleOp::Cancel`]).
//! - `GET /state?height=H[&index=I|&pubkey=HEX]` (token): the state after the canonical block
//!   at `H` (the head without it), from the state cache or regenerated ([`state_query`]);
//!   503 while the node is behind on import.
//! - `GET /blocks?from=H&count=N` (token): height, hash, slot and state root of the canonical
//!   blocks from `H` ([`blocks_query`]; a testnet harness compares nodes with it).
//! - `GET /checkpoints/latest` and `GET /checkpoints/chunk?id=<hex>&index=N` (token): the
//!   newest stored checkpoint's manifest and its chunks ([`checkpoint_query`]), for
//!   `upgrade-check --from-node`.
//!
//! Every error answer is `{"error":"<what is wrong>"}` (plus `"reason"` for refused modules)
//! with a 4xx/5xx status, and every response closes the connection: one request per
//! connection keeps the server simple and its limits easy to reason about.
//!
//! The admin API takes no deposits: they come only from the deposit contract
//! ([`crate::deposit_source`]), whose [`deposit_json`](crate::deposit_source::deposit_json) is
//! the JSON form `modnode deposit submit` sends to the dev contract.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;

use crate::modules_store::upload::{UploadError, UploadOutcome};
use crate::runtime::{Kind, Mode};

pub mod blocks_query;
pub mod checkpoint_query;
pub mod client;
mod routes;
pub mod server;
pub mod state_query;
pub mod token;

pub use routes::METRICS_CONTENT_TYPE;
pub use token::{AdminToken, read_admin_addr};

/// A boxed future returned by [`AdminBackend`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the admin API asks of the node.
pub trait AdminBackend: Send + Sync + 'static {
    /// The node's status as a JSON object (height, peers, ...). Called on the server's task,
    /// so it must be cheap and must not block.
    fn status(&self) -> serde_json::Value;
    /// Metrics in the OpenMetrics text format. Same constraints as [`Self::status`].
    fn metrics(&self) -> String;
    /// Why the node cannot serve chain and module operations yet (it is still starting:
    /// loading modules, restoring a checkpoint), or `None` once it can. While `Some`, every
    /// route but `/status`, `/metrics`, `/livez` and `/readyz` answers 503 with the reason.
    /// Same constraints as [`Self::status`].
    fn starting(&self) -> Option<String> {
        None
    }
    /// Validates, precompiles, warms and stores an uploaded module (`source` says who sent
    /// it). Resolves only once the module is ready or refused.
    fn upload_module(
        &self,
        bytes: Vec<u8>,
        source: String,
    ) -> BoxFuture<'_, Result<UploadOutcome, UploadError>>;
    /// The node's modules: per kind the active one and every stored version, as JSON.
    fn modules(&self) -> BoxFuture<'_, Result<serde_json::Value, String>>;
    /// The state at a height ([`state_query`]). A backend without states refuses it.
    fn state(
        &self,
        query: state_query::StateQuery,
    ) -> BoxFuture<'_, Result<serde_json::Value, state_query::StateQueryError>> {
        let _ = query;
        Box::pin(async {
            Err(state_query::StateQueryError::NotFound(
                "this node serves no state queries".into(),
            ))
        })
    }
    /// Height, hash, slot and state root of the canonical blocks `query` names
    /// ([`blocks_query`]). Err = why not (ours). A backend without a chain refuses it.
    fn blocks(
        &self,
        query: blocks_query::BlocksQuery,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        let _ = query;
        Box::pin(async { Err("this node serves no blocks".to_string()) })
    }
    /// Liveness (`GET /livez`): the process and the chain worker answer. Err = why not.
    fn livez(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    /// Readiness (`GET /readyz`): started up, not syncing, the head within a few slots of the
    /// wall clock. Err = why not.
    fn readyz(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    /// Creates a checkpoint of the finalized state now; resolves with its summary once stored.
    fn create_checkpoint(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async { Err("this node does not create checkpoints".to_string()) })
    }
    /// The stored checkpoints, newest first.
    fn checkpoints(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async { Ok(serde_json::json!({ "checkpoints": [] })) })
    }
    /// The newest stored checkpoint, `None` when there is none ([`checkpoint_query`]).
    fn latest_checkpoint(&self) -> BoxFuture<'_, Result<Option<StoredCheckpoint>, String>> {
        Box::pin(async { Ok(None) })
    }
    /// Chunk `index` of the stored checkpoint `id`, `None` when this node does not have it.
    fn checkpoint_chunk(
        &self,
        id: [u8; 32],
        index: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
        let _ = (id, index);
        Box::pin(async { Ok(None) })
    }
    /// Makes this node's blocks vote for upgrading `kind` to the module `sha256` (hex) at
    /// `activate_at` (the module must be stored here, ready and of that kind), or, with
    /// [`Action::Cancel`](crate::state::schedule::Action), for cancelling that scheduled upgrade.
    /// Err = refused, with why.
    fn propose_upgrade(
        &self,
        action: crate::state::schedule::Action,
        kind: String,
        sha256: String,
        activate_at: u64,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        let _ = (action, kind, sha256, activate_at);
        Box::pin(async { Err("this node does not take upgrade proposals".to_string()) })
    }
    /// Activates a ready module (live, shadow or canary), rolls a kind back or stops its
    /// candidate; answers the kind's slot status as JSON. A backend without module slots refuses every operation.
    fn module_op(&self, op: ModuleOp) -> BoxFuture<'_, Result<serde_json::Value, ModuleOpError>> {
        let _ = op;
        Box::pin(async {
            Err(ModuleOpError::Internal(
                "this node does not run module slots".into(),
            ))
        })
    }
}

/// A stored checkpoint as `GET /checkpoints/latest` serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// Its height.
    pub height: u64,
    /// Its id.
    pub id: [u8; 32],
    /// Its encoded manifest.
    pub manifest: Vec<u8>,
}

/// A module slot operation asked through the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleOp {
    /// Put the ready module with this sha256 into service as `mode` (local kinds only).
    Activate {
        /// The module's sha256.
        hash: crate::hashes::ModuleHash,
        /// Live, shadow or canary.
        mode: Mode,
    },
    /// Return a local kind to its previous version at once.
    Rollback {
        /// The kind.
        kind: Kind,
    },
    /// Stop a local kind's shadow or canary; the active version is unchanged.
    Cancel {
        /// The kind.
        kind: Kind,
    },
}

/// Why the node refused a module operation; the message names the module or kind and says
/// what to do.
#[derive(Debug, thiserror::Error)]
pub enum ModuleOpError {
    /// No module with this hash is stored or built in (HTTP 404).
    #[error("{0}")]
    Unknown(String),
    /// The operation does not apply now: module not ready, consensus kind, already active,
    /// nothing to roll back to (HTTP 409).
    #[error("{0}")]
    Refused(String),
    /// The node failed (HTTP 500); not the operator's fault.
    #[error("{0}")]
    Internal(String),
}

/// Why an admin operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A file in the data directory could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The token file exists but does not hold a token; it is never overwritten.
    #[error(
        "admin token file {} is malformed ({reason}); delete it to have the node create a new one",
        path.display()
    )]
    CorruptToken {
        /// The token file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The address file does not exist: the node has not started its admin API.
    #[error("no admin address file {}: is a node running with this data directory?", path.display())]
    NoAddrFile {
        /// The address file that was looked for.
        path: PathBuf,
    },
    /// The address file does not hold a socket address.
    #[error("admin address file {} is malformed ({reason}); restart the node to rewrite it", path.display())]
    BadAddrFile {
        /// The address file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A non-loopback address was asked for without `--admin-public`.
    #[error(
        "refusing to bind the admin API on {addr}, which is not a loopback address: the bearer \
         token would travel in clear over the network; bind 127.0.0.1 (the default), or pass \
         --admin-public if you really mean it (and put TLS in front)"
    )]
    PublicBind {
        /// The requested address.
        addr: SocketAddr,
    },
    /// The listener could not be bound.
    #[error("cannot bind the admin API on {addr}: {source}")]
    Bind {
        /// The requested address.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Nothing listens at the node's address: the node is not running.
    #[error("the node at {addr} ({origin}) is not running; start it first")]
    NotRunning {
        /// The admin address.
        addr: SocketAddr,
        /// Where the address came from (`data directory …` or `--node`).
        origin: String,
    },
    /// A `--node` URL is not `http://<ip>:<port>`.
    #[error("bad node URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The connection failed or timed out mid-request.
    #[error("admin request to {addr} failed: {source}")]
    Connection {
        /// The node's admin address.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The node answered with a non-success status.
    #[error("the node refused the request (HTTP {status}): {message}")]
    Refused {
        /// The HTTP status code.
        status: u16,
        /// The server's `error` message.
        message: String,
        /// The server's `reason` code, if it gave one (refused modules).
        reason: Option<String>,
    },
    /// The node's answer was not a well-formed response.
    #[error("malformed response from the node at {addr}: {reason}")]
    BadResponse {
        /// The node's admin address.
        addr: SocketAddr,
        /// What is wrong with it.
        reason: String,
    },
}

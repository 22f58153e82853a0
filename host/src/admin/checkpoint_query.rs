//! `GET /checkpoints/latest` and `GET /checkpoints/chunk?id=<hex>&index=N`: the node's newest
//! stored checkpoint (its encoded manifest) and its chunks, for `modnode upgrade-check
//! --from-node` to replay a running node's real state from a checkpoint rather than from
//! genesis. The client verifies everything as a restorer does (the manifest against the block
//! it names, each chunk against the manifest); the node only serves what it stored, as it
//! serves peers over QUIC. Answers are bounded: a manifest or chunk larger than
//! [`MAX_ANSWER_BYTES`] is refused with 413 rather than sent.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::routes::{AppState, error};

/// Largest manifest or chunk one answer carries (before hex encoding, which doubles it; the
/// client reads answers of up to 4 MiB). The nodes' default target chunk size is 1 MiB.
pub const MAX_ANSWER_BYTES: usize = 1536 * 1024;

/// A parsed `/checkpoints/chunk` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkQuery {
    /// The checkpoint's id.
    pub id: [u8; 32],
    /// The chunk's position in its manifest.
    pub index: u32,
}

impl ChunkQuery {
    /// Parses `id=<64 hex digits>&index=N` (both required, each once); nothing else. Err =
    /// what is wrong with the client's query.
    pub fn parse(query: Option<&str>) -> Result<Self, String> {
        let (mut id, mut index) = (None, None);
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("query parameter {pair:?} has no value"))?;
            let fresh = match key {
                "id" => {
                    let bytes: [u8; 32] =
                        hex::decode(value)
                            .ok()
                            .and_then(|b| b.try_into().ok())
                            .ok_or_else(|| format!("id {value:?} is not 64 hex digits"))?;
                    id.replace(bytes).is_none()
                }
                "index" => {
                    let number: u32 = value
                        .parse()
                        .map_err(|_| format!("index {value:?} is not a chunk index"))?;
                    index.replace(number).is_none()
                }
                other => return Err(format!("unknown query parameter {other:?} (id, index)")),
            };
            if !fresh {
                return Err(format!("{key} given twice"));
            }
        }
        match (id, index) {
            (Some(id), Some(index)) => Ok(Self { id, index }),
            _ => Err("give both id=<checkpoint id> and index=N".into()),
        }
    }
}

/// The answer to `/checkpoints/latest`. (Fields in alphabetical order.)
#[derive(Debug, serde::Serialize)]
struct LatestAnswer {
    /// The checkpoint's height.
    height: u64,
    /// Its id, hex.
    id: String,
    /// Its encoded manifest, hex.
    manifest: String,
}

/// The answer to `/checkpoints/chunk`. (Fields in alphabetical order.)
#[derive(Debug, serde::Serialize)]
struct ChunkAnswer {
    /// The chunk's bytes, hex.
    bytes: String,
    /// The checkpoint's id, hex.
    id: String,
    /// The chunk's position in the manifest.
    index: u32,
}

fn too_large(what: &str, len: usize) -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "{what} is {len} bytes, more than the {MAX_ANSWER_BYTES} one admin answer carries; \
             fetch the checkpoint from a peer instead"
        ),
    )
}

/// `GET /checkpoints/latest`: 200 with the newest stored checkpoint, 404 when there is none.
pub(crate) async fn latest(State(state): State<AppState>) -> Response {
    let asked = state.backend.latest_checkpoint();
    match tokio::time::timeout(state.config.backend_timeout, asked).await {
        Ok(Ok(Some(found))) if found.manifest.len() > MAX_ANSWER_BYTES => {
            too_large("the manifest", found.manifest.len())
        }
        Ok(Ok(Some(found))) => axum::Json(LatestAnswer {
            height: found.height,
            id: hex::encode(found.id),
            manifest: hex::encode(&found.manifest),
        })
        .into_response(),
        Ok(Ok(None)) => error(StatusCode::NOT_FOUND, "this node stores no checkpoint yet"),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the checkpoint store did not answer in time; retry later",
        ),
    }
}

/// `GET /checkpoints/chunk?id=<hex>&index=N`: 200 with the chunk, 404 when this node does not
/// have it (unknown checkpoint, pruned, or no such index).
pub(crate) async fn chunk(State(state): State<AppState>, request: Request) -> Response {
    let query = match ChunkQuery::parse(request.uri().query()) {
        Ok(query) => query,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let asked = state.backend.checkpoint_chunk(query.id, query.index);
    match tokio::time::timeout(state.config.backend_timeout, asked).await {
        Ok(Ok(Some(bytes))) if bytes.len() > MAX_ANSWER_BYTES => {
            too_large(&format!("chunk {}", query.index), bytes.len())
        }
        Ok(Ok(Some(bytes))) => axum::Json(ChunkAnswer {
            bytes: hex::encode(&bytes),
            id: hex::encode(query.id),
            index: query.index,
        })
        .into_response(),
        Ok(Ok(None)) => error(
            StatusCode::NOT_FOUND,
            format!(
                "this node has no chunk {} of checkpoint {}",
                query.index,
                hex::encode(query.id)
            ),
        ),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the checkpoint store did not answer in time; retry later",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::ChunkQuery;

    #[test]
    fn chunk_queries_are_parsed_strictly() {
        let id = "ab".repeat(32);
        let q = ChunkQuery::parse(Some(&format!("id={id}&index=7"))).unwrap();
        assert_eq!(q.id, [0xab; 32]);
        assert_eq!(q.index, 7);
        for bad in [
            String::new(),
            format!("id={id}"),
            "index=1".to_string(),
            format!("id={id}&index=1&index=2"),
            format!("id={}&index=1", "ab".repeat(31)),
            format!("id={id}&index=-1"),
            format!("id={id}&index=1&raw=1"),
        ] {
            assert!(ChunkQuery::parse(Some(&bad)).is_err(), "{bad}");
        }
    }
}

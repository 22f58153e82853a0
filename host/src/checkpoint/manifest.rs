//! The checkpoint manifest: what was chunked (module, version, every output-changing parameter),
//! which state (height, block hash, state root, registry root, leaf count, the non-leaf parts)
//! and the ordered chunk list. Its id is the hash of its canonical encoding, so chunks of
//! different versions or parameters can never mix.
//!
//! A manifest from a peer is decoded with [`Manifest::decode`], which checks everything that can
//! be checked before a single chunk is fetched: bounded sizes and counts, ranges that tile the
//! leaf space exactly, and a state root that follows from the registry root, the extras and,
//! for a state holding deposits@3's pending-deposit queue, the queue's tree root and counters
//! ([`QueuePart`], format [`MANIFEST_FORMAT_QUEUE`]).

use sha2::{Digest, Sha256};

use super::queue::{QUEUE_PART_BYTES, QueuePart};
use crate::hashes::{BlockHash, ModuleHash, StateRoot};
use crate::state::merkle::Hash32;
use crate::state::{Eth1State, Schedule, state_root, state_root_with};

const MAGIC: &[u8; 4] = b"MNCM";

mod error;

pub use error::{ManifestError, StateRootMismatch};

/// Version of the manifest encoding of checkpoints whose chunks carry their range proofs
/// (checkpoint-v1, -v2).
pub const MANIFEST_FORMAT: u8 = 1;
/// Version of the encoding that also lists each chunk's subtree root (checkpoint-v3, whose
/// chunks carry no proof: see [`super::roots`]). Format-1 manifests keep their bytes and ids.
pub const MANIFEST_FORMAT_ROOTS: u8 = 2;
/// Version of the encoding of a state that holds deposits@3's pending-deposit queue: the
/// chunk list ends with the host-made queue chunks, followed by the queue's part
/// ([`QueuePart`]: tree root, counters, queue chunk count) and the registry chunks' roots
/// (when the module's chunks carry no proof). A state without a queue is still encoded as
/// format 1 or 2, byte for byte; a node that knows only those refuses format 3
/// ([`ManifestError::UnsupportedFormat`]) rather than restoring a state without its queue.
pub const MANIFEST_FORMAT_QUEUE: u8 = 3;
/// Domain of the checkpoint id hash.
const ID_DOMAIN: &[u8] = b"modnode-checkpoint-manifest-v1";

/// Bounds a manifest must respect; peers' manifests beyond them are refused before any fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestLimits {
    /// Most chunks in one checkpoint.
    pub max_chunks: usize,
    /// Largest encoded chunk, in bytes.
    pub max_chunk_bytes: u32,
    /// Most module parameters.
    pub max_params: usize,
    /// Longest parameter name or value, in bytes.
    pub max_param_bytes: usize,
    /// Largest encoding of the non-leaf state parts.
    pub max_extras_bytes: usize,
}

impl Default for ManifestLimits {
    fn default() -> Self {
        Self {
            max_chunks: 1 << 16,
            max_chunk_bytes: 64 << 20,
            max_params: 32,
            max_param_bytes: 256,
            max_extras_bytes: 1 << 20,
        }
    }
}

/// One chunk as the manifest lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry {
    /// `sha256` of the chunk's bytes.
    pub hash: Hash32,
    /// First leaf.
    pub start: u64,
    /// One past the last leaf.
    pub end: u64,
    /// Encoded size in bytes.
    pub size: u32,
}

/// A checkpoint's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// sha256 of the chunking module's component.
    pub module_hash: ModuleHash,
    /// The chunking algorithm's version (its `describe`).
    pub module_version: u32,
    /// Every output-changing parameter: the module's own (`describe`) and the host's
    /// (`target-chunk-bytes`), in order.
    pub params: Vec<(String, String)>,
    /// Height of the checkpointed block.
    pub height: u64,
    /// Hash of the checkpointed block.
    pub block_hash: BlockHash,
    /// The block's state root.
    pub state_root: StateRoot,
    /// Root of the registry tree the chunks' range proofs lead to.
    pub registry_root: Hash32,
    /// Number of state leaves.
    pub leaf_count: u64,
    /// Bytes per state leaf.
    pub leaf_size: u32,
    /// The non-leaf state parts ([`encode_extras`]: the eth1 state and the module schedule).
    pub extras: Vec<u8>,
    /// The chunks, in leaf order.
    pub chunks: Vec<ChunkEntry>,
    /// Each registry chunk's subtree root in the registry tree, `chunk_roots[i]` for
    /// `chunks[i]`, when the module's chunks carry no range proof (checkpoint-v3); empty
    /// otherwise. Checked against the registry root by [`validate`](Self::validate), before any
    /// chunk is fetched.
    pub chunk_roots: Vec<Hash32>,
    /// deposits@3's pending-deposit queue, for a state that holds one: its tree root and
    /// counters; its chunks are the last [`QueuePart::chunks`] of `chunks` (see
    /// [`super::queue`]). `None`: the state has no queue (format 1 or 2).
    pub queue: Option<QueuePart>,
}

/// The non-leaf state parts as manifest extras: `eth1 length u32 | eth1 state | schedule`.
pub fn encode_extras(eth1: &Eth1State, schedule: &Schedule) -> Vec<u8> {
    let eth1 = eth1.encode();
    let mut out = Vec::with_capacity(eth1.len().saturating_add(64));
    put_bytes(&mut out, &eth1);
    out.extend_from_slice(&schedule.encode());
    out
}

/// Decodes [`encode_extras`]'s output.
pub fn decode_extras(extras: &[u8]) -> Option<(Eth1State, Schedule)> {
    let (len, rest) = extras.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    let (eth1, schedule) = rest.split_at_checked(len)?;
    Some((Eth1State::decode(eth1)?, Schedule::decode(schedule)?))
}

/// The full state root a registry root and the extras commit to, if the extras decode.
pub fn state_root_of(registry_root: &Hash32, extras: &[u8]) -> Option<Hash32> {
    decode_extras(extras).map(|(eth1, schedule)| state_root(registry_root, &eth1, &schedule))
}

/// The full state root a registry root, the extras and a pending-deposit queue's part commit
/// to (`None`: no queue, [`state_root_of`]), if the extras decode.
pub fn state_root_with_queue(
    registry_root: &Hash32,
    extras: &[u8],
    queue: Option<&QueuePart>,
) -> Option<Hash32> {
    let pending = queue.map(QueuePart::root);
    decode_extras(extras)
        .map(|(eth1, schedule)| state_root_with(registry_root, &eth1, &schedule, pending.as_ref()))
}

impl Manifest {
    /// The checkpoint id: `sha256(domain ‖ encode())`.
    pub fn id(&self) -> Hash32 {
        Sha256::new()
            .chain_update(ID_DOMAIN)
            .chain_update(self.encode())
            .finalize()
            .into()
    }

    /// The value of module parameter `name`, if the manifest has it.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Sum of the chunks' sizes.
    pub fn total_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| u64::from(c.size)).sum()
    }

    /// How many chunks, at the front of `chunks`, are the module's registry chunks (the rest
    /// are the pending-deposit queue's).
    pub fn registry_chunk_count(&self) -> usize {
        let queue = self
            .queue
            .map_or(0, |q| usize::try_from(q.chunks).unwrap_or(usize::MAX));
        self.chunks.len().saturating_sub(queue)
    }

    /// The module's registry chunks, in leaf order.
    pub fn registry_chunks(&self) -> &[ChunkEntry] {
        self.chunks
            .get(..self.registry_chunk_count())
            .unwrap_or_default()
    }

    /// The host's pending-deposit queue chunks, in entry order (empty without a queue).
    pub fn queue_chunks(&self) -> &[ChunkEntry] {
        self.chunks
            .get(self.registry_chunk_count()..)
            .unwrap_or_default()
    }

    /// The encoding format: [`MANIFEST_FORMAT_QUEUE`] with a queue, else
    /// [`MANIFEST_FORMAT_ROOTS`] with chunk roots, else [`MANIFEST_FORMAT`].
    pub fn format(&self) -> u8 {
        if self.queue.is_some() {
            MANIFEST_FORMAT_QUEUE
        } else if self.chunk_roots.is_empty() {
            MANIFEST_FORMAT
        } else {
            MANIFEST_FORMAT_ROOTS
        }
    }

    /// Canonical encoding (integers little-endian; strings and byte lists length-prefixed).
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(256usize.saturating_add(self.chunks.len().saturating_mul(52)));
        out.extend_from_slice(MAGIC);
        out.push(self.format());
        out.extend_from_slice(self.module_hash.as_bytes());
        out.extend_from_slice(&self.module_version.to_le_bytes());
        put_len(&mut out, self.params.len());
        for (k, v) in &self.params {
            put_bytes(&mut out, k.as_bytes());
            put_bytes(&mut out, v.as_bytes());
        }
        out.extend_from_slice(&self.height.to_le_bytes());
        out.extend_from_slice(self.block_hash.as_bytes());
        out.extend_from_slice(self.state_root.as_bytes());
        out.extend_from_slice(&self.registry_root);
        out.extend_from_slice(&self.leaf_count.to_le_bytes());
        out.extend_from_slice(&self.leaf_size.to_le_bytes());
        put_bytes(&mut out, &self.extras);
        put_len(&mut out, self.chunks.len());
        for c in &self.chunks {
            out.extend_from_slice(&c.hash);
            out.extend_from_slice(&c.start.to_le_bytes());
            out.extend_from_slice(&c.end.to_le_bytes());
            out.extend_from_slice(&c.size.to_le_bytes());
        }
        if let Some(queue) = &self.queue {
            // Format 3: the queue's part, then a flag and the registry chunks' roots.
            out.reserve(QUEUE_PART_BYTES.saturating_add(1));
            queue.encode(&mut out);
            out.push(u8::from(!self.chunk_roots.is_empty()));
        }
        // Formats 2 and 3: one root per registry chunk, the count being theirs.
        for root in &self.chunk_roots {
            out.extend_from_slice(root);
        }
        out
    }

    /// Decodes and [`validate`](Self::validate)s a manifest, bounded by `limits` before any
    /// allocation a length field asks for.
    pub fn decode(bytes: &[u8], limits: &ManifestLimits) -> Result<Self, ManifestError> {
        let mut r = Reader { bytes };
        if r.array::<4>("magic")? != *MAGIC {
            return Err(ManifestError::BadMagic);
        }
        let [format] = r.array::<1>("format")?;
        if ![
            MANIFEST_FORMAT,
            MANIFEST_FORMAT_ROOTS,
            MANIFEST_FORMAT_QUEUE,
        ]
        .contains(&format)
        {
            return Err(ManifestError::UnsupportedFormat(format));
        }
        let module_hash = ModuleHash(r.array::<32>("module hash")?);
        let module_version = u32::from_le_bytes(r.array("module version")?);
        let param_count = r.u32("parameter count")?;
        if param_count > limits.max_params as u64 {
            return Err(ManifestError::BadParam {
                index: limits.max_params,
                reason: format!("{param_count} parameters, at most {}", limits.max_params),
            });
        }
        let mut params = Vec::new();
        for index in 0..param_count {
            let index = usize::try_from(index).unwrap_or(usize::MAX);
            let key = r.string(index, limits.max_param_bytes)?;
            let value = r.string(index, limits.max_param_bytes)?;
            params.push((key, value));
        }
        let height = u64::from_le_bytes(r.array("height")?);
        let block_hash = BlockHash(r.array::<32>("block hash")?);
        let state_root = StateRoot(r.array::<32>("state root")?);
        let registry_root = r.array::<32>("registry root")?;
        let leaf_count = u64::from_le_bytes(r.array("leaf count")?);
        let leaf_size = u32::from_le_bytes(r.array("leaf size")?);
        let extras_len = r.u32("extras length")?;
        if extras_len > limits.max_extras_bytes as u64 {
            return Err(ManifestError::ExtrasTooLarge {
                size: extras_len,
                max: limits.max_extras_bytes,
            });
        }
        let extras = r.take(to_usize(extras_len), "extras")?.to_vec();
        let chunk_count = r.u32("chunk count")?;
        if chunk_count > limits.max_chunks as u64 {
            return Err(ManifestError::TooManyChunks {
                count: chunk_count,
                max: limits.max_chunks,
            });
        }
        let mut chunks = Vec::with_capacity(to_usize(chunk_count));
        for _ in 0..chunk_count {
            chunks.push(ChunkEntry {
                hash: r.array("chunk hash")?,
                start: u64::from_le_bytes(r.array("chunk start")?),
                end: u64::from_le_bytes(r.array("chunk end")?),
                size: u32::from_le_bytes(r.array("chunk size")?),
            });
        }
        let mut queue = None;
        let mut with_roots = format == MANIFEST_FORMAT_ROOTS;
        let mut registry_chunks = chunks.len();
        if format == MANIFEST_FORMAT_QUEUE {
            let (part, rest) =
                QueuePart::decode(r.bytes).ok_or(ManifestError::Truncated("queue part"))?;
            r.bytes = rest;
            registry_chunks = usize::try_from(part.chunks)
                .ok()
                .and_then(|n| chunks.len().checked_sub(n))
                .ok_or_else(|| {
                    ManifestError::Queue(format!(
                        "{} queue chunks counted, {} chunks listed in all",
                        part.chunks,
                        chunks.len()
                    ))
                })?;
            let [flag] = r.array::<1>("chunk roots flag")?;
            with_roots = match flag {
                0 => false,
                1 => true,
                other => {
                    return Err(ManifestError::ChunkRoots(format!(
                        "chunk roots flag {other} is neither 0 nor 1"
                    )));
                }
            };
            queue = Some(part);
        }
        let mut chunk_roots = Vec::new();
        if with_roots {
            chunk_roots.reserve_exact(registry_chunks);
            for _ in 0..registry_chunks {
                chunk_roots.push(r.array("chunk root")?);
            }
            if chunk_roots.is_empty() {
                // An empty root list is the encoding without roots; two encodings of one
                // manifest are refused.
                return Err(ManifestError::ChunkRoots(format!(
                    "format {format} says it lists chunk roots, and lists none"
                )));
            }
        }
        if !r.bytes.is_empty() {
            return Err(ManifestError::TrailingBytes(r.bytes.len()));
        }
        let manifest = Self {
            module_hash,
            module_version,
            params,
            height,
            block_hash,
            state_root,
            registry_root,
            leaf_count,
            leaf_size,
            extras,
            chunks,
            chunk_roots,
            queue,
        };
        manifest.validate(limits)?;
        Ok(manifest)
    }

    /// The chunk roots hashed up to the registry root (see [`super::roots`]); refused when they
    /// are not whole subtrees leading to it.
    pub fn root_tree(&self) -> Result<super::roots::RootTree, ManifestError> {
        super::roots::RootTree::new(
            self.registry_chunks(),
            &self.chunk_roots,
            self.leaf_count,
            &self.registry_root,
        )
        .map_err(ManifestError::ChunkRoots)
    }

    /// Checks the bounds, that the registry chunk ranges tile `[0, leaf_count)` exactly, in
    /// order, that the queue chunks (if any) tile the queue's entries, and that the state root
    /// follows from the registry root, the extras and the queue's root and counters.
    pub fn validate(&self, limits: &ManifestLimits) -> Result<(), ManifestError> {
        if self.chunks.len() > limits.max_chunks {
            return Err(ManifestError::TooManyChunks {
                count: u64::try_from(self.chunks.len()).unwrap_or(u64::MAX),
                max: limits.max_chunks,
            });
        }
        if self.params.len() > limits.max_params {
            return Err(ManifestError::BadParam {
                index: limits.max_params,
                reason: format!(
                    "{} parameters, at most {}",
                    self.params.len(),
                    limits.max_params
                ),
            });
        }
        if let Some((index, _)) = self.params.iter().enumerate().find(|(_, (k, v))| {
            k.len() > limits.max_param_bytes || v.len() > limits.max_param_bytes
        }) {
            return Err(ManifestError::BadParam {
                index,
                reason: format!("longer than {} bytes", limits.max_param_bytes),
            });
        }
        if self.extras.len() > limits.max_extras_bytes {
            return Err(ManifestError::ExtrasTooLarge {
                size: u64::try_from(self.extras.len()).unwrap_or(u64::MAX),
                max: limits.max_extras_bytes,
            });
        }
        let mut next = 0u64;
        for (index, c) in self.registry_chunks().iter().enumerate() {
            if c.size == 0 || c.size > limits.max_chunk_bytes {
                return Err(ManifestError::ChunkSize {
                    index,
                    size: c.size,
                    max: limits.max_chunk_bytes,
                });
            }
            if c.start >= c.end {
                return Err(ManifestError::EmptyRange {
                    index,
                    start: c.start,
                    end: c.end,
                });
            }
            if c.start > next {
                return Err(ManifestError::Gap {
                    index,
                    from: next,
                    to: c.start,
                });
            }
            if c.start < next {
                return Err(ManifestError::Overlap {
                    index,
                    start: c.start,
                    previous_end: next,
                });
            }
            if c.end > self.leaf_count {
                return Err(ManifestError::PastEnd {
                    index,
                    end: c.end,
                    leaf_count: self.leaf_count,
                });
            }
            next = c.end;
        }
        if next != self.leaf_count {
            return Err(ManifestError::Gap {
                index: self.registry_chunk_count(),
                from: next,
                to: self.leaf_count,
            });
        }
        if let Some(queue) = &self.queue {
            queue
                .validate(self.queue_chunks(), self.registry_chunk_count(), limits)
                .map_err(ManifestError::Queue)?;
        }
        if !self.chunk_roots.is_empty() {
            self.root_tree()?;
        }
        let computed = StateRoot(
            state_root_with_queue(&self.registry_root, &self.extras, self.queue.as_ref())
                .ok_or(ManifestError::ExtrasMalformed)?,
        );
        if computed != self.state_root {
            return Err(ManifestError::StateRoot(Box::new(StateRootMismatch {
                height: self.height,
                block: self.block_hash,
                claimed: self.state_root,
                computed,
                with_queue: self.queue.is_some(),
            })));
        }
        Ok(())
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // Lengths are bounded far below 4 GiB by the limits; saturate rather than wrap.
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ManifestError> {
        let (head, rest) = self
            .bytes
            .split_at_checked(n)
            .ok_or(ManifestError::Truncated(what))?;
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ManifestError> {
        let (head, rest) = self
            .bytes
            .split_first_chunk::<N>()
            .ok_or(ManifestError::Truncated(what))?;
        self.bytes = rest;
        Ok(*head)
    }

    fn u32(&mut self, what: &'static str) -> Result<u64, ManifestError> {
        Ok(u64::from(u32::from_le_bytes(self.array(what)?)))
    }

    fn string(&mut self, index: usize, max: usize) -> Result<String, ManifestError> {
        let len = self.u32("parameter length")?;
        if len > max as u64 {
            return Err(ManifestError::BadParam {
                index,
                reason: format!("{len} bytes, at most {max}"),
            });
        }
        let bytes = self.take(to_usize(len), "parameter")?;
        String::from_utf8(bytes.to_vec()).map_err(|_| ManifestError::BadParam {
            index,
            reason: "not UTF-8".into(),
        })
    }
}

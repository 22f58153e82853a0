//! A checkpoint in one file (`modnode checkpoint export`, `modnode run --restore-from`): the
//! offline counterpart of the chunks peers serve over QUIC. The file carries the same manifest,
//! block `H` and chunks a network restore fetches, and a restore from it goes through the same
//! [`Restorer`](super::Restorer) checks; the file itself is trusted for nothing.
//!
//! Layout (integers big-endian), version [`FILE_FORMAT`]:
//!
//! ```text
//! "MNCKFILE"                 8 bytes, magic
//! format version             u16
//! manifest length            u32, at most MAX_MANIFEST_BYTES
//! manifest                   Manifest::encode
//! block length               u32, at most MAX_BLOCK_BYTES
//! block H                    Block::encode
//! chunk 0 .. chunk n-1       in manifest order, each exactly the size the manifest lists
//! ```
//!
//! Nothing follows the last chunk. A reader refuses another magic or version, a length over its
//! bound, a file that ends early (naming what it was reading and at which byte) and bytes after
//! the last chunk; whether a chunk's bytes are the listed ones is the restorer's check.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::manifest::{Manifest, ManifestError, ManifestLimits};

/// The file's first bytes.
pub const FILE_MAGIC: &[u8; 8] = b"MNCKFILE";
/// The layout version this build writes and reads.
pub const FILE_FORMAT: u16 = 1;
/// Largest manifest a file may carry (the default [`ManifestLimits`] allow about 4 MiB).
pub const MAX_MANIFEST_BYTES: u32 = 8 << 20;
/// Largest block `H` a file may carry.
pub const MAX_BLOCK_BYTES: u32 = 32 << 20;

/// Why a checkpoint file cannot be read or written. Each names the file; all but `Io` are the
/// file's fault (damaged, cut short, or not a checkpoint file of this version).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointFileError {
    /// Reading or writing the file failed (ours: a permission, a full disk, a missing file).
    #[error("checkpoint file {}: cannot {action}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the checkpoint file magic.
    #[error(
        "{} is not a modnode checkpoint file (it does not start with \"MNCKFILE\"); give the \
         file `modnode checkpoint export` wrote",
        path.display()
    )]
    NotACheckpointFile {
        /// The file.
        path: PathBuf,
    },
    /// The file is of a layout version this build does not read.
    #[error(
        "checkpoint file {} has format version {found}; this build reads version {FILE_FORMAT}: \
         export it again with this modnode version, or restore with the version that wrote it",
        path.display()
    )]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u16,
    },
    /// A length in the file is over its bound.
    #[error("checkpoint file {}: the {what} is {size} bytes, more than the {limit} allowed; the file is damaged", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The part at fault.
        what: &'static str,
        /// The length the file states.
        size: u64,
        /// The bound.
        limit: u64,
    },
    /// The file ends before a part it must hold.
    #[error(
        "checkpoint file {} is truncated: it ends in the {what} at byte {offset}, {missing} \
         bytes short; copy the file again",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The part being read (`chunk 7`, `manifest`, …).
        what: String,
        /// Where the file ended (bytes from its start).
        offset: u64,
        /// Bytes missing from that part.
        missing: u64,
    },
    /// The manifest in the file does not decode or is invalid.
    #[error("checkpoint file {}: its manifest is refused: {source}", path.display())]
    Manifest {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: ManifestError,
    },
    /// Bytes follow the last chunk.
    #[error(
        "checkpoint file {}: bytes follow its last chunk (at byte {offset}); the file is \
         damaged or not one export",
        path.display()
    )]
    Trailing {
        /// The file.
        path: PathBuf,
        /// Where the last chunk ended.
        offset: u64,
    },
}

/// Writes a checkpoint file: [`begin`](Self::begin) with the manifest and block, each chunk in
/// manifest order with [`chunk`](Self::chunk), then [`finish`](Self::finish).
pub struct CheckpointFileWriter<W: Write> {
    out: W,
    path: PathBuf,
}

impl<W: Write> CheckpointFileWriter<W> {
    /// Writes the header, `manifest` and `block` (the encoded block `H`) to `out` (`path` names
    /// it in errors).
    pub fn begin(
        out: W,
        path: &Path,
        manifest: &Manifest,
        block: &[u8],
    ) -> Result<Self, CheckpointFileError> {
        let mut writer = Self {
            out,
            path: path.to_path_buf(),
        };
        let manifest = manifest.encode();
        let manifest_len = writer.length("manifest", manifest.len(), MAX_MANIFEST_BYTES)?;
        let block_len = writer.length("block", block.len(), MAX_BLOCK_BYTES)?;
        writer.write(FILE_MAGIC)?;
        writer.write(&FILE_FORMAT.to_be_bytes())?;
        writer.write(&manifest_len.to_be_bytes())?;
        writer.write(&manifest)?;
        writer.write(&block_len.to_be_bytes())?;
        writer.write(block)?;
        Ok(writer)
    }

    fn length(
        &self,
        what: &'static str,
        len: usize,
        limit: u32,
    ) -> Result<u32, CheckpointFileError> {
        u32::try_from(len)
            .ok()
            .filter(|&n| n <= limit)
            .ok_or(CheckpointFileError::TooLarge {
                path: self.path.clone(),
                what,
                size: u64::try_from(len).unwrap_or(u64::MAX),
                limit: u64::from(limit),
            })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), CheckpointFileError> {
        self.out
            .write_all(bytes)
            .map_err(|source| CheckpointFileError::Io {
                path: self.path.clone(),
                action: "write",
                source,
            })
    }

    /// Appends the next chunk's bytes.
    pub fn chunk(&mut self, bytes: &[u8]) -> Result<(), CheckpointFileError> {
        self.write(bytes)
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> Result<W, CheckpointFileError> {
        self.out.flush().map_err(|source| CheckpointFileError::Io {
            path: self.path.clone(),
            action: "write",
            source,
        })?;
        Ok(self.out)
    }
}

/// The input with the bytes read so far counted, so an early end is named by its offset.
struct Input<R: Read> {
    input: R,
    path: PathBuf,
    offset: u64,
}

impl<R: Read> Input<R> {
    /// A `u32` length (at most `limit`) and that many bytes.
    fn read_part(
        &mut self,
        what: &'static str,
        limit: u32,
    ) -> Result<Vec<u8>, CheckpointFileError> {
        let mut len = [0u8; 4];
        self.read_exact(what, &mut len)?;
        let len = u32::from_be_bytes(len);
        if len > limit {
            return Err(CheckpointFileError::TooLarge {
                path: self.path.clone(),
                what,
                size: u64::from(len),
                limit: u64::from(limit),
            });
        }
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
        self.read_exact(what, &mut bytes)?;
        Ok(bytes)
    }

    /// Fills `buf`, or says where the file ended.
    fn read_exact(&mut self, what: &str, buf: &mut [u8]) -> Result<(), CheckpointFileError> {
        let got = self.read_up_to(buf)?;
        if got < buf.len() {
            return Err(CheckpointFileError::Truncated {
                path: self.path.clone(),
                what: what.to_string(),
                offset: self.offset,
                missing: u64::try_from(buf.len().saturating_sub(got)).unwrap_or(u64::MAX),
            });
        }
        Ok(())
    }

    /// Reads until `buf` is full or the file ends; returns the bytes read.
    fn read_up_to(&mut self, buf: &mut [u8]) -> Result<usize, CheckpointFileError> {
        let mut filled = 0usize;
        while let Some(rest) = buf.get_mut(filled..).filter(|r| !r.is_empty()) {
            match self.input.read(rest) {
                Ok(0) => break,
                Ok(n) => {
                    filled = filled.saturating_add(n);
                    self.offset = self
                        .offset
                        .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(CheckpointFileError::Io {
                        path: self.path.clone(),
                        action: "read",
                        source,
                    });
                }
            }
        }
        Ok(filled)
    }
}

/// Reads a checkpoint file: the header, manifest and block on [`open`](Self::open), then the
/// chunks one by one in manifest order.
pub struct CheckpointFileReader<R: Read> {
    input: Input<R>,
    manifest: Manifest,
    block: Vec<u8>,
    next: usize,
}

impl CheckpointFileReader<BufReader<File>> {
    /// Opens the checkpoint file at `path`.
    pub fn open(path: &Path, limits: &ManifestLimits) -> Result<Self, CheckpointFileError> {
        let file = File::open(path).map_err(|source| CheckpointFileError::Io {
            path: path.to_path_buf(),
            action: "open",
            source,
        })?;
        Self::new(BufReader::with_capacity(1 << 20, file), path, limits)
    }
}

impl<R: Read> CheckpointFileReader<R> {
    /// Reads the header, manifest (decoded and validated against `limits`) and block from
    /// `input` (`path` names it in errors).
    pub fn new(
        input: R,
        path: &Path,
        limits: &ManifestLimits,
    ) -> Result<Self, CheckpointFileError> {
        let mut input = Input {
            input,
            path: path.to_path_buf(),
            offset: 0,
        };
        let mut magic = [0u8; 8];
        let got = input.read_up_to(&mut magic)?;
        if got < magic.len() || &magic != FILE_MAGIC {
            return Err(CheckpointFileError::NotACheckpointFile {
                path: input.path.clone(),
            });
        }
        let mut version = [0u8; 2];
        input.read_exact("header", &mut version)?;
        let found = u16::from_be_bytes(version);
        if found != FILE_FORMAT {
            return Err(CheckpointFileError::UnsupportedFormat {
                path: input.path.clone(),
                found,
            });
        }
        let manifest = input.read_part("manifest", MAX_MANIFEST_BYTES)?;
        let manifest = Manifest::decode(&manifest, limits).map_err(|source| {
            CheckpointFileError::Manifest {
                path: input.path.clone(),
                source,
            }
        })?;
        let block = input.read_part("block", MAX_BLOCK_BYTES)?;
        Ok(Self {
            input,
            manifest,
            block,
            next: 0,
        })
    }

    /// The checkpoint's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The encoded block `H` (not yet decoded: that needs the chain's parameters).
    pub fn block(&self) -> &[u8] {
        &self.block
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.input.path
    }

    /// The next chunk and its index, `None` after the last; its size is the listed one, its
    /// bytes are not checked here.
    pub fn next_chunk(&mut self) -> Result<Option<(usize, Vec<u8>)>, CheckpointFileError> {
        let index = self.next;
        let Some(entry) = self.manifest.chunks.get(index) else {
            return Ok(None);
        };
        // The manifest bounds each chunk (`ManifestLimits::max_chunk_bytes`).
        let mut bytes = vec![0u8; usize::try_from(entry.size).unwrap_or(0)];
        self.input
            .read_exact(&format!("chunk {index}"), &mut bytes)?;
        self.next = index.saturating_add(1);
        Ok(Some((index, bytes)))
    }

    /// Checks that nothing follows the last chunk (call after [`next_chunk`](Self::next_chunk)
    /// returned `None`).
    pub fn finish(mut self) -> Result<(), CheckpointFileError> {
        let mut one = [0u8; 1];
        if self.input.read_up_to(&mut one)? > 0 {
            return Err(CheckpointFileError::Trailing {
                path: self.input.path.clone(),
                offset: self.input.offset.saturating_sub(1),
            });
        }
        Ok(())
    }
}

/// Writes `manifest`, `block` and the chunks `chunk(i)` gives to `path` atomically: a
/// temporary file beside it, synced, then renamed over it, so a crash never leaves a partial
/// file under the name.
pub fn write_file(
    path: &Path,
    manifest: &Manifest,
    block: &[u8],
    mut chunk: impl FnMut(usize) -> Result<Vec<u8>, String>,
) -> Result<u64, CheckpointFileError> {
    let io_err = |action: &'static str| {
        let path = path.to_path_buf();
        move |source| CheckpointFileError::Io {
            path,
            action,
            source,
        }
    };
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".partial");
    let tmp = PathBuf::from(tmp_name);
    let file = File::create(&tmp).map_err(io_err("create"))?;
    let mut writer = CheckpointFileWriter::begin(
        BufWriter::with_capacity(1 << 20, file),
        path,
        manifest,
        block,
    )?;
    for index in 0..manifest.chunks.len() {
        let bytes = chunk(index).map_err(|reason| CheckpointFileError::Io {
            path: path.to_path_buf(),
            action: "write",
            source: io::Error::other(reason),
        })?;
        writer.chunk(&bytes)?;
    }
    let file = writer
        .finish()?
        .into_inner()
        .map_err(|e| io_err("write")(e.into_error()))?;
    file.sync_all().map_err(io_err("sync"))?;
    let size = file.metadata().map_err(io_err("stat"))?.len();
    drop(file);
    std::fs::rename(&tmp, path).map_err(io_err("rename the finished file to"))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(dir) = File::open(dir)
    {
        // Best effort: the rename is durable once the directory is synced.
        let _ = dir.sync_all();
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::manifest::ChunkEntry;

    fn manifest(sizes: &[u32]) -> Manifest {
        let chunks = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| ChunkEntry {
                hash: [i as u8; 32],
                start: i as u64,
                end: i as u64 + 1,
                size,
            })
            .collect();
        let extras =
            crate::checkpoint::manifest::encode_extras(&Default::default(), &Default::default());
        let registry_root = [7; 32];
        Manifest {
            module_hash: crate::hashes::ModuleHash([1; 32]),
            module_version: 1,
            params: vec![("leaves-per-chunk".into(), "1".into())],
            height: 9,
            block_hash: crate::hashes::BlockHash([2; 32]),
            state_root: crate::hashes::StateRoot(
                crate::checkpoint::manifest::state_root_of(&registry_root, &extras).unwrap(),
            ),
            registry_root,
            leaf_count: sizes.len() as u64,
            leaf_size: crate::state::LEAF_BYTES as u32,
            extras,
            chunks,
            chunk_roots: Vec::new(),
            queue: None,
        }
    }

    fn written(m: &Manifest, chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut w = CheckpointFileWriter::begin(Vec::new(), Path::new("t"), m, b"block").unwrap();
        for c in chunks {
            w.chunk(c).unwrap();
        }
        w.finish().unwrap()
    }

    /// A file's manifest, block and chunks.
    type Contents = (Manifest, Vec<u8>, Vec<Vec<u8>>);

    fn read_all(bytes: &[u8]) -> Result<Contents, CheckpointFileError> {
        let mut r = CheckpointFileReader::new(bytes, Path::new("t.ckpt"), &Default::default())?;
        let mut chunks = Vec::new();
        while let Some((i, c)) = r.next_chunk()? {
            assert_eq!(i, chunks.len());
            chunks.push(c);
        }
        let (m, b) = (r.manifest().clone(), r.block().to_vec());
        r.finish()?;
        Ok((m, b, chunks))
    }

    #[test]
    fn a_written_file_reads_back_and_starts_with_its_header() {
        let m = manifest(&[3, 5]);
        let chunks = vec![vec![1, 2, 3], vec![4, 5, 6, 7, 8]];
        let bytes = written(&m, &chunks);
        assert_eq!(&bytes[..8], b"MNCKFILE");
        assert_eq!(&bytes[8..10], &FILE_FORMAT.to_be_bytes());
        let (m2, block, chunks2) = read_all(&bytes).unwrap();
        assert_eq!((m2, block, chunks2), (m, b"block".to_vec(), chunks));
    }

    #[test]
    fn a_truncated_file_is_refused_naming_the_part_and_the_byte() {
        let m = manifest(&[3, 5]);
        let bytes = written(&m, &[vec![1, 2, 3], vec![4, 5, 6, 7, 8]]);
        let cut = &bytes[..bytes.len() - 2];
        let err = read_all(cut).unwrap_err();
        match &err {
            CheckpointFileError::Truncated {
                what,
                offset,
                missing,
                ..
            } => {
                assert_eq!(what, "chunk 1");
                assert_eq!(*offset, cut.len() as u64);
                assert_eq!(*missing, 2);
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("t.ckpt"), "{err}");
        assert!(matches!(
            read_all(&bytes[..20]).unwrap_err(),
            CheckpointFileError::Truncated { ref what, .. } if what == "manifest"
        ));
    }

    #[test]
    fn another_magic_version_or_trailing_bytes_are_refused() {
        let m = manifest(&[3]);
        let good = written(&m, &[vec![1, 2, 3]]);
        let mut magic = good.clone();
        magic[0] = b'X';
        assert!(matches!(
            read_all(&magic).unwrap_err(),
            CheckpointFileError::NotACheckpointFile { .. }
        ));
        let mut version = good.clone();
        version[9] = 2;
        assert!(matches!(
            read_all(&version).unwrap_err(),
            CheckpointFileError::UnsupportedFormat { found: 2, .. }
        ));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(matches!(
            read_all(&trailing).unwrap_err(),
            CheckpointFileError::Trailing { offset, .. } if offset == good.len() as u64
        ));
        let mut huge = good.clone();
        huge[10..14].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            read_all(&huge).unwrap_err(),
            CheckpointFileError::TooLarge {
                what: "manifest",
                ..
            }
        ));
    }

    #[test]
    fn write_file_replaces_the_target_only_when_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.ckpt");
        let m = manifest(&[3, 2]);
        let failed = write_file(&path, &m, b"b", |i| {
            if i == 0 {
                Ok(vec![1, 2, 3])
            } else {
                Err("chunk 1 missing".into())
            }
        });
        assert!(failed.is_err());
        assert!(!path.exists());
        let size = write_file(&path, &m, b"b", |i| Ok(vec![i as u8; [3, 2][i]])).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(size, bytes.len() as u64);
        assert_eq!(read_all(&bytes).unwrap().2, vec![vec![0; 3], vec![1; 2]]);
    }
}

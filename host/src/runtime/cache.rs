//! Compiled components cached on disk, keyed by (module sha256, engine compatibility hash), so a
//! restart loads machine code instead of compiling again.
//!
//! Only this process's own compiler output is ever written here and read back: deserializing
//! is `unsafe` in wasmtime because the bytes are trusted to be its own. Never put bytes from a
//! peer in this directory.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::error::LoadError;

/// Counters of what the cache did; tests and metrics read them.
#[derive(Debug, Default)]
pub struct CacheStats {
    compiles: AtomicU64,
    hits: AtomicU64,
    rejected: AtomicU64,
}

impl CacheStats {
    /// Components compiled from wasm.
    pub fn compiles(&self) -> u64 {
        self.compiles.load(Ordering::Relaxed)
    }
    /// Components loaded from a cached artifact.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
    /// Cached artifacts that failed to load (corrupt or stale) and were replaced.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
}

/// The artifact cache; without a directory every load compiles.
#[derive(Debug)]
pub struct ArtifactCache {
    dir: Option<PathBuf>,
    compat: [u8; 32],
    stats: CacheStats,
}

impl ArtifactCache {
    /// A cache in `dir` (created if missing), or none.
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Result<Self, LoadError> {
        if let Some(dir) = &dir {
            fs::create_dir_all(dir).map_err(|source| LoadError::Cache {
                path: dir.clone(),
                source,
            })?;
        }
        Ok(Self {
            dir,
            compat: super::engine::compatibility_hash(engine),
            stats: CacheStats::default(),
        })
    }

    /// What the cache did so far.
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Where the artifact for a module with this sha256 lives.
    pub fn artifact_path(&self, sha256: &[u8; 32]) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(self.artifact_file_name(sha256)))
    }

    /// The file name of the artifact for a module with this sha256 (in any directory).
    pub fn artifact_file_name(&self, sha256: &[u8; 32]) -> String {
        let compat = hex::encode(self.compat.get(..8).unwrap_or_default());
        format!("{}-{compat}.cwasm", hex::encode(sha256))
    }

    /// Loads the compiled component for `bytes`, compiling and caching it on a miss.
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        sha256: &[u8; 32],
        name: &str,
    ) -> Result<Component, LoadError> {
        let path = self.artifact_path(sha256);
        if let Some(path) = &path
            && path.is_file()
        {
            // SAFETY: files in the cache directory are only ever written by `store` below from
            // this engine's own `Component::serialize`; the compatibility hash in the name keeps
            // other engine versions or configurations from picking them up, and wasmtime checks
            // the header again.
            match unsafe { Component::deserialize_file(engine, path) } {
                Ok(component) => {
                    self.stats.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(component);
                }
                Err(e) => {
                    self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(path = %path.display(), error = %e, "cached module artifact unusable; recompiling");
                }
            }
        }
        let component = Component::new(engine, bytes).map_err(|e| LoadError::Compile {
            module: name.to_string(),
            message: format!("{e:?}"),
        })?;
        self.stats.compiles.fetch_add(1, Ordering::Relaxed);
        if let Some(path) = &path {
            let serialized = component.serialize().map_err(|e| LoadError::Compile {
                module: name.to_string(),
                message: format!("{e:?}"),
            })?;
            store(path, &serialized).map_err(|source| LoadError::Cache {
                path: path.clone(),
                source,
            })?;
        }
        Ok(component)
    }
}

impl ArtifactCache {
    /// Loads the compiled component an upload's compiler wrote to `path`, outside any cache
    /// directory, with `engine`; nothing is counted or written.
    pub fn load_staged(engine: &Engine, path: &Path, name: &str) -> Result<Component, LoadError> {
        // SAFETY: the module lifecycle writes this file into its private staging directory
        // from this process's own compiler (in process, or the `modnode` binary's
        // `debug compile-module` child) for this engine's configuration, exactly as the cache
        // directory is written; wasmtime checks the header and its compatibility again.
        unsafe { Component::deserialize_file(engine, path) }.map_err(|e| LoadError::Compile {
            module: name.to_string(),
            message: format!("{e:?}"),
        })
    }
}

/// Writes `bytes` to `path` through a synced temporary file and a rename, so a crash leaves
/// either the old file, the new one, or none — never a torn artifact.
fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)
}

//! Why a node could not start: [`NodeError`].

use std::net::SocketAddr;

use super::{CheckpointSyncError, checkpoint_file};
use crate::modules_store::ModuleStoreError;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The data directory is unusable.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The node key could not be loaded or created.
    #[error(transparent)]
    Identity(#[from] crate::net::identity::IdentityError),
    /// A module could not be loaded.
    #[error("module {name}: {reason}")]
    Module {
        /// The module.
        name: String,
        /// What failed.
        reason: String,
    },
    /// The chain database could not be opened.
    #[error("cannot open the chain in {path}: {reason}")]
    Chain {
        /// The data directory.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The checkpoint file given to start from was refused or could not be restored.
    #[error(transparent)]
    RestoreFromFile(#[from] checkpoint_file::FileRestoreError),
    /// The QUIC endpoint could not be created.
    #[error(transparent)]
    Net(#[from] crate::net::endpoint::NetError),
    /// A peer or sync setting is invalid.
    #[error("invalid peer configuration: {0}")]
    Config(#[from] modnode_peers::ConfigError),
    /// The admin API could not start.
    #[error("admin API: {0}")]
    Admin(String),
    /// The module store could not be opened.
    #[error(transparent)]
    ModuleStore(#[from] ModuleStoreError),
    /// A thread could not be started.
    #[error("cannot start the chain worker thread: {0}")]
    Thread(std::io::Error),
    /// The genesis engine profile is not the one this build implements.
    #[error(transparent)]
    EngineProfile(#[from] crate::runtime::profile::ProfileError),
    /// The blocking startup task (module loading, opening the chain) panicked or was cancelled.
    #[error("node startup task failed: {0}")]
    Startup(String),
    /// The dev deposit contract could not be opened or its endpoint not started.
    #[error("dev deposit contract: {0}")]
    DepositContract(String),
    /// The deposit source to follow is misconfigured, or the followed log is unusable.
    #[error("deposit source: {0}")]
    DepositSource(String),
    /// Restoring from a checkpoint failed on this node.
    #[error(transparent)]
    CheckpointSync(#[from] CheckpointSyncError),
    /// The bound peer-to-peer address could not be read back.
    #[error("cannot read the address bound for {listen}: {source}")]
    Listen {
        /// The configured listen address.
        listen: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

//! `modnode checkpoint …`: ask a running node to create a checkpoint now, or list its stored
//! checkpoints (through the admin API); export one of a stopped node to a file.

use std::path::PathBuf;

use anyhow::Context as _;
use modnode::admin::client;

use super::module::{NodeArgs, at, runtime};

/// `modnode checkpoint create`: the node snapshots its finalized state, creates the checkpoint
/// in the background with its active checkpoint module, stores it, and answers with its
/// summary.
pub fn create(node: &NodeArgs, json: bool) -> anyhow::Result<()> {
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::create_checkpoint(&target))
        .with_context(|| format!("the node at {} did not create a checkpoint", target.addr()))?;
    if json {
        println!("{answer}");
    } else {
        println!(
            "checkpoint {} at height {}: version {}, {} chunks, {} bytes, {} ms",
            at(&answer, "/id").as_str().unwrap_or("?"),
            at(&answer, "/height"),
            at(&answer, "/version"),
            at(&answer, "/chunks"),
            at(&answer, "/bytes"),
            at(&answer, "/create_ms")
        );
    }
    Ok(())
}

/// `modnode checkpoint list`.
pub fn list(node: &NodeArgs, json: bool) -> anyhow::Result<()> {
    let target = node.target()?;
    let answer = runtime()?
        .block_on(client::checkpoints(&target))
        .with_context(|| {
            format!(
                "cannot list the checkpoints of the node at {}",
                target.addr()
            )
        })?;
    if json {
        println!("{answer}");
        return Ok(());
    }
    let empty = Vec::new();
    let list = at(&answer, "/checkpoints").as_array().unwrap_or(&empty);
    if list.is_empty() {
        println!("no checkpoints stored");
    }
    for c in list {
        println!(
            "height {:>8}  v{}  {} chunks  {} bytes  {}",
            at(c, "/height"),
            at(c, "/version"),
            at(c, "/chunks"),
            at(c, "/bytes"),
            at(c, "/id").as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// `modnode checkpoint export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The checkpoint: `latest`, or its id (a unique prefix will do; `checkpoint list` shows
    /// them).
    pub checkpoint: String,
    /// The file to write (replaced only once the export is complete).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Data directory of the stopped node whose checkpoint is exported.
    #[arg(long, default_value = "modnode-data")]
    pub data_dir: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `modnode checkpoint export <id|latest> -o FILE`: the checkpoint, its block and its chunks,
/// each chunk checked against its manifest on the way.
pub fn export(args: &ExportArgs) -> anyhow::Result<()> {
    let summary =
        modnode::node::checkpoint_file::export(&args.data_dir, &args.checkpoint, &args.output)?;
    let id = hex::encode(summary.id);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "id": id,
                "height": summary.height,
                "chunks": summary.chunks,
                "file": args.output.display().to_string(),
                "file_bytes": summary.file_bytes,
            })
        );
    } else {
        println!(
            "checkpoint {id} at height {} ({} chunks) written to {} ({} bytes); start a node from \
             it with `modnode run --restore-from {}`",
            summary.height,
            summary.chunks,
            args.output.display(),
            summary.file_bytes,
            args.output.display()
        );
    }
    Ok(())
}

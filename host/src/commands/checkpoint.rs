//! `modnode checkpoint …`: ask a running node to create a checkpoint now, or list its stored
//! checkpoints (through the admin API).

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

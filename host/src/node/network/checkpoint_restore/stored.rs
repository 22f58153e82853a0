//! The restore's durable progress as the driver uses it: resumed when it is of the checkpoint
//! being restored, else switched to it, keeping the stored chunks that verify against it
//! ([`carry_over`]; `checkpoint::carry` says exactly what that keeps), in one atomic write.

use std::sync::atomic::Ordering;

use super::{Driver, Stop, as_u64};
use crate::checkpoint::{Fault, Manifest, Restorer, carry_over, verify_all};
use crate::node::metrics::bump;
use crate::runtime::checkpoint::CheckpointModule;

impl Driver<'_> {
    /// Makes the stored progress `restorer`'s: resumed when it is of the same checkpoint, else
    /// switched to it, carrying over the stored chunks that verify against its manifest.
    pub(super) fn take_over_progress(
        &self,
        restorer: &mut Restorer,
        opener: &CheckpointModule,
    ) -> Result<(), Stop> {
        let stored = self.progress.manifest().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the stored restore progress is unreadable; starting over");
            None
        });
        match stored {
            Some(old) if old.id() == restorer.id() => self.resume(restorer, opener),
            Some(old) => self.switch(&old, restorer, opener),
            None => self
                .progress
                .begin(restorer.manifest())
                .map_err(|e| self.storage(e.to_string())),
        }
    }

    /// Switches the stored progress from checkpoint `old` to `restorer`'s: the stored chunks
    /// whose bytes the new manifest lists and that verify against it are kept (under their new
    /// index), the rest dropped, in one atomic write.
    fn switch(
        &self,
        old: &Manifest,
        restorer: &mut Restorer,
        opener: &CheckpointModule,
    ) -> Result<(), Stop> {
        let stored = self
            .progress
            .chunks()
            .map_err(|e| self.storage(e.to_string()))?;
        let threads = self.parts.threads;
        let carried = tokio::task::block_in_place(|| carry_over(restorer, opener, stored, threads))
            .map_err(|e| Stop::Retry(format!("carrying verified chunks over failed: {e}")))?;
        if let Some(e) = &carried.refused
            && e.fault() == Fault::Manifest
        {
            return Err(Stop::Offerers(format!(
                "checkpoint {}: {e}",
                hex::encode(restorer.id())
            )));
        }
        self.progress
            .switch(restorer.manifest(), &carried.chunks)
            .map_err(|e| self.storage(e.to_string()))?;
        let progress = restorer.progress();
        let counters = self.counters();
        bump(&counters.switches);
        counters
            .chunks_carried_over
            .fetch_add(as_u64(carried.chunks.len()), Ordering::Relaxed);
        counters
            .chunks_verified
            .store(as_u64(progress.chunks), Ordering::Relaxed);
        tracing::info!(
            from = %hex::encode(old.id()),
            from_height = old.height,
            to = %hex::encode(restorer.id()),
            to_height = restorer.manifest().height,
            stored = carried.stored,
            listed = carried.listed,
            carried_over = carried.chunks.len(),
            to_fetch = progress.total_chunks.saturating_sub(progress.chunks),
            "switched the restore to another checkpoint; verified chunks it lists that verify against it are kept"
        );
        Ok(())
    }

    /// Re-verifies the chunks an earlier run stored (no network).
    fn resume(&self, restorer: &mut Restorer, opener: &CheckpointModule) -> Result<(), Stop> {
        let stored = self
            .progress
            .chunks()
            .map_err(|e| self.storage(e.to_string()))?;
        if stored.is_empty() {
            return Ok(());
        }
        let count = stored.len();
        let threads = self.parts.threads;
        let outcome =
            tokio::task::block_in_place(|| verify_all(restorer, opener, &stored, threads, None));
        if let Err(e) = outcome {
            // Whatever verified is inserted; the rest is fetched again.
            tracing::warn!(error = %e, "a stored chunk no longer verifies; fetching it again");
        }
        let progress = restorer.progress();
        let counters = self.counters();
        counters
            .chunks_resumed
            .store(as_u64(progress.chunks), Ordering::Relaxed);
        counters
            .chunks_verified
            .store(as_u64(progress.chunks), Ordering::Relaxed);
        tracing::info!(
            stored = count,
            verified = progress.chunks,
            total = progress.total_chunks,
            "resuming the checkpoint restore from stored chunks"
        );
        Ok(())
    }
}

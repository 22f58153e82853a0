//! The worker's checkpoints: which height is due, the finalized state handed to the creator,
//! and a creation on demand or every `interval` blocks.

use super::*;

impl Worker {
    /// The checkpoint height now: the finalized height, or with `interval > 0` the newest
    /// multiple of it at or below (see [`checkpoint_height_at`]).
    pub(super) fn checkpoint_height(&self, interval: u64) -> Option<u64> {
        checkpoint_height_at(self.chain.finalized_height(), interval)
    }

    /// The state after the canonical block at the finalized `height`: the state cache's
    /// snapshot (one reference-count increment) if it holds it, else its regeneration, run
    /// later on the creator's thread. The only part of creation on this thread.
    fn finalized_state(&self, height: u64) -> Result<FrozenState, String> {
        let states = self.chain.states();
        let hash = states
            .source()
            .canonical_hash(height)
            .map_err(|e| format!("the finalized block at height {height} cannot be read: {e}"))?;
        Ok(match states.peek(&hash) {
            Some(state) => Box::new(move || Ok(state)),
            None => Box::new(move || {
                states.state(&hash).map_err(|e| {
                    format!(
                        "the state after the finalized block {} at height {height}: {e}",
                        hex::encode(hash)
                    )
                })
            }),
        })
    }

    /// Hands the state at the finalized `height` to the checkpointer (answering `reply` when it
    /// is done); `None`: no block but genesis is final yet.
    pub(super) fn checkpoint(&mut self, reply: Option<CreateReply>, height: Option<u64>) {
        let refuse = |reply: Option<CreateReply>, reason: String| {
            if let Some(reply) = reply {
                let _ = reply.send(Err(reason));
            }
        };
        let Some(checkpointer) = &self.checkpointer else {
            return refuse(reply, "this node does not create checkpoints".into());
        };
        let Some(height) = height else {
            let head = self.chain.head().height;
            let depth = self.chain.genesis().finality_depth;
            return refuse(
                reply,
                format!(
                    "no block is final yet (head {head}, finality_depth {depth}; a block is final \
                     {depth} below the head once a majority of the authorities sealed it or a \
                     block on it): a checkpoint is only made at a finalized height; retry later"
                ),
            );
        };
        let state = match self.finalized_state(height) {
            Ok(state) => state,
            Err(reason) => {
                tracing::warn!(height, error = %reason, "checkpoint skipped");
                return refuse(reply, reason);
            }
        };
        if let Err(e) = checkpointer.offer(state, reply) {
            tracing::warn!(height, error = %e, "checkpoint skipped");
        }
    }

    /// Starts a checkpoint when the finalized height has reached a new multiple of the
    /// interval.
    pub(super) fn periodic_checkpoint(&mut self) {
        let Some(interval) = self
            .checkpointer
            .as_ref()
            .map(|c| c.config().interval)
            .filter(|&i| i > 0)
        else {
            return;
        };
        let height = self.checkpoint_height(interval);
        if let Some(at) = height
            && at != self.last_checkpoint
        {
            self.last_checkpoint = at;
            self.checkpoint(None, height);
        }
    }
}

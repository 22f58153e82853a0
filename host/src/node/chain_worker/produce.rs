//! Producing a block in the worker's slot: the parent, the eth1 vote, the due deposits and the
//! upgrade votes, sealed and imported before it is handed out.

use super::*;

impl Worker {
    pub(super) fn produce(&mut self, slot: u64) -> Result<Option<Block>, WorkerError> {
        if slot <= self.chain.head().slot {
            return Ok(None);
        }
        let genesis = self.chain.genesis();
        let proposer = genesis.proposer_for(slot).unwrap_or(0);
        // Never sign a second block for a slot (after a reorg within it, say): that would be
        // an equivocation, voiding the slot on every node.
        if !genesis.authorities.is_empty()
            && self
                .chain
                .has_block_for_slot(slot, proposer)
                .map_err(|e| WorkerError::Store(e.to_string()))?
        {
            return Ok(None);
        }
        let sealed = !genesis.authorities.is_empty();
        // Never a vote that surrounds one of ours (`chain::finality`): after fork choice moved
        // us to a less justified branch, wait for it to catch up rather than seal there.
        if sealed && !self.chain.may_seal(slot, &self.seal_lock) {
            tracing::info!(
                slot,
                "not sealing: the head's branch is less justified than one we already voted on"
            );
            return Ok(None);
        }
        let vote = self.chain.vote_at(slot);
        let agreed = self.chain.eth1_data();
        let block = match &self.source {
            // Without a source we vote the agreed eth1 data: valid, and enough while no deposit
            // is due (a node with no source cannot prove any, and says so).
            None => self
                .chain
                .build_block_from(slot, proposer, agreed, &NoSource),
            Some(source) => {
                // The head's votes count only if they are of this slot's voting period.
                let eth1 = self.chain.eth1_state();
                let period = slot.checked_div(genesis.eth1_voting_period_slots);
                let votes: Vec<Eth1Data> = if period == Some(eth1.vote_period) {
                    eth1.votes.iter().map(|v| v.data).collect()
                } else {
                    Vec::new()
                };
                let vote = source.choose_vote(agreed, &votes);
                self.chain
                    .build_block_from(slot, proposer, vote, source.as_ref())
            }
        }
        .map_err(|e| WorkerError::Produce {
            slot,
            reason: e.to_string(),
        })?;
        let mut block = block;
        if sealed {
            let signature = self
                .identity
                .sign(&self.chain.seal_message(&block.hash()))
                .map_err(|e| WorkerError::Produce {
                    slot,
                    reason: e.to_string(),
                })?;
            block.seal = Seal::Ed25519(signature);
        }
        self.chain.import(&block).map_err(|e| {
            if e.is_fatal() {
                self.fatal = Some(e.to_string());
            }
            WorkerError::Produce {
                slot,
                reason: e.to_string(),
            }
        })?;
        if sealed && let Some((epoch, source)) = vote {
            self.seal_lock.sealed(epoch, source);
        }
        self.last_block_unix_ms = unix_ms();
        Ok(Some(block))
    }
}

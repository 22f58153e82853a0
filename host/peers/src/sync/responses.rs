//! Checking a peer's answer against the request it answers: the request is ours and in
//! flight, the blocks are the heights asked for, and the peer's head did not move under it.

use super::*;

impl RangeSync {
    pub(super) fn take_request(
        &mut self,
        peer: NodeId,
        id: RequestId,
    ) -> Result<InFlight, SyncError> {
        match self.in_flight.get(&id) {
            None => Err(SyncError::UnknownRequest { id }),
            Some(r) if r.peer != peer => Err(SyncError::WrongPeer {
                id,
                expected: r.peer,
                actual: peer,
            }),
            Some(_) => self
                .in_flight
                .remove(&id)
                .ok_or(SyncError::UnknownRequest { id }),
        }
    }

    pub(super) fn check_response(
        &self,
        request: &InFlight,
        blocks: &[(u64, BlockHash, Vec<u8>)],
    ) -> Result<(), &'static str> {
        if u64::try_from(blocks.len()).map_or(true, |len| len > request.count) {
            return Err("more blocks than requested");
        }
        let mut expected = request.start;
        for (height, _, _) in blocks {
            if *height != expected {
                return Err("heights are not consecutive from the requested start");
            }
            expected = expected.saturating_add(1);
        }
        Ok(())
    }

    /// Whether the answer's block at the peer's claimed head height has another hash than
    /// the claim (only an uncapped claim names the hash at its height).
    pub(super) fn head_moved(
        &self,
        request: &InFlight,
        blocks: &[(u64, BlockHash, Vec<u8>)],
    ) -> bool {
        let Some(head) = self
            .peers
            .get(&request.peer)
            .filter(|head| head.height <= self.max_height)
        else {
            return false;
        };
        blocks
            .iter()
            .any(|(height, hash, _)| *height == head.height && *hash != head.hash)
    }
}

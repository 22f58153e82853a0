//! The node's health as a load balancer or orchestrator asks for it (`GET /livez`,
//! `GET /readyz`): liveness is "the process and its chain worker answer"; readiness is "this
//! node's view of the chain is current enough to serve and to produce".

/// A node is not ready while its head is more than this many slots behind the wall-clock
/// slot (authorities that miss their slots leave gaps, so a little lag is normal).
pub const READY_MAX_LAG_SLOTS: u64 = 8;

/// What readiness is decided from (all read without blocking).
#[derive(Debug, Clone, Copy)]
pub struct ReadinessInputs {
    /// The wall-clock slot now.
    pub wall_slot: u64,
    /// The head block's slot.
    pub head_slot: u64,
    /// The head's height.
    pub head_height: u64,
    /// The highest head a peer reported.
    pub best_peer_height: u64,
    /// Whether the node has tried its peers and synced from them since it started.
    pub started_up: bool,
    /// Whether the node is behind its best peer by more than one block.
    pub syncing: bool,
}

/// `Ok` when the node is ready, else why not (one line an operator can act on).
pub fn readiness(inputs: &ReadinessInputs) -> Result<(), String> {
    if !inputs.started_up {
        return Err("starting up: still reaching peers and syncing from them".into());
    }
    if inputs.syncing {
        return Err(format!(
            "syncing: head at height {}, a peer reports {}",
            inputs.head_height, inputs.best_peer_height
        ));
    }
    let lag = inputs.wall_slot.saturating_sub(inputs.head_slot);
    if lag > READY_MAX_LAG_SLOTS {
        return Err(format!(
            "behind the clock: head at slot {} ({} slots behind slot {}; ready within {})",
            inputs.head_slot, lag, inputs.wall_slot, READY_MAX_LAG_SLOTS
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> ReadinessInputs {
        ReadinessInputs {
            wall_slot: 100,
            head_slot: 99,
            head_height: 90,
            best_peer_height: 90,
            started_up: true,
            syncing: false,
        }
    }

    #[test]
    fn readiness_flips_with_start_up_sync_and_lag() {
        assert_eq!(readiness(&inputs()), Ok(()));
        let starting = ReadinessInputs {
            started_up: false,
            ..inputs()
        };
        assert!(readiness(&starting).unwrap_err().contains("starting up"));
        let syncing = ReadinessInputs {
            syncing: true,
            best_peer_height: 400,
            ..inputs()
        };
        assert!(
            readiness(&syncing)
                .unwrap_err()
                .contains("a peer reports 400")
        );
        let at_limit = ReadinessInputs {
            head_slot: 100 - READY_MAX_LAG_SLOTS,
            ..inputs()
        };
        assert_eq!(readiness(&at_limit), Ok(()));
        let behind = ReadinessInputs {
            head_slot: 99 - READY_MAX_LAG_SLOTS,
            ..inputs()
        };
        let why = readiness(&behind).unwrap_err();
        assert!(why.contains("slots behind"), "{why}");
        // A head ahead of a slow clock is not a lag.
        let ahead = ReadinessInputs {
            head_slot: 105,
            ..inputs()
        };
        assert_eq!(readiness(&ahead), Ok(()));
    }
}

//! The node's health as a load balancer or orchestrator asks for it (`GET /livez`,
//! `GET /readyz`): liveness is "the process and its chain worker answer"; readiness is "this
//! node's view of the chain is current enough to serve and to produce": not restoring from a
//! checkpoint, started up, not syncing, the head near the wall-clock slot, and for a node that
//! produces, its deposit source answering.

/// A node is not ready while its head is more than this many slots behind the wall-clock
/// slot (authorities that miss their slots leave gaps, so a little lag is normal).
pub const READY_MAX_LAG_SLOTS: u64 = 8;

/// A producing node is not ready when its deposit source has not answered the follower for
/// this long (its blocks would carry no new deposits, and its eth1 vote would go stale).
pub const DEPOSIT_SOURCE_STALE_MS: u64 = 30_000;

/// What a producing node knows of its deposit source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositSourceHealth {
    /// The endpoint followed (for the reason).
    pub endpoint: String,
    /// When it last answered (ms since the Unix epoch; 0: not in this run).
    pub last_answer_unix_ms: u64,
    /// Why the latest attempt failed, if it did.
    pub last_failure: Option<String>,
}

/// What readiness is decided from (all read without blocking).
#[derive(Debug, Clone)]
pub struct ReadinessInputs {
    /// Now, in ms since the Unix epoch.
    pub now_unix_ms: u64,
    /// Whether a restore from a checkpoint is in progress (the chain is not open yet).
    pub restoring: bool,
    /// The deposit source of a node that produces blocks; `None` for a node that does not
    /// (or follows none).
    pub deposit_source: Option<DepositSourceHealth>,
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
    if inputs.restoring {
        return Err("restoring from a checkpoint: the chain opens when the restore ends".into());
    }
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
    if let Some(source) = &inputs.deposit_source {
        let failure = source
            .last_failure
            .as_ref()
            .map(|why| format!(": {why}"))
            .unwrap_or_default();
        if source.last_answer_unix_ms == 0 {
            return Err(format!(
                "deposit source {} not reached yet{failure}",
                source.endpoint
            ));
        }
        let silent_ms = inputs
            .now_unix_ms
            .saturating_sub(source.last_answer_unix_ms);
        if silent_ms > DEPOSIT_SOURCE_STALE_MS {
            return Err(format!(
                "deposit source {} has not answered for {} s{failure}",
                source.endpoint,
                silent_ms / 1000
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> ReadinessInputs {
        ReadinessInputs {
            now_unix_ms: 1_000_000,
            restoring: false,
            deposit_source: None,
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

    #[test]
    fn a_restore_or_an_unreachable_deposit_source_is_not_ready() {
        let restoring = ReadinessInputs {
            restoring: true,
            ..inputs()
        };
        assert!(readiness(&restoring).unwrap_err().contains("restoring"));
        let source = |last_answer_unix_ms, last_failure: Option<&str>| ReadinessInputs {
            deposit_source: Some(DepositSourceHealth {
                endpoint: "http://127.0.0.1:9402".into(),
                last_answer_unix_ms,
                last_failure: last_failure.map(str::to_string),
            }),
            ..inputs()
        };
        let never = readiness(&source(0, Some("connection refused"))).unwrap_err();
        assert!(
            never.contains("not reached yet: connection refused"),
            "{never}"
        );
        assert!(never.contains("127.0.0.1:9402"), "{never}");
        assert_eq!(readiness(&source(1_000_000 - 5_000, None)), Ok(()));
        let stale = readiness(&source(
            1_000_000 - DEPOSIT_SOURCE_STALE_MS - 1_000,
            Some("timed out"),
        ))
        .unwrap_err();
        assert!(
            stale.contains("has not answered for 31 s: timed out"),
            "{stale}"
        );
    }
}

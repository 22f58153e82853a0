//! `GET /state?height=H[&index=I|&pubkey=HEX]`: the state after the canonical block at a
//! height (the head without `height`), answered from the state cache or by regeneration.
//!
//! The answer: `{"height","block_hash","state_root","registry_root","validators",
//! "eth1_deposit_index","balance_sum_gwei","pending_deposits","deposit_balance_to_consume_gwei",
//! "validator"?}` (`pending_deposits`: deposits queued under `modnode:deposits@3`, 0 before
//! the chain runs that contract), where `validator` (when `index` or `pubkey` is given)
//! is `{"index","pubkey","withdrawal_credentials","effective_balance","balance","slashed",
//! "activation_eligibility_epoch","activation_epoch","exit_epoch","withdrawable_epoch"}` or
//! `null` if no validator matches.

use serde_json::{Value, json};

use crate::state::{PUBKEY_LEN, PendingQueue, Pubkey, State};
use crate::state_cache::{StateCache, StateCacheError};

/// Which validator a query asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    /// By registry index.
    Index(u32),
    /// By BLS pubkey.
    Pubkey(Pubkey),
}

/// A parsed `/state` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateQuery {
    /// Canonical height; the head if `None`.
    pub height: Option<u64>,
    /// One validator to include.
    pub validator: Option<Selector>,
}

/// Why a state query failed, and whose fault that is (the HTTP status follows).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateQueryError {
    /// The query is malformed (the client's fault): 400.
    #[error("{0}")]
    BadQuery(String),
    /// No such height, or a state too old to regenerate (the client's): 404.
    #[error("{0}")]
    NotFound(String),
    /// The node is busy (behind on import, or the budget is full): 503, retry later.
    #[error("{0}")]
    Unavailable(String),
    /// The node failed (ours): 500.
    #[error("{0}")]
    Internal(String),
}

impl StateQuery {
    /// Parses `height=H&index=I` / `&pubkey=0x…` (each at most once; `index` and `pubkey`
    /// exclusive; nothing else).
    pub fn parse(query: Option<&str>) -> Result<Self, StateQueryError> {
        let bad = |m: String| StateQueryError::BadQuery(m);
        let mut out = Self::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("query parameter {pair:?} has no value")))?;
            match key {
                "height" if out.height.is_none() => {
                    out.height = Some(value.parse().map_err(|_| {
                        bad(format!("height {value:?} is not a non-negative integer"))
                    })?);
                }
                "index" if out.validator.is_none() => {
                    out.validator = Some(Selector::Index(value.parse().map_err(|_| {
                        bad(format!("index {value:?} is not a validator index (u32)"))
                    })?));
                }
                "pubkey" if out.validator.is_none() => {
                    let hex_part = value.strip_prefix("0x").unwrap_or(value);
                    let bytes = hex::decode(hex_part)
                        .map_err(|e| bad(format!("pubkey is not hex: {e}")))?;
                    let pubkey: Pubkey = bytes.try_into().map_err(|b: Vec<u8>| {
                        bad(format!("pubkey has {} bytes, not {PUBKEY_LEN}", b.len()))
                    })?;
                    out.validator = Some(Selector::Pubkey(pubkey));
                }
                "height" | "index" | "pubkey" => {
                    return Err(bad(format!(
                        "{key} given twice, or both index and pubkey given"
                    )));
                }
                other => {
                    return Err(bad(format!(
                        "unknown query parameter {other:?} (height, index, pubkey)"
                    )));
                }
            }
        }
        Ok(out)
    }
}

impl From<StateCacheError> for StateQueryError {
    fn from(e: StateCacheError) -> Self {
        let message = e.to_string();
        match e {
            StateCacheError::UnknownBlock { .. }
            | StateCacheError::UnknownHeight { .. }
            | StateCacheError::TooOld { .. } => Self::NotFound(message),
            StateCacheError::OverBudget { .. }
            | StateCacheError::Shed
            | StateCacheError::NotExecuted(_) => Self::Unavailable(message),
            StateCacheError::Replay(_)
            | StateCacheError::InvalidBlock(_)
            | StateCacheError::Store(_)
            | StateCacheError::Anchor { .. }
            | StateCacheError::Joined(_)
            | StateCacheError::QueryThread(_) => Self::Internal(message),
        }
    }
}

/// Answers `query` from `states` (blocking: it may replay blocks; run it off the async tasks).
pub fn answer(states: &StateCache, query: &StateQuery) -> Result<Value, StateQueryError> {
    let state = match query.height {
        Some(height) => states.query_height(height)?,
        None => states.head(),
    };
    Ok(render(&state, query.validator))
}

/// The sum of every validator's balance in `state`, in Gwei (a testnet's harness checks that
/// deposits are applied exactly once by it).
pub fn balance_sum(state: &State) -> u128 {
    state
        .validators(0, state.validator_count())
        .map(|(_, balance)| u128::from(balance))
        .fold(0u128, u128::saturating_add)
}

/// The JSON answer for `state`.
pub fn render(state: &State, selector: Option<Selector>) -> Value {
    let mut out = json!({
        "height": state.height(),
        "block_hash": hex::encode(state.block_hash()),
        "state_root": hex::encode(state.root()),
        "registry_root": hex::encode(state.registry_root()),
        "validators": state.validator_count(),
        "eth1_deposit_index": state.eth1().deposit_index,
        // A string: JSON numbers lose precision above 2^53 and the sum is a u128.
        "balance_sum_gwei": balance_sum(state).to_string(),
        // deposits@3's queue (0 and 0 for a state before the chain ran that contract).
        "pending_deposits": state.pending().map_or(0, PendingQueue::len),
        "deposit_balance_to_consume_gwei":
            state.pending().map_or(0, PendingQueue::balance_to_consume),
    });
    if let Some(selector) = selector {
        let index = match selector {
            Selector::Index(index) => Some(index),
            Selector::Pubkey(pubkey) => state.index_of(&pubkey),
        };
        let validator = index.and_then(|i| Some((i, state.validator(i)?)));
        let value = match validator {
            None => Value::Null,
            Some((index, (v, balance))) => json!({
                "index": index,
                "pubkey": hex::encode(v.pubkey),
                "withdrawal_credentials": hex::encode(v.withdrawal_credentials),
                "effective_balance": v.effective_balance,
                "balance": balance,
                "slashed": v.slashed,
                "activation_eligibility_epoch": v.activation_eligibility_epoch,
                "activation_epoch": v.activation_epoch,
                "exit_epoch": v.exit_epoch,
                "withdrawable_epoch": v.withdrawable_epoch,
            }),
        };
        if let Some(map) = out.as_object_mut() {
            map.insert("validator".into(), value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Eth1State, PendingDelta, PendingDeposit, Registry, Schedule};

    fn entry(n: u8) -> PendingDeposit {
        PendingDeposit {
            pubkey: [n; 48],
            withdrawal_credentials: [1; 32],
            amount: 32_000_000_000,
            signature: [0; 96],
            slot: 7,
            height: 6,
        }
    }

    #[test]
    fn the_state_shows_deposits_v3_queue_length_and_balance_to_consume() {
        let state = |pending| {
            State::with_pending(
                crate::hashes::BlockHash::new([1; 32]),
                9,
                Registry::new(),
                Eth1State::default(),
                Schedule::default(),
                pending,
            )
        };
        let before = render(&state(None), None);
        assert_eq!(before["pending_deposits"], 0);
        assert_eq!(before["deposit_balance_to_consume_gwei"], 0);
        let mut queue = PendingQueue::new();
        queue
            .apply(&PendingDelta {
                pushed: vec![entry(1), entry(2), entry(3)],
                dropped: 1,
                balance_to_consume: Some(5_000_000_000),
            })
            .unwrap();
        let after = render(&state(Some(queue)), None);
        assert_eq!(after["pending_deposits"], 2);
        assert_eq!(after["deposit_balance_to_consume_gwei"], 5_000_000_000u64);
    }

    #[test]
    fn queries_parse_strictly() {
        assert_eq!(StateQuery::parse(None).unwrap(), StateQuery::default());
        let q = StateQuery::parse(Some("height=5&index=3")).unwrap();
        assert_eq!(q.height, Some(5));
        assert_eq!(q.validator, Some(Selector::Index(3)));
        let key = format!("0x{}", "ab".repeat(48));
        let q = StateQuery::parse(Some(&format!("pubkey={key}"))).unwrap();
        assert_eq!(q.validator, Some(Selector::Pubkey([0xab; 48])));
        for bad in [
            "height=-1",
            "height=1&height=2",
            "index=1&pubkey=00",
            "pubkey=abcd",
            "pubkey=zz",
            "color=red",
            "height",
        ] {
            assert!(
                matches!(
                    StateQuery::parse(Some(bad)),
                    Err(StateQueryError::BadQuery(_))
                ),
                "{bad}"
            );
        }
    }
}

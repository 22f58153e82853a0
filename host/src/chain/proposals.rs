//! The operator's open proposals in the store (`keys::PROPOSALS`), so a restarted authority
//! goes on voting for what its operator proposed: `count u16 LE | count × (action u8 | op)`.

use crate::state::UpgradeOp;
use crate::state::schedule::{Action, UPGRADE_OP_BYTES};
use crate::store::{KvStore, StoreError, keys};

/// Most proposals kept (more than any block can vote for before they expire).
const MAX_PROPOSALS: usize = 64;

/// Encodes `proposals` (the newest [`MAX_PROPOSALS`]).
pub(super) fn encode(proposals: &[(Action, UpgradeOp)]) -> Vec<u8> {
    let skip = proposals.len().saturating_sub(MAX_PROPOSALS);
    let kept = proposals.get(skip..).unwrap_or_default();
    let mut out = Vec::with_capacity(
        kept.len()
            .saturating_mul(UPGRADE_OP_BYTES.saturating_add(1))
            .saturating_add(2),
    );
    let count = u16::try_from(kept.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&count.to_le_bytes());
    for (action, op) in kept {
        out.push(action.code());
        out.extend_from_slice(&op.encode());
    }
    out
}

fn decode(bytes: &[u8]) -> Option<Vec<(Action, UpgradeOp)>> {
    let (count, mut rest) = bytes.split_first_chunk::<2>()?;
    let count = usize::from(u16::from_le_bytes(*count));
    let mut out = Vec::with_capacity(count.min(MAX_PROPOSALS));
    for _ in 0..count {
        let (action, after) = rest.split_first()?;
        let action = Action::from_code(*action)?;
        let (op, after) = after.split_first_chunk::<UPGRADE_OP_BYTES>()?;
        out.push((action, UpgradeOp::decode(op).ok()?));
        rest = after;
    }
    rest.is_empty().then_some(out)
}

/// The proposals kept in `store` (none if there is no record).
pub(super) fn load(store: &dyn KvStore) -> Result<Vec<(Action, UpgradeOp)>, StoreError> {
    match store.get(keys::PROPOSALS)? {
        None => Ok(Vec::new()),
        Some(bytes) => decode(&bytes).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "the upgrade proposals record in {} is malformed ({} bytes); the operator's \
                 proposals can be made again after deleting it",
                store.location(),
                bytes.len()
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Kind;
    use crate::store::{MemoryStore, WriteBatch};

    #[test]
    fn proposals_round_trip_and_a_malformed_record_is_named() {
        let op = |m: u8| UpgradeOp {
            kind: Kind::Deposits,
            module: crate::hashes::ModuleHash([m; 32]),
            height: u64::from(m) * 10,
        };
        let list = vec![(Action::Upgrade, op(1)), (Action::Cancel, op(2))];
        let bytes = encode(&list);
        assert_eq!(decode(&bytes), Some(list.clone()));
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
        let store = MemoryStore::new();
        assert!(load(&store).unwrap().is_empty());
        let mut batch = WriteBatch::new();
        batch.put(keys::PROPOSALS, bytes);
        store.commit(&batch).unwrap();
        assert_eq!(load(&store).unwrap(), list);
        let mut batch = WriteBatch::new();
        batch.put(keys::PROPOSALS, vec![1, 0, 9]);
        store.commit(&batch).unwrap();
        let err = load(&store).unwrap_err().to_string();
        assert!(err.contains("upgrade proposals record"), "{err}");
        let many: Vec<_> = (0..100u8).map(|i| (Action::Upgrade, op(i))).collect();
        assert_eq!(decode(&encode(&many)).map(|l| l.len()), Some(MAX_PROPOSALS));
    }
}

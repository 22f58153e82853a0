//! The deposit contract's `DepositEvent(bytes,bytes,bytes,bytes,bytes)` log, ABI-encoded
//! exactly as Solidity emits it, so a follower reads the dev contract and a real execution
//! client the same way.
//!
//! The data is five dynamic `bytes` — pubkey (48), withdrawal credentials (32), amount (8,
//! little-endian Gwei), signature (96), index (8, little-endian): five 32-byte offsets, then
//! each value as a 32-byte big-endian length followed by its bytes zero-padded to a multiple
//! of 32. For these sizes that is always 576 bytes with offsets 0xa0, 0x100, 0x140, 0x180,
//! 0x200.

use sha3::{Digest, Keccak256};

use crate::chain::block::DepositData;

/// The event's signature, whose keccak256 is the log's `topics[0]`.
pub const DEPOSIT_EVENT_SIGNATURE: &str = "DepositEvent(bytes,bytes,bytes,bytes,bytes)";
/// Length of the ABI-encoded event data.
pub const DEPOSIT_EVENT_DATA_BYTES: usize = 576;

/// The field lengths, in order.
const FIELDS: [(&str, usize); 5] = [
    ("pubkey", 48),
    ("withdrawal_credentials", 32),
    ("amount", 8),
    ("signature", 96),
    ("index", 8),
];

/// `keccak256("DepositEvent(bytes,bytes,bytes,bytes,bytes)")`, the log's `topics[0]`.
pub fn deposit_event_topic() -> [u8; 32] {
    Keccak256::digest(DEPOSIT_EVENT_SIGNATURE.as_bytes()).into()
}

/// Why a log's data is not a `DepositEvent` (the source's fault: a follower stops on it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AbiError {
    /// The data ends before a word it must hold.
    #[error("DepositEvent data is {len} bytes, too short for {what}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// The data length.
        len: usize,
    },
    /// An offset or length does not fit in memory or points outside the data.
    #[error("DepositEvent field `{field}`: {reason}")]
    Field {
        /// The field at fault.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The data is longer than the five fields it encodes.
    #[error("DepositEvent data has {0} bytes after its last field")]
    Trailing(usize),
}

fn word(value: usize) -> [u8; 32] {
    let mut out = [0u8; 32];
    let (_, low) = out.split_at_mut(24);
    low.copy_from_slice(&(value as u64).to_be_bytes());
    out
}

fn padded(len: usize) -> usize {
    len.next_multiple_of(32)
}

/// The ABI-encoded data of the `DepositEvent` for `deposit` at `index`.
#[allow(
    clippy::arithmetic_side_effects,
    reason = "five fields of at most 96 bytes: every offset and length stays below 1 KiB"
)]
pub fn encode_deposit_event(deposit: &DepositData, index: u64) -> Vec<u8> {
    let amount = deposit.amount.to_le_bytes();
    let index = index.to_le_bytes();
    let values: [&[u8]; 5] = [
        &deposit.pubkey,
        &deposit.withdrawal_credentials,
        &amount,
        &deposit.signature,
        &index,
    ];
    let mut out = Vec::with_capacity(DEPOSIT_EVENT_DATA_BYTES);
    let mut offset = 32 * values.len();
    for value in values {
        out.extend_from_slice(&word(offset));
        offset += 32 + padded(value.len());
    }
    for value in values {
        out.extend_from_slice(&word(value.len()));
        out.extend_from_slice(value);
        out.resize(out.len() + padded(value.len()) - value.len(), 0);
    }
    out
}

fn read_word<'a>(data: &'a [u8], at: usize, what: &'static str) -> Result<&'a [u8], AbiError> {
    at.checked_add(32)
        .and_then(|end| data.get(at..end))
        .ok_or(AbiError::Truncated {
            what,
            len: data.len(),
        })
}

/// A word as a `usize`, refusing values that do not fit (an honest encoder never emits them).
fn read_usize(data: &[u8], at: usize, field: &'static str) -> Result<usize, AbiError> {
    let bytes = read_word(data, at, field)?;
    let (high, low) = bytes.split_at(24);
    let bad = || AbiError::Field {
        field,
        reason: format!("word 0x{} is not a small integer", hex::encode(bytes)),
    };
    if high.iter().any(|&b| b != 0) {
        return Err(bad());
    }
    let low: [u8; 8] = low.try_into().map_err(|_| bad())?;
    usize::try_from(u64::from_be_bytes(low)).map_err(|_| bad())
}

/// Bytes of the head: one offset word per field.
const HEAD_BYTES: usize = 32 * FIELDS.len();

/// Decodes a `DepositEvent`'s data into the deposit and its index. Strict: each field must
/// have its exact length, values must lie in the data without overlap, padding must be zero and
/// nothing may follow the last field.
pub fn decode_deposit_event(data: &[u8]) -> Result<(DepositData, u64), AbiError> {
    let mut values: [&[u8]; 5] = [&[]; 5];
    let mut expected_offset = HEAD_BYTES;
    for (slot, (i, (field, len))) in values.iter_mut().zip(FIELDS.iter().enumerate()) {
        let head = i.checked_mul(32).ok_or(AbiError::Truncated {
            what: field,
            len: data.len(),
        })?;
        let offset = read_usize(data, head, field)?;
        if offset != expected_offset {
            return Err(AbiError::Field {
                field,
                reason: format!(
                    "offset {offset}, expected {expected_offset} (fields must be in order, unpadded gaps refused)"
                ),
            });
        }
        let found = read_usize(data, offset, field)?;
        if found != *len {
            return Err(AbiError::Field {
                field,
                reason: format!("{found} bytes, expected {len}"),
            });
        }
        let start = offset.checked_add(32).ok_or(AbiError::Truncated {
            what: field,
            len: data.len(),
        })?;
        let end = start.checked_add(padded(*len)).ok_or(AbiError::Truncated {
            what: field,
            len: data.len(),
        })?;
        let region = data.get(start..end).ok_or(AbiError::Truncated {
            what: field,
            len: data.len(),
        })?;
        let (value, padding) = region.split_at(*len);
        if padding.iter().any(|&b| b != 0) {
            return Err(AbiError::Field {
                field,
                reason: "non-zero padding".into(),
            });
        }
        *slot = value;
        expected_offset = end;
    }
    if let Some(extra) = data.len().checked_sub(expected_offset).filter(|&n| n > 0) {
        return Err(AbiError::Trailing(extra));
    }
    let [pubkey, wc, amount, signature, index] = values;
    let field_err = |field: &'static str| AbiError::Field {
        field,
        reason: "wrong length".into(),
    };
    let deposit = DepositData {
        pubkey: pubkey.try_into().map_err(|_| field_err("pubkey"))?,
        withdrawal_credentials: wc
            .try_into()
            .map_err(|_| field_err("withdrawal_credentials"))?,
        amount: u64::from_le_bytes(amount.try_into().map_err(|_| field_err("amount"))?),
        signature: signature.try_into().map_err(|_| field_err("signature"))?,
    };
    let index = u64::from_le_bytes(index.try_into().map_err(|_| field_err("index"))?);
    Ok((deposit, index))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DepositData {
        DepositData {
            pubkey: [0xaa; 48],
            withdrawal_credentials: [0xbb; 32],
            amount: 32_000_000_000,
            signature: [0xcc; 96],
        }
    }

    #[test]
    fn the_topic_is_keccak_of_the_event_signature() {
        assert_eq!(
            hex::encode(deposit_event_topic()),
            "649bbc62d0e31342afea4e5cd82d4049e7e1ee912fc0889aa790803be39038c5"
        );
    }

    /// The layout written out word by word, as Solidity's ABI encoder emits it for these
    /// field sizes.
    #[test]
    fn encoding_matches_a_hand_computed_vector() {
        let mut expected = String::new();
        let w = |hex: &str| format!("{hex:0>64}");
        for offset in ["a0", "100", "140", "180", "200"] {
            expected += &w(offset);
        }
        expected += &w("30"); // 48
        expected += &"aa".repeat(48);
        expected += &"00".repeat(16);
        expected += &w("20"); // 32
        expected += &"bb".repeat(32);
        expected += &w("08");
        expected += "0040597307000000"; // 32e9 Gwei little-endian
        expected += &"00".repeat(24);
        expected += &w("60"); // 96
        expected += &"cc".repeat(96);
        expected += &w("08");
        expected += "0701000000000000"; // index 263 little-endian
        expected += &"00".repeat(24);
        let encoded = encode_deposit_event(&sample(), 263);
        assert_eq!(encoded.len(), DEPOSIT_EVENT_DATA_BYTES);
        assert_eq!(hex::encode(&encoded), expected);
        assert_eq!(decode_deposit_event(&encoded).unwrap(), (sample(), 263));
    }

    #[test]
    fn malformed_data_is_refused_by_field() {
        let good = encode_deposit_event(&sample(), 1);
        assert!(matches!(
            decode_deposit_event(&good[..575]),
            Err(AbiError::Truncated { .. })
        ));
        let mut trailing = good.clone();
        trailing.extend_from_slice(&[0; 32]);
        assert_eq!(decode_deposit_event(&trailing), Err(AbiError::Trailing(32)));
        let mut bad_len = good.clone();
        bad_len[0xa0 + 31] = 47;
        assert!(matches!(
            decode_deposit_event(&bad_len),
            Err(AbiError::Field {
                field: "pubkey",
                ..
            })
        ));
        let mut bad_pad = good.clone();
        bad_pad[0xa0 + 32 + 48] = 1;
        assert!(matches!(
            decode_deposit_event(&bad_pad),
            Err(AbiError::Field {
                field: "pubkey",
                ..
            })
        ));
        let mut huge_offset = good.clone();
        huge_offset[0] = 0xff;
        assert!(matches!(
            decode_deposit_event(&huge_offset),
            Err(AbiError::Field {
                field: "pubkey",
                ..
            })
        ));
    }
}

//! A record in a segment: `crc32 ‖ key length (u16) ‖ value length (u32) ‖ key ‖ value`,
//! little-endian, the CRC covering everything after it.

use super::*;

pub(super) fn encode_record(key: &[u8], value: &[u8]) -> Result<Vec<u8>, StoreError> {
    let key_len = u16::try_from(key.len()).map_err(|_| {
        StoreError::Corrupt(format!("a key of {} bytes is too long to log", key.len()))
    })?;
    let value_len = u32::try_from(value.len()).map_err(|_| {
        StoreError::Corrupt(format!(
            "a value of {} bytes is too long to log",
            value.len()
        ))
    })?;
    let mut out = Vec::with_capacity(HEADER.saturating_add(key.len()).saturating_add(value.len()));
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(&value_len.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let crc = crc32fast::hash(out.get(4..).unwrap_or_default());
    if let Some(head) = out.get_mut(..4) {
        head.copy_from_slice(&crc.to_le_bytes());
    }
    Ok(out)
}

/// One record parsed from `bytes` (at its start): key, value, total length. `None` when the
/// bytes do not hold a whole record with a matching CRC.
pub(super) fn parse_record(bytes: &[u8]) -> Option<(&[u8], &[u8], usize)> {
    let (crc, rest) = bytes.split_first_chunk::<4>()?;
    let (key_len, rest) = rest.split_first_chunk::<2>()?;
    let (value_len, rest) = rest.split_first_chunk::<4>()?;
    let key_len = usize::from(u16::from_le_bytes(*key_len));
    let value_len = usize::try_from(u32::from_le_bytes(*value_len)).ok()?;
    let body_len = key_len.checked_add(value_len)?;
    let body = rest.get(..body_len)?;
    let total = HEADER.checked_add(body_len)?;
    if crc32fast::hash(bytes.get(4..total)?) != u32::from_le_bytes(*crc) {
        return None;
    }
    let (key, value) = body.split_at_checked(key_len)?;
    Some((key, value, total))
}

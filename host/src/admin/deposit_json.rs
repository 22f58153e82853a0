//! The JSON form of a deposit, shared by the admin server and client.
//!
//! ```json
//! {"pubkey":"0x<96 hex>","withdrawal_credentials":"0x<64 hex>","amount":32000000000,
//!  "signature":"0x<192 hex>"}
//! ```
//! The `0x` prefix is optional on input and always written on output; unknown fields are
//! refused so a misspelt field is not silently ignored.

use serde_json::{Map, Value};

use crate::chain::block::DepositData;

/// The fields of a deposit object, in the order they are written.
pub const FIELDS: [&str; 4] = ["pubkey", "withdrawal_credentials", "amount", "signature"];

/// Why a request body is not a deposit. Every message names the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum DepositJsonError {
    /// The body is not JSON at all.
    #[error("body is not valid JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// The body is JSON but not an object.
    #[error("body must be a JSON object with fields {FIELDS:?}")]
    NotObject,
    /// The object has a field a deposit does not have.
    #[error("unknown field `{0}`; a deposit has exactly the fields {FIELDS:?}")]
    UnknownField(String),
    /// A required field is absent.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// A field holds the wrong kind of value or is malformed.
    #[error("field `{field}`: {reason}")]
    BadField {
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// The JSON object for `deposit`, hex fields `0x`-prefixed.
pub fn encode(deposit: &DepositData) -> Value {
    serde_json::json!({
        "pubkey": format!("0x{}", hex::encode(deposit.pubkey)),
        "withdrawal_credentials": format!("0x{}", hex::encode(deposit.withdrawal_credentials)),
        "amount": deposit.amount,
        "signature": format!("0x{}", hex::encode(deposit.signature)),
    })
}

/// Parses a request body into a deposit.
pub fn decode(body: &[u8]) -> Result<DepositData, DepositJsonError> {
    let Value::Object(map) = serde_json::from_slice(body)? else {
        return Err(DepositJsonError::NotObject);
    };
    if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(DepositJsonError::UnknownField(
            unknown.chars().take(64).collect(),
        ));
    }
    let amount = field(&map, "amount")?;
    Ok(DepositData {
        pubkey: hex_field(&map, "pubkey")?,
        withdrawal_credentials: hex_field(&map, "withdrawal_credentials")?,
        amount: amount.as_u64().ok_or_else(|| DepositJsonError::BadField {
            field: "amount",
            reason: format!("expected a non-negative integer number of Gwei, got {amount}"),
        })?,
        signature: hex_field(&map, "signature")?,
    })
}

fn field<'m>(
    map: &'m Map<String, Value>,
    name: &'static str,
) -> Result<&'m Value, DepositJsonError> {
    map.get(name).ok_or(DepositJsonError::MissingField(name))
}

fn hex_field<const N: usize>(
    map: &Map<String, Value>,
    name: &'static str,
) -> Result<[u8; N], DepositJsonError> {
    let bad = |reason: String| DepositJsonError::BadField {
        field: name,
        reason,
    };
    let Value::String(text) = field(map, name)? else {
        return Err(bad("expected a hex string".into()));
    };
    let digits = text.strip_prefix("0x").unwrap_or(text);
    // Evaluated at compile time: a field too large to double fails the build, not a request.
    let hex_len = const { 2 * N };
    if digits.len() != hex_len {
        return Err(bad(format!(
            "expected {N} bytes ({hex_len} hex characters, optional 0x prefix), got {} characters",
            digits.len()
        )));
    }
    let mut bytes = [0u8; N];
    hex::decode_to_slice(digits, &mut bytes).map_err(|e| bad(format!("invalid hex: {e}")))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_errors_name_the_field() {
        let deposit = DepositData {
            pubkey: [1; 48],
            withdrawal_credentials: [2; 32],
            amount: 32_000_000_000,
            signature: [3; 96],
        };
        let json = encode(&deposit).to_string();
        assert_eq!(decode(json.as_bytes()).unwrap(), deposit);
        let no_prefix = json.replace("0x", "");
        assert_eq!(decode(no_prefix.as_bytes()).unwrap(), deposit);

        let cases = [
            (
                json.replacen("0x0101", "0xzz01", 1),
                "field `pubkey`: invalid hex",
            ),
            (
                json.replacen("0x0202", "0x02", 1),
                "field `withdrawal_credentials`: expected 32",
            ),
            (json.replace("32000000000", "-1"), "field `amount`"),
            (
                json.replacen('}', ",\"extra\":1}", 1),
                "unknown field `extra`",
            ),
            ("{}".to_string(), "missing field"),
            ("[1]".to_string(), "JSON object"),
            ("{".to_string(), "not valid JSON"),
        ];
        for (body, expected) in cases {
            let err = decode(body.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{body}: {err}");
        }
    }
}

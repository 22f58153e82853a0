//! The JSON form of a deposit, shared by the dev contract's JSON-RPC endpoint (`rpc`), the
//! JSON-RPC client and `modnode deposit submit`.
//!
//! ```json
//! {"pubkey":"0x<96 hex>","withdrawal_credentials":"0x<64 hex>","amount":32000000000,
//!  "signature":"0x<192 hex>"}
//! ```
//! The `0x` prefix is optional on input and always written on output; unknown fields are
//! refused so a misspelt field is not silently ignored.

use serde_json::Value;

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

/// A deposit as JSON: hex fields as strings (the `0x` prefix optional on input), the amount in
/// Gwei. Parsed once; a field a deposit does not have is refused. Fields in alphabetical order,
/// as the hand-built object it replaces was written.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DepositBody {
    /// The amount in Gwei.
    amount: u64,
    /// The validator's BLS public key, 48 bytes in hex.
    pubkey: String,
    /// The deposit's BLS signature, 96 bytes in hex.
    signature: String,
    /// The withdrawal credentials, 32 bytes in hex.
    withdrawal_credentials: String,
}

/// The JSON object for `deposit`, hex fields `0x`-prefixed.
pub fn encode(deposit: &DepositData) -> Value {
    let body = DepositBody {
        amount: deposit.amount,
        pubkey: format!("0x{}", hex::encode(deposit.pubkey)),
        signature: format!("0x{}", hex::encode(deposit.signature)),
        withdrawal_credentials: format!("0x{}", hex::encode(deposit.withdrawal_credentials)),
    };
    // A struct of strings and an integer always serialises; Null is never returned.
    serde_json::to_value(body).unwrap_or(Value::Null)
}

/// Parses a request body into a deposit.
pub fn decode(body: &[u8]) -> Result<DepositData, DepositJsonError> {
    // Syntax first, so that "not JSON" and "not an object" keep their own answers.
    let value: Value = serde_json::from_slice(body)?;
    if !value.is_object() {
        return Err(DepositJsonError::NotObject);
    }
    let parsed: DepositBody = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if let Some(name) = FIELDS.iter().find(|name| **name == path) {
            DepositJsonError::BadField {
                field: name,
                reason: inner,
            }
        } else if let Some(rest) = inner.strip_prefix("unknown field `") {
            let name = rest.split('`').next().unwrap_or_default();
            DepositJsonError::UnknownField(name.chars().take(64).collect())
        } else if let Some(name) = FIELDS
            .iter()
            .find(|name| inner.contains(&format!("`{name}`")))
        {
            DepositJsonError::MissingField(name)
        } else {
            DepositJsonError::NotObject
        }
    })?;
    Ok(DepositData {
        pubkey: hex_field(&parsed.pubkey, "pubkey")?,
        withdrawal_credentials: hex_field(
            &parsed.withdrawal_credentials,
            "withdrawal_credentials",
        )?,
        amount: parsed.amount,
        signature: hex_field(&parsed.signature, "signature")?,
    })
}

/// `text` (hex, optional `0x`) as the `N` bytes of field `name`, or why not.
fn hex_field<const N: usize>(text: &str, name: &'static str) -> Result<[u8; N], DepositJsonError> {
    let bad = |reason: String| DepositJsonError::BadField {
        field: name,
        reason,
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
            (
                json.replacen("\"0x0101", "7, \"x\": \"", 1),
                "field `pubkey`",
            ),
            ("[1]".to_string(), "JSON object"),
            ("{".to_string(), "not valid JSON"),
        ];
        for (body, expected) in cases {
            let err = decode(body.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{body}: {err}");
        }
    }
}

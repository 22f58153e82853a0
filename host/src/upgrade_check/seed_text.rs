//! A run's seed in JSON as a decimal string: a `u64` above 2^53 loses digits in the JSON tools
//! operators pipe reports into (`jq`, JavaScript), and a seed that comes back wrong replays a
//! different run. Reading accepts a string or, as older case files wrote it, a number.

use serde::{Deserialize, Deserializer, Serializer};

/// Writes `seed` as a decimal string.
pub fn serialize<S: Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(seed)
}

/// Reads a seed written as a decimal string or as a number.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Seed {
        Text(String),
        Number(u64),
    }
    match Seed::deserialize(d)? {
        Seed::Number(seed) => Ok(seed),
        Seed::Text(text) => text.parse().map_err(|e| {
            serde::de::Error::custom(format!("seed `{text}` is not a decimal u64: {e}"))
        }),
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Run {
        #[serde(with = "super")]
        seed: u64,
    }

    #[test]
    fn a_seed_goes_out_as_text_and_comes_back_whole_from_text_or_an_old_number() {
        let big = Run { seed: u64::MAX - 1 };
        let json = serde_json::to_string(&big).unwrap();
        assert_eq!(json, r#"{"seed":"18446744073709551614"}"#);
        assert_eq!(serde_json::from_str::<Run>(&json).unwrap(), big);
        assert_eq!(
            serde_json::from_str::<Run>(r#"{"seed":9}"#).unwrap(),
            Run { seed: 9 }
        );
        let err = serde_json::from_str::<Run>(r#"{"seed":"nine"}"#).unwrap_err();
        assert!(err.to_string().contains("seed `nine`"), "{err}");
    }
}

//! A module that takes another's name. A module's name is its kind and the version its
//! `describe()` gives (`gossip-policy-v3`), so a copied template or example that still
//! describes itself as the module it was copied from shows, in `module list` and in every log
//! line, under the name of a different module. `module inspect` and `module upload` say so.

use serde_json::Value;
use sha2::Digest as _;

use super::module::at;

/// What an author should do about a namesake.
const FIX: &str = "give yours another `version` in describe() (or another kind name) so the \
                   two can be told apart";

/// A warning for each module built into this `modnode` named `<kind>-v<version>` whose bytes
/// are not `sha256`'s.
pub fn built_in(kind: &str, version: u32, sha256: &[u8; 32]) -> Vec<String> {
    let name = format!("{kind}-v{version}");
    modnode::artifacts::EMBEDDED
        .iter()
        .filter(|(built_in, _)| *built_in == name)
        .map(|(_, bytes)| <[u8; 32]>::from(sha2::Sha256::digest(bytes)))
        .filter(|other| other != sha256)
        .map(|other| {
            format!(
                "warning: this module describes itself as {name}, the name of modnode's built-in \
                 {name} (sha256 {}), a different module; {FIX}",
                hex::encode(other)
            )
        })
        .collect()
}

/// A warning for each module a node's `GET /modules` answer (`listing`) holds — ready or
/// stored — of kind `kind` and version `version` whose sha256 (hex) is not `sha256`.
pub fn listed(kind: &str, version: u64, sha256: &str, listing: &Value) -> Vec<String> {
    let name = format!("{kind}-v{version}");
    let empty = Vec::new();
    let mut others: Vec<String> = Vec::new();
    for entry in at(listing, "/kinds").as_array().unwrap_or(&empty) {
        if at(entry, "/kind").as_str() != Some(kind) {
            continue;
        }
        let ready = at(entry, "/ready").as_array().unwrap_or(&empty).iter();
        let ready = ready.filter(|m| {
            at(m, "/name")
                .as_str()
                .is_some_and(|n| n.split('@').next() == Some(name.as_str()))
        });
        let stored = at(entry, "/stored").as_array().unwrap_or(&empty).iter();
        let stored = stored.filter(|m| at(m, "/module_version").as_u64() == Some(version));
        for module in ready.chain(stored) {
            if let Some(other) = at(module, "/sha256").as_str()
                && other != sha256
                && !others.iter().any(|o| o == other)
            {
                others.push(other.to_string());
            }
        }
    }
    others
        .into_iter()
        .map(|other| {
            format!(
                "warning: the node already holds another module named {name} (sha256 {other}); \
                 `module list` and its logs show both under that name: {FIX}"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_in_name_with_other_bytes_is_a_namesake_and_the_same_bytes_are_not() {
        let v3 = modnode::artifacts::embedded("gossip-policy-v3").unwrap();
        let own: [u8; 32] = sha2::Sha256::digest(v3).into();
        assert!(built_in("gossip-policy", 3, &own).is_empty());
        let warnings = built_in("gossip-policy", 3, &[7; 32]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains(&hex::encode(own)), "{warnings:?}");
        assert!(built_in("gossip-policy", 77, &[7; 32]).is_empty());
    }

    #[test]
    fn a_listed_module_of_the_same_name_and_other_bytes_is_a_namesake() {
        let listing = serde_json::json!({ "kinds": [
            { "kind": "gossip-policy",
              "ready": [
                  { "name": "gossip-policy-v3@aaaaaaaaaaaa", "sha256": "aa" },
                  { "name": "gossip-policy-v3@bbbbbbbbbbbb", "sha256": "bb" },
                  { "name": "gossip-policy-v2@cccccccccccc", "sha256": "cc" } ],
              "stored": [
                  { "module_version": 3, "sha256": "bb" },
                  { "module_version": 3, "sha256": "dd" } ] },
            { "kind": "deposits",
              "ready": [ { "name": "gossip-policy-v3@eeeeeeeeeeee", "sha256": "ee" } ] } ] });
        let warnings = listed("gossip-policy", 3, "bb", &listing);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("sha256 aa"), "{warnings:?}");
        assert!(warnings[1].contains("sha256 dd"), "{warnings:?}");
        assert!(listed("gossip-policy", 4, "bb", &listing).is_empty());
    }
}

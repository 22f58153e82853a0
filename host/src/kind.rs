//! The module kinds modnode knows, as names: which kinds exist, what each is called and whether
//! its outputs decide consensus. What the runtime needs to run a kind (its contracts, world,
//! host interfaces, fuel and output bounds) is `runtime::kinds`; this is the part the state
//! needs too (the on-chain schedule names modules by kind), so it sits below both.

use std::fmt;

/// The module kinds modnode knows, one per WIT world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `modnode:deposits` — deposit processing (consensus).
    Deposits,
    /// `modnode:checkpoint` — checkpoint chunking.
    Checkpoint,
    /// `modnode:gossip-policy` — gossip decisions.
    GossipPolicy,
}

/// Whether a kind's outputs decide consensus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Every node must run the same version at the same height: versions switch only at a height
    /// agreed on chain.
    Consensus,
    /// Only this node's behaviour depends on it: versions switch live (shadow, canary, activate,
    /// roll back).
    Local,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Deposits, Kind::Checkpoint, Kind::GossipPolicy];

    /// The WIT package name (without namespace and version), also the kind's name.
    pub const fn package(self) -> &'static str {
        match self {
            Kind::Deposits => "deposits",
            Kind::Checkpoint => "checkpoint",
            Kind::GossipPolicy => "gossip-policy",
        }
    }

    /// Consensus or local.
    pub const fn scope(self) -> Scope {
        match self {
            Kind::Deposits => Scope::Consensus,
            Kind::Checkpoint | Kind::GossipPolicy => Scope::Local,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.package())
    }
}

impl serde::Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.package())
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.package() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Kind::ALL.iter().map(|k| k.package()).collect();
                format!(
                    "unknown module kind `{s}` (expected one of {})",
                    known.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_from_its_name_and_an_unknown_name_lists_them() {
        for kind in Kind::ALL {
            assert_eq!(kind.package().parse::<Kind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.package());
        }
        let err = "nope".parse::<Kind>().unwrap_err();
        assert!(err.contains("deposits, checkpoint, gossip-policy"), "{err}");
        assert_eq!(Kind::Deposits.scope(), Scope::Consensus);
    }
}

//! The module kinds as data: one row of [`KINDS`] per WIT world says everything the runtime
//! needs to know about a kind — its package and contract version, its world, which host
//! interfaces it may import, its fuel budget and whether it decides consensus. Adding a kind or a
//! contract version is a new row (plus the world's small bindgen module), not a new copy of the
//! loading, calling and swapping code.

use std::fmt;

use super::inspect::Version;

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

/// One kind, as data.
#[derive(Debug, Clone, Copy)]
pub struct KindSpec {
    /// The kind.
    pub kind: Kind,
    /// The WIT package name (without namespace and version), also the kind's name.
    pub package: &'static str,
    /// The contract (WIT package) version this host implements.
    pub contract: Version,
    /// The world a component of this kind implements.
    pub world: &'static str,
    /// The interface a component of this kind exports.
    pub export_interface: &'static str,
    /// Host interfaces of the kind's own package a component may import.
    pub importable: &'static [&'static str],
    /// Fuel each call starts with (the engine profile's per-kind budget).
    pub fuel_budget: u64,
    /// Consensus or local.
    pub scope: Scope,
}

const V1: Version = Version {
    major: 1,
    minor: 0,
    patch: 0,
};

/// deposits 2.0.0: every deposit proven against the agreed deposit root (issue 9);
/// checkpoint 2.0.0: concatenated leaf reads and chunk contents (issue 12).
const V2: Version = Version {
    major: 2,
    minor: 0,
    patch: 0,
};

/// Every kind the host implements.
pub const KINDS: [KindSpec; 3] = [
    KindSpec {
        kind: Kind::Deposits,
        package: "deposits",
        contract: V2,
        world: "modnode:deposits/deposits",
        export_interface: "processor",
        importable: &["types", "registry", "crypto"],
        fuel_budget: 2_000_000_000,
        scope: Scope::Consensus,
    },
    KindSpec {
        kind: Kind::Checkpoint,
        package: "checkpoint",
        contract: V2,
        world: "modnode:checkpoint/checkpoint",
        export_interface: "chunker",
        importable: &["types", "state-reader"],
        fuel_budget: 2_000_000_000,
        scope: Scope::Local,
    },
    KindSpec {
        kind: Kind::GossipPolicy,
        package: "gossip-policy",
        contract: V1,
        world: "modnode:gossip-policy/gossip-policy",
        export_interface: "policy",
        importable: &["types"],
        fuel_budget: 100_000_000,
        scope: Scope::Local,
    },
];

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Deposits, Kind::Checkpoint, Kind::GossipPolicy];

    /// The kind's row of [`KINDS`].
    pub fn spec(self) -> &'static KindSpec {
        match self {
            Kind::Deposits => &KINDS[0],
            Kind::Checkpoint => &KINDS[1],
            Kind::GossipPolicy => &KINDS[2],
        }
    }

    /// The WIT package name (without namespace and version).
    pub fn package(self) -> &'static str {
        self.spec().package
    }

    /// The interface a component of this kind exports.
    pub fn export_interface(self) -> &'static str {
        self.spec().export_interface
    }

    /// Host interfaces of the kind's own package a component may import.
    pub fn importable(self) -> &'static [&'static str] {
        self.spec().importable
    }

    /// The contract version this host implements.
    pub fn contract(self) -> Version {
        self.spec().contract
    }

    /// Consensus or local.
    pub fn scope(self) -> Scope {
        self.spec().scope
    }

    /// `modnode:<package>/<export>@<version>`, the export that identifies the world.
    pub fn export_name(self) -> String {
        format!(
            "modnode:{}/{}@{}",
            self.package(),
            self.export_interface(),
            self.contract()
        )
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
                let known: Vec<&str> = KINDS.iter().map(|k| k.package).collect();
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
    fn the_table_and_the_enum_agree() {
        for (row, kind) in KINDS.iter().zip(Kind::ALL) {
            assert_eq!(row.kind, kind);
            assert_eq!(kind.spec().kind, kind);
            assert_eq!(kind.package().parse::<Kind>(), Ok(kind));
            assert!(row.world.starts_with(&format!("modnode:{}/", row.package)));
            assert!(row.fuel_budget > 0);
        }
        assert!(
            "nope"
                .parse::<Kind>()
                .unwrap_err()
                .contains("gossip-policy")
        );
    }
}

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
    /// How long what a module of this kind returns may be.
    pub bounds: OutputBounds,
}

/// Bounds on what a module of a kind returns (issue 21, item 7). Every list and string a
/// module returns is checked against them before the host uses it
/// ([`super::bounds`]); one over its bound is a module fault (a local kind's previous version,
/// where there is one, serves the call instead). Lists of bytes whose length the host checks
/// anyway (a checkpoint chunk against its manifest) are bounded here too, so nothing a module
/// returns is unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputBounds {
    /// Bytes of each string `describe()` returns: the kind's name, the description, each
    /// parameter's name and value.
    pub describe_string_bytes: usize,
    /// Parameters `describe()` returns.
    pub describe_params: usize,
    /// Items of the list the kind's main call returns: a gossip plan's targets, a checkpoint
    /// plan's ranges (chunks), a deposits call's outcomes (also at most one per deposit).
    pub list_items: usize,
    /// Bytes of a byte list a call returns (a checkpoint chunk, the leaves and proof it opens
    /// to); 0 for kinds that return none.
    pub bytes: usize,
    /// Bytes of an error message a call returns; 0 for kinds that return none.
    pub message_bytes: usize,
    /// Linear memory of one call, when below the engine profile's pinned limit: a local kind
    /// that has no use for more is refused cheaply when it tries to build a huge output.
    /// `None` keeps the pinned limit (consensus kinds: the limit is consensus).
    pub memory_bytes: Option<usize>,
}

/// What `describe()` may return, for every kind: a name, a paragraph and a few parameters.
const DESCRIBE_STRING_BYTES: usize = 4 << 10;
/// Parameters `describe()` may return, for every kind.
const DESCRIBE_PARAMS: usize = 64;

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
        bounds: OutputBounds {
            describe_string_bytes: DESCRIBE_STRING_BYTES,
            describe_params: DESCRIBE_PARAMS,
            // A block carries at most `max_deposits_per_block`; outcomes are also checked
            // against the deposits of the call.
            list_items: 1 << 16,
            bytes: 0,
            message_bytes: 4 << 10,
            memory_bytes: None,
        },
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
        bounds: OutputBounds {
            describe_string_bytes: DESCRIBE_STRING_BYTES,
            describe_params: DESCRIBE_PARAMS,
            // The manifest's own limits (`checkpoint::ManifestLimits`): chunks and their size.
            list_items: 1 << 16,
            bytes: 64 << 20,
            message_bytes: 4 << 10,
            memory_bytes: None,
        },
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
        bounds: OutputBounds {
            describe_string_bytes: DESCRIBE_STRING_BYTES,
            describe_params: DESCRIBE_PARAMS,
            // One target per connected peer is all a plan can use; far above any peer set.
            list_items: 4 << 10,
            bytes: 0,
            message_bytes: 0,
            // A plan of 4,096 targets takes 32 KiB; 16 MiB refuses a 3M-target plan at its
            // first large allocation instead of after ~100M fuel.
            memory_bytes: Some(16 << 20),
        },
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

    /// How long what a module of this kind returns may be.
    pub fn bounds(self) -> &'static OutputBounds {
        &self.spec().bounds
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
            assert!(row.bounds.list_items > 0 && row.bounds.describe_string_bytes > 0);
            // Only a local kind may run below the pinned memory limit.
            assert!(row.bounds.memory_bytes.is_none() || row.scope == Scope::Local);
        }
        assert!(
            "nope"
                .parse::<Kind>()
                .unwrap_err()
                .contains("gossip-policy")
        );
    }
}

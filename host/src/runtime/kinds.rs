//! The module kinds as data: one row of [`KINDS`] per kind says everything the runtime needs to
//! know about it — every contract (WIT package) version the host implements for it, its world,
//! which host interfaces it may import, its fuel budget and its output bounds. Its name and
//! whether it decides consensus are [`crate::kind`]'s, below the state (the schedule names
//! modules by kind). Adding a kind is a new row; adding a contract version to a kind is a new
//! [`Contract`] in its row (the WIT under `wit/`) plus that contract's bindgen module beside the
//! kind's world (`runtime/<kind>.rs`) — not a new copy of the loading, calling and swapping
//! code. A module declares its contract by the package version of the interface it exports;
//! the runtime binds it to the host implementation of that contract ([`Kind::implementing`]).

use super::inspect::Version;

pub use crate::kind::{Kind, Scope};

/// One kind, as data.
#[derive(Debug, Clone, Copy)]
pub struct KindSpec {
    /// The kind.
    pub kind: Kind,
    /// Every contract (WIT package) version this host implements for the kind, oldest first:
    /// every version a chain has used stays, so old heights replay on their own contract.
    pub contracts: &'static [Contract],
    /// The world a component of this kind implements.
    pub world: &'static str,
    /// The interface a component of this kind exports.
    pub export_interface: &'static str,
    /// Host interfaces of the kind's own package a component may import.
    pub importable: &'static [&'static str],
    /// Fuel each call starts with (the engine profile's per-kind budget).
    pub fuel_budget: u64,
    /// How long what a module of this kind returns may be.
    pub bounds: OutputBounds,
}

/// Bounds on what a module of a kind returns. Every list and string a
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
    /// Bytes of the state a stateful contract's module hands back to the host to keep between
    /// calls (gossip-policy@2.0.0); 0 for kinds whose contracts keep none.
    pub state_bytes: usize,
    /// Linear memory of one call, when below the engine profile's pinned limit: a local kind
    /// that has no use for more is refused cheaply when it tries to build a huge output.
    /// `None` keeps the pinned limit (consensus kinds: the limit is consensus).
    pub memory_bytes: Option<usize>,
}

/// One contract version of a kind: its version and the WIT package the host's bindings of it
/// are generated from (also what export signatures are checked against).
#[derive(Debug, Clone, Copy)]
pub struct Contract {
    /// The WIT package version.
    pub version: Version,
    /// The package's WIT text.
    pub wit: &'static str,
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

/// deposits 2.0.0: every deposit proven against the agreed deposit root;
/// checkpoint 2.0.0: concatenated leaf reads and chunk contents.
const V2: Version = Version {
    major: 2,
    minor: 0,
    patch: 0,
};

/// deposits 2.0.0 (`wit/deposits`).
const DEPOSITS_2: Contract = Contract {
    version: V2,
    wit: include_str!("../../../wit/deposits/deposits.wit"),
};
/// deposits 3.0.0 (`wit/deposits-3`): Electra's pending-deposit queue.
const DEPOSITS_3: Contract = Contract {
    version: Version {
        major: 3,
        minor: 0,
        patch: 0,
    },
    wit: include_str!("../../../wit/deposits-3/deposits.wit"),
};
/// checkpoint 2.0.0 (`wit/checkpoint`).
const CHECKPOINT_2: Contract = Contract {
    version: V2,
    wit: include_str!("../../../wit/checkpoint/checkpoint.wit"),
};
/// gossip-policy 1.0.0 (`wit/gossip-policy`): a pure plan function.
const GOSSIP_POLICY_1: Contract = Contract {
    version: V1,
    wit: include_str!("../../../wit/gossip-policy/gossip-policy.wit"),
};
/// gossip-policy 2.0.0 (`wit/gossip-policy-2`): state kept by the host, events in.
const GOSSIP_POLICY_2: Contract = Contract {
    version: V2,
    wit: include_str!("../../../wit/gossip-policy-2/gossip-policy.wit"),
};

/// Every kind the host implements.
pub const KINDS: [KindSpec; 3] = [
    KindSpec {
        kind: Kind::Deposits,
        contracts: &[DEPOSITS_2, DEPOSITS_3],
        world: "modnode:deposits/deposits",
        export_interface: "processor",
        importable: &["types", "registry", "queue", "crypto"],
        fuel_budget: 2_000_000_000,
        bounds: OutputBounds {
            describe_string_bytes: DESCRIBE_STRING_BYTES,
            describe_params: DESCRIBE_PARAMS,
            // A block carries at most `max_deposits_per_block`; outcomes are also checked
            // against the deposits of the call.
            list_items: 1 << 16,
            bytes: 0,
            message_bytes: 4 << 10,
            state_bytes: 0,
            memory_bytes: None,
        },
    },
    KindSpec {
        kind: Kind::Checkpoint,
        contracts: &[CHECKPOINT_2],
        world: "modnode:checkpoint/checkpoint",
        export_interface: "chunker",
        importable: &["types", "state-reader"],
        fuel_budget: 2_000_000_000,
        bounds: OutputBounds {
            describe_string_bytes: DESCRIBE_STRING_BYTES,
            describe_params: DESCRIBE_PARAMS,
            // The manifest's own limits (`checkpoint::ManifestLimits`): chunks and their size.
            list_items: 1 << 16,
            bytes: 64 << 20,
            message_bytes: 4 << 10,
            state_bytes: 0,
            memory_bytes: None,
        },
    },
    KindSpec {
        kind: Kind::GossipPolicy,
        contracts: &[GOSSIP_POLICY_1, GOSSIP_POLICY_2],
        world: "modnode:gossip-policy/gossip-policy",
        export_interface: "policy",
        importable: &["types"],
        fuel_budget: 100_000_000,
        bounds: OutputBounds {
            describe_string_bytes: DESCRIBE_STRING_BYTES,
            describe_params: DESCRIBE_PARAMS,
            // One target per connected peer is all a plan can use; far above any peer set.
            list_items: 4 << 10,
            bytes: 0,
            message_bytes: 0,
            // Memory of a few thousand peers and recent messages; far below the call's memory.
            state_bytes: 64 << 10,
            // A plan of 4,096 targets takes 32 KiB; 16 MiB refuses a 3M-target plan at its
            // first large allocation instead of after ~100M fuel.
            memory_bytes: Some(16 << 20),
        },
    },
];

impl Kind {
    /// The kind's row of [`KINDS`].
    pub fn spec(self) -> &'static KindSpec {
        match self {
            Kind::Deposits => &KINDS[0],
            Kind::Checkpoint => &KINDS[1],
            Kind::GossipPolicy => &KINDS[2],
        }
    }

    /// The interface a component of this kind exports.
    pub fn export_interface(self) -> &'static str {
        self.spec().export_interface
    }

    /// Host interfaces of the kind's own package a component may import.
    pub fn importable(self) -> &'static [&'static str] {
        self.spec().importable
    }

    /// Every contract version this host implements for the kind, oldest first.
    pub fn contracts(self) -> &'static [Contract] {
        self.spec().contracts
    }

    /// The host contract a module declaring `declared` runs on: the implemented version of the
    /// same major that is not older than `declared` (a module may be built against an older
    /// minor). `None`: the host does not implement that contract.
    pub fn implementing(self, declared: Version) -> Option<&'static Contract> {
        self.contracts()
            .iter()
            .find(|c| declared.runs_on(c.version))
    }

    /// How long what a module of this kind returns may be.
    pub fn bounds(self) -> &'static OutputBounds {
        &self.spec().bounds
    }

    /// `modnode:<package>/<export>@<version>`, the export that identifies the world at
    /// contract `version`.
    pub fn export_name(self, version: Version) -> String {
        format!(
            "modnode:{}/{}@{version}",
            self.package(),
            self.export_interface(),
        )
    }

    /// The export names of every contract the host implements, comma-separated (for errors).
    pub fn implemented_exports(self) -> String {
        self.contracts()
            .iter()
            .map(|c| self.export_name(c.version))
            .collect::<Vec<_>>()
            .join(", ")
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
            assert!(
                row.world
                    .starts_with(&format!("modnode:{}/", kind.package()))
            );
            assert!(row.fuel_budget > 0);
            // Contracts oldest first, one per major (a module picks its contract by major).
            assert!(!row.contracts.is_empty());
            assert!(
                row.contracts
                    .windows(2)
                    .all(|w| w[0].version.major < w[1].version.major)
            );
            for c in row.contracts {
                assert!(
                    c.wit.contains(&format!(
                        "package modnode:{}@{};",
                        kind.package(),
                        c.version
                    )),
                    "{} {}",
                    kind.package(),
                    c.version
                );
                assert_eq!(
                    kind.implementing(c.version).map(|h| h.version),
                    Some(c.version)
                );
            }
            assert!(row.bounds.list_items > 0 && row.bounds.describe_string_bytes > 0);
            // Only a local kind may run below the pinned memory limit.
            assert!(row.bounds.memory_bytes.is_none() || kind.scope() == Scope::Local);
        }
        assert!(
            "nope"
                .parse::<Kind>()
                .unwrap_err()
                .contains("gossip-policy")
        );
    }
}

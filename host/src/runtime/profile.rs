//! The engine profile: everything about the engine that can change a consensus outcome, pinned
//! in genesis like any other consensus parameter.
//!
//! wasm fuel counts have changed between wasmtime releases (v46 made bulk-memory operators charge
//! per byte), and the same module then runs out of fuel on one node and not on another: a chain
//! split that no module author can prevent. So the profile states the wasmtime major version,
//! the target architecture, the determinism settings, the resource limits of every call's store,
//! an explicit fuel cost for every operator (handed to wasmtime 48's `Config::operator_cost`,
//! never wasmtime's changing defaults), the fuel budget of each kind and the fuel every host call
//! charges for its work. Its hash is part of the genesis configuration hash; a node whose build
//! implements another profile refuses to start and names both and every field that differs.
//!
//! # Stack exhaustion is not a module fault
//!
//! How deep a guest recurses before it exhausts [`Determinism::max_wasm_stack`] depends on the
//! native frames Cranelift emits: on the architecture, on the CPU features the host detects, on
//! the wasmtime build. Fuel cannot bound it either: a function's locals cost no fuel, so one
//! frame can take kilobytes of stack for a handful of operators, and a 2·10⁹ budget pays for
//! recursions far deeper than any stack a node can give a guest thread. So stack exhaustion is
//! a host failure ([`StackExhausted`](super::HostFailureKind::StackExhausted)): this node could
//! not run the call, never a reason to reject a block or penalise a peer. A node that hits it
//! stops at that block (its own condition) instead of splitting from nodes whose frames happen
//! to be smaller. The limit and the architecture are still pinned, so every node of a chain
//! gives guests the same room. (A local kind's circuit breaker still counts it against the
//! candidate: [`CallError::blames_module`](super::CallError::blames_module).)

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::kinds::KINDS;
use super::limits::Limits;

/// The wasmtime major version this build links (`wasmtime = "48.x"` in the workspace).
pub const WASMTIME_MAJOR: u32 = 48;

/// The engine profile. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineProfile {
    /// wasmtime major version; fuel and trap semantics are only promised within one.
    pub wasmtime_major: u32,
    /// The architecture modules are compiled for.
    pub target: Target,
    /// Settings that make execution deterministic.
    pub determinism: Determinism,
    /// Resource limits of every call's store (memory, tables, instances).
    pub limits: Limits,
    /// Fuel cost of every wasm operator.
    pub fuel: FuelTable,
    /// Fuel budget of one call, per kind (by kind name).
    pub budgets: BTreeMap<String, u64>,
    /// Fuel a deposits call's budget grows by per deposit in the block: a block of `n`
    /// deposits runs with `budgets["deposits"] + n × this` ([`EngineProfile::deposits_budget`]).
    /// A block must carry every due deposit (up to `max_deposits_per_block`), so a fixed budget
    /// would make a large enough block impossible to process — the chain would halt. This
    /// covers the worst per-deposit cost of every deposits module in the tree with a margin:
    /// a batched engine's failed batch share plus its fallback to one check per deposit.
    pub deposits_budget_per_deposit: u64,
    /// Fuel charged for host calls, in proportion to their work.
    pub host_calls: HostCallFuel,
}

/// What the engine compiles modules for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// The CPU architecture (Rust's `std::env::consts::ARCH`, e.g. `x86_64`, `aarch64`): native
    /// code, and so the stack a call uses and the host's page size, differ between them.
    pub arch: String,
}

/// The engine settings that make execution deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Determinism {
    /// NaNs are canonicalized after every float operation.
    pub nan_canonicalization: bool,
    /// Relaxed SIMD (implementation-defined results) is enabled.
    pub relaxed_simd: bool,
    /// The threads proposal (shared memory) is enabled.
    pub threads: bool,
    /// Largest wasm stack in bytes: where a deep recursion stops. Exhausting it is a host
    /// failure, never block-invalid (see the module docs).
    pub max_wasm_stack: u64,
}

/// Fuel per wasm operator: `default` for every operator not listed in `operators`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FuelTable {
    /// Cost of any operator not in `operators`.
    pub default: u8,
    /// Operators (by wasmparser name, e.g. `I32Add`) whose cost differs from `default`.
    pub operators: BTreeMap<String, u8>,
    /// Per-byte, per-element and per-page costs of operators whose work depends on an operand.
    pub variable: VariableFuel,
}

/// Costs of work whose size is only known at run time (charged on top of the flat cost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariableFuel {
    /// Per byte copied by `memory.copy`.
    pub memory_copy_per_byte: u8,
    /// Per byte written by `memory.fill`.
    pub memory_fill_per_byte: u8,
    /// Per byte copied by `memory.init`.
    pub memory_init_per_byte: u8,
    /// Per page requested by `memory.grow`.
    pub memory_grow_per_page: u8,
    /// Per element copied by `table.copy`.
    pub table_copy_per_element: u8,
    /// Per element written by `table.fill`.
    pub table_fill_per_element: u8,
    /// Per element copied by `table.init`.
    pub table_init_per_element: u8,
    /// Per element requested by `table.grow`.
    pub table_grow_per_element: u8,
}

/// Fuel host functions charge for their work, so a module looping on an expensive host call runs
/// out of fuel as fast as one looping in wasm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCallFuel {
    /// Every host call, for crossing the boundary.
    pub call: u64,
    /// Per byte of list arguments copied into the host.
    pub per_argument_byte: u64,
    /// One BLS signature verification (a pairing check, ~1 ms).
    pub bls_verify: u64,
    /// A batch verification, once.
    pub bls_verify_batch_base: u64,
    /// A batch verification, per signature set.
    pub bls_verify_batch_per_set: u64,
    /// A registry lookup by pubkey (hash-map probe plus a confirming read).
    pub registry_lookup: u64,
    /// A registry write (new validator or balance change).
    pub registry_write: u64,
    /// Per state leaf read or proven by a checkpoint module.
    pub state_read_per_leaf: u64,
}

/// Why a profile cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The fuel table names an operator this wasmtime does not have.
    #[error("engine profile fuel table: unknown operator `{0}`")]
    UnknownOperator(String),
    /// The table could not be turned into wasmtime's form.
    #[error("engine profile fuel table: {0}")]
    Table(String),
    /// The genesis profile is not the one this build implements.
    #[error(
        "the genesis engine profile {genesis} does not match this build's engine profile {build} \
         ({differences}); run a modnode build made for this chain, or use a genesis with this \
         build's profile"
    )]
    Mismatch {
        /// The genesis profile: hash and summary.
        genesis: String,
        /// This build's profile: hash and summary.
        build: String,
        /// Every field that differs, `path: genesis value vs build value`.
        differences: String,
    },
}

/// [`EngineProfile::deposits_budget_per_deposit`] of this build. Measured by the test
/// `deposit_budget::the_per_deposit_budget_covers_every_deposits_module_at_its_worst_with_a_margin`
/// (marginal fuel per deposit between a block of 64 deposits and one of 192, each module at
/// its worst): deposits-v1, every signature valid, 1,477,268; deposits-v2 with one bad
/// signature (the batch fails, then every deposit is checked alone), 1,688,421. This is the
/// larger with a margin of 1.78× (the test requires at least 1.5×).
pub const DEPOSITS_BUDGET_PER_DEPOSIT: u64 = 3_000_000;

/// Operators wasmtime 48 charges nothing by default (no code, or plain control flow), stated
/// here so a later wasmtime changing its defaults cannot change our counts.
const FREE_OPERATORS: [&str; 8] = [
    "Nop",
    "Drop",
    "Block",
    "Loop",
    "Unreachable",
    "Return",
    "Else",
    "End",
];

impl EngineProfile {
    /// The profile this build implements (and configures its engine with).
    pub fn build() -> &'static EngineProfile {
        static BUILD: OnceLock<EngineProfile> = OnceLock::new();
        BUILD.get_or_init(|| EngineProfile {
            wasmtime_major: WASMTIME_MAJOR,
            target: Target {
                arch: std::env::consts::ARCH.to_string(),
            },
            determinism: Determinism {
                nan_canonicalization: true,
                relaxed_simd: false,
                threads: false,
                max_wasm_stack: super::engine::MAX_WASM_STACK as u64,
            },
            limits: Limits::PINNED,
            fuel: FuelTable {
                default: 1,
                operators: FREE_OPERATORS
                    .iter()
                    .map(|op| ((*op).to_string(), 0))
                    .collect(),
                variable: VariableFuel {
                    memory_copy_per_byte: 1,
                    memory_fill_per_byte: 1,
                    memory_init_per_byte: 1,
                    memory_grow_per_page: 0,
                    table_copy_per_element: 1,
                    table_fill_per_element: 1,
                    table_init_per_element: 1,
                    table_grow_per_element: 1,
                },
            },
            budgets: KINDS
                .iter()
                .map(|k| (k.kind.package().to_string(), k.fuel_budget))
                .collect(),
            deposits_budget_per_deposit: DEPOSITS_BUDGET_PER_DEPOSIT,
            host_calls: HostCallFuel {
                call: 100,
                per_argument_byte: 1,
                bls_verify: 1_000_000,
                bls_verify_batch_base: 1_000_000,
                bls_verify_batch_per_set: 400_000,
                registry_lookup: 500,
                registry_write: 2_000,
                state_read_per_leaf: 200,
            },
        })
    }

    /// The profile as canonical JSON (fields in declaration order, maps sorted).
    pub fn canonical_json(&self) -> String {
        // Serializing plain structs, maps with string keys and integers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// SHA-256 of the canonical JSON: the profile's identity in the genesis hash.
    pub fn hash(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"modnode-engine-profile-v1");
        h.update(self.canonical_json().as_bytes());
        h.finalize().into()
    }

    /// `<first 8 bytes of the hash in hex> (wasmtime <major>, ...)`: how errors name a profile.
    pub fn summary(&self) -> String {
        let hash = self.hash();
        format!(
            "{} (wasmtime {} on {}, default operator fuel {}, {} operator overrides, bls-verify \
             fuel {})",
            hex::encode(hash.get(..8).unwrap_or_default()),
            self.wasmtime_major,
            self.target.arch,
            self.fuel.default,
            self.fuel.operators.len(),
            self.host_calls.bls_verify
        )
    }

    /// Checks that `self` (a genesis profile) is the one this build implements.
    pub fn check_against_build(&self) -> Result<(), ProfileError> {
        let build = Self::build();
        if self == build {
            return Ok(());
        }
        let mut differences = Vec::new();
        let (a, b) = (
            serde_json::to_value(self).unwrap_or_default(),
            serde_json::to_value(build).unwrap_or_default(),
        );
        diff("", &a, &b, &mut differences);
        Err(ProfileError::Mismatch {
            genesis: self.summary(),
            build: build.summary(),
            differences: differences.join("; "),
        })
    }

    /// The fuel budget of a deposits call over `deposits` deposits: the kind's budget plus
    /// [`deposits_budget_per_deposit`](Self::deposits_budget_per_deposit) per deposit; `None`
    /// if that does not fit a `u64` (never for a block within the genesis limit).
    pub fn deposits_budget(&self, deposits: u64) -> Option<u64> {
        self.deposits_budget_per_deposit
            .checked_mul(deposits)?
            .checked_add(self.budget(super::Kind::Deposits))
    }

    /// The fuel budget of a call into a module of `kind` (the kind's table default when the
    /// profile does not name it).
    pub fn budget(&self, kind: super::Kind) -> u64 {
        self.budgets
            .get(kind.package())
            .copied()
            .unwrap_or(kind.spec().fuel_budget)
    }
}

fn diff(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => diff(&p, va, vb, out),
                    (Some(va), None) => out.push(format!("{p}: {va} vs absent")),
                    (None, Some(vb)) => out.push(format!("{p}: absent vs {vb}")),
                    (None, None) => {}
                }
            }
        }
        _ if a != b => out.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

impl FuelTable {
    /// The table in wasmtime's form. Every operator wasmtime knows gets a cost from this table;
    /// an operator name wasmtime does not know is an error.
    pub fn operator_cost(&self) -> Result<wasmtime::OperatorCost, ProfileError> {
        let table = |e: serde_json::Error| ProfileError::Table(e.to_string());
        let mut value = serde_json::to_value(wasmtime::OperatorCost::new()).map_err(table)?;
        let serde_json::Value::Object(fields) = &mut value else {
            return Err(ProfileError::Table(
                "wasmtime's operator table is not a map".into(),
            ));
        };
        for (name, cost) in fields.iter_mut() {
            if name != "variable" {
                *cost = self.default.into();
            }
        }
        for (op, cost) in &self.operators {
            match fields.get_mut(op) {
                Some(slot) if op != "variable" => *slot = (*cost).into(),
                _ => return Err(ProfileError::UnknownOperator(op.clone())),
            }
        }
        let v = self.variable;
        let mut variable =
            serde_json::to_value(wasmtime::VariableOperatorCost::new()).map_err(table)?;
        if let serde_json::Value::Object(var) = &mut variable {
            for (name, cost) in [
                ("memory_copy_per_byte", v.memory_copy_per_byte),
                ("memory_fill_per_byte", v.memory_fill_per_byte),
                ("memory_init_per_byte", v.memory_init_per_byte),
                ("memory_grow_per_page", v.memory_grow_per_page),
                ("table_copy_per_element", v.table_copy_per_element),
                ("table_fill_per_element", v.table_fill_per_element),
                ("table_init_per_element", v.table_init_per_element),
                ("table_grow_per_element", v.table_grow_per_element),
            ] {
                var.insert(name.to_string(), cost.into());
            }
        }
        fields.insert("variable".into(), variable);
        serde_json::from_value(value).map_err(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_profile_makes_a_wasmtime_table_with_wasmtimes_48_defaults() {
        let table = EngineProfile::build().fuel.operator_cost().unwrap();
        // The explicit table reproduces wasmtime 48's defaults, so fuel counts did not move.
        assert_eq!(table, wasmtime::OperatorCost::new());
    }

    #[test]
    fn an_unknown_operator_is_refused_by_name() {
        let mut fuel = EngineProfile::build().fuel.clone();
        fuel.operators.insert("I32Frobnicate".into(), 3);
        assert!(matches!(
            fuel.operator_cost(),
            Err(ProfileError::UnknownOperator(op)) if op == "I32Frobnicate"
        ));
    }

    #[test]
    fn a_different_fuel_table_is_a_mismatch_naming_both_profiles_and_the_field() {
        let mut other = EngineProfile::build().clone();
        assert!(other.check_against_build().is_ok());
        other.fuel.operators.insert("I32Add".into(), 2);
        assert_ne!(other.hash(), EngineProfile::build().hash());
        let err = other.check_against_build().unwrap_err().to_string();
        assert!(err.contains(&other.summary()), "{err}");
        assert!(err.contains(&EngineProfile::build().summary()), "{err}");
        assert!(err.contains("fuel.operators.I32Add: 2 vs absent"), "{err}");
    }

    #[test]
    fn the_profile_round_trips_through_json() {
        let json = EngineProfile::build().canonical_json();
        let back: EngineProfile = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, EngineProfile::build());
    }
}

//! The modules on `/metrics`: which versions each kind has and in what role, what each version
//! has done (calls, its own faults, fuel), how a shadow or canary trial is going, and the
//! circuit breaker; and the build the node runs (`modnode_build_info`).

use std::sync::{LazyLock, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::runtime::call_stats::CallCounts;
use crate::runtime::modules::ReadyInfo;
use crate::runtime::slot::VersionStatus;
use crate::runtime::{Kind, SlotStatus};

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

/// Registers a labelled family of `M` under `name` and returns it for filling.
fn family<M>(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, M>
where
    M: prometheus_client::metrics::TypedMetric
        + prometheus_client::encoding::EncodeMetric
        + Default
        + Clone
        + Send
        + Sync
        + std::fmt::Debug
        + 'static,
{
    let f = Family::<Labels, M>::default();
    registry.register(name, help, f.clone());
    f
}

/// OpenMetrics text of `registry`, without the closing `# EOF` (the node's scrape has one).
fn text(registry: &Registry) -> String {
    let mut out = String::new();
    if encode(&mut out, registry).is_err() {
        return String::new();
    }
    super::without_eof(out)
}

/// The modules' families, registered once under `modnode_module`; a scrape clears and refills
/// them (a version or a role gone since the last scrape leaves no series behind) and encodes.
#[derive(Debug)]
struct ModuleFamilies {
    registry: Registry,
    info: Family<Labels, Gauge>,
    calls: Family<Labels, Counter>,
    faults: Family<Labels, Counter>,
    fuel: Family<Labels, Counter>,
    compared: Family<Labels, Counter>,
    divergences: Family<Labels, Counter>,
    skipped: Family<Labels, Counter>,
    share: Family<Labels, Gauge>,
    trips: Family<Labels, Counter>,
    failed: Family<Labels, Counter>,
}

impl ModuleFamilies {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("modnode_module");
        let info: Family<Labels, Gauge> = family(
            &mut registry,
            "version_info",
            "A module version held for a kind, by role (active, previous, shadow, canary, prepared)",
        );
        let calls: Family<Labels, Counter> = family(
            &mut registry,
            "calls",
            "Calls of a module version since its warm-up",
        );
        let faults: Family<Labels, Counter> = family(
            &mut registry,
            "faults",
            "Calls of a module version that failed by its own fault (trap, out of fuel, limit)",
        );
        let fuel: Family<Labels, Counter> = family(
            &mut registry,
            "fuel",
            "Fuel used by a module version's calls, wasm and host calls together",
        );
        let compared: Family<Labels, Counter> = family(
            &mut registry,
            "shadow_compared",
            "Inputs a shadow candidate ran on beside the active version",
        );
        let divergences: Family<Labels, Counter> = family(
            &mut registry,
            "shadow_divergences",
            "Inputs on which a shadow candidate's output differed from the active version's \
             (its faults included)",
        );
        let skipped: Family<Labels, Counter> = family(
            &mut registry,
            "shadow_skipped",
            "Inputs not compared because the shadow worker was behind",
        );
        let share: Family<Labels, Gauge> = family(
            &mut registry,
            "canary_share_percent",
            "Share of a kind's calls its canary serves, in percent (0: no canary)",
        );
        let trips: Family<Labels, Counter> = family(
            &mut registry,
            "breaker_trips",
            "Automatic rollbacks by a kind's circuit breaker",
        );
        let failed: Family<Labels, Counter> = family(
            &mut registry,
            "failed_calls",
            "Calls of a kind that failed after every fallback",
        );
        ModuleFamilies {
            registry,
            info,
            calls,
            faults,
            fuel,
            compared,
            divergences,
            skipped,
            share,
            trips,
            failed,
        }
    }

    /// Drops every series, before a scrape fills them again.
    fn clear(&self) {
        self.info.clear();
        self.calls.clear();
        self.faults.clear();
        self.fuel.clear();
        self.compared.clear();
        self.divergences.clear();
        self.skipped.clear();
        self.share.clear();
        self.trips.clear();
        self.failed.clear();
    }
}

/// The modules' families, registered on the first scrape.
static MODULE_FAMILIES: LazyLock<Mutex<ModuleFamilies>> =
    LazyLock::new(|| Mutex::new(ModuleFamilies::new()));

/// The modules' series (prefix `modnode_module_`), from every slot's status and every prepared
/// version's counters, as OpenMetrics lines without the closing `# EOF`:
///
/// - `version_info{kind, role, module, version, sha256}` = 1, role `active`, `previous`,
///   `shadow`, `canary`, or `prepared` (stored here and activatable, in no role);
/// - `calls_total`, `faults_total` (the module's own: trap, out of fuel, limit) and
///   `fuel_total` per `{kind, module, version}` since the version's warm-up;
/// - `shadow_compared_total`, `shadow_divergences_total`, `shadow_skipped_total` per shadow;
/// - `canary_share_percent{kind}` (0 without a canary), `breaker_trips_total{kind}` and
///   `failed_calls_total{kind}` (calls that failed after every fallback).
pub fn render_modules(slots: &[SlotStatus], versions: &[(ReadyInfo, CallCounts)]) -> String {
    // One scrape at a time fills and encodes the families, so each encodes its own figures.
    let families = MODULE_FAMILIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    families.clear();
    let ModuleFamilies {
        registry,
        info,
        calls,
        faults,
        fuel,
        compared,
        divergences,
        skipped,
        share,
        trips,
        failed,
    } = &*families;

    let mut roles: Vec<(Kind, &str, &VersionStatus)> = Vec::new();
    for slot in slots {
        let kind = || slot.kind.to_string();
        roles.push((slot.kind, "active", &slot.active));
        if let Some(previous) = &slot.previous {
            roles.push((slot.kind, "previous", previous));
        }
        if let Some(shadow) = &slot.shadow {
            roles.push((slot.kind, "shadow", &shadow.version));
            let l = labels(&[("kind", kind()), ("module", shadow.version.name.clone())]);
            compared.get_or_create(&l).inc_by(shadow.compared);
            divergences.get_or_create(&l).inc_by(shadow.divergences);
            skipped.get_or_create(&l).inc_by(shadow.skipped);
        }
        if let Some(canary) = &slot.canary {
            roles.push((slot.kind, "canary", &canary.version));
        }
        let by_kind = labels(&[("kind", kind())]);
        share
            .get_or_create(&by_kind)
            .set(slot.canary.as_ref().map_or(0, |c| i64::from(c.percent)));
        trips.get_or_create(&by_kind).inc_by(slot.breaker_trips);
        failed.get_or_create(&by_kind).inc_by(slot.failed_calls);
    }
    for (kind, role, v) in &roles {
        info.get_or_create(&labels(&[
            ("kind", kind.to_string()),
            ("role", (*role).to_string()),
            ("module", v.name.clone()),
            ("version", v.version.to_string()),
            ("sha256", v.hash.to_hex()),
        ]))
        .set(1);
    }
    for (p, counts) in versions {
        let hash = hex::encode(p.hash);
        if !roles.iter().any(|(_, _, v)| v.hash == p.hash) {
            info.get_or_create(&labels(&[
                ("kind", p.kind.to_string()),
                ("role", "prepared".to_string()),
                ("module", p.name.clone()),
                ("version", p.version.to_string()),
                ("sha256", hash),
            ]))
            .set(1);
        }
        let l = labels(&[
            ("kind", p.kind.to_string()),
            ("module", p.name.clone()),
            ("version", p.version.to_string()),
        ]);
        calls.get_or_create(&l).inc_by(counts.calls);
        faults.get_or_create(&l).inc_by(counts.faults);
        fuel.get_or_create(&l).inc_by(counts.fuel);
    }
    text(registry)
}

/// `modnode_build_info{version, profile}` = 1: which build answers (for a dashboard's header
/// and for spotting a fleet running mixed builds), without the closing `# EOF`.
pub fn render_build_info() -> String {
    text(&BUILD_INFO)
}

/// `build_info`, registered and set once: the build does not change while the process runs.
static BUILD_INFO: LazyLock<Registry> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("modnode");
    let info: Family<Labels, Gauge> = family(
        &mut registry,
        "build_info",
        "The modnode build this node runs (always 1)",
    );
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    info.get_or_create(&labels(&[
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("profile", profile.to_string()),
    ]))
    .set(1);
    registry
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::slot::{CanaryStatus, ShadowStatus};
    use crate::runtime::{Scope, WarmupReport};

    fn version(name: &str, byte: u8) -> VersionStatus {
        VersionStatus {
            name: name.into(),
            hash: crate::hashes::ModuleHash([byte; 32]),
            version: u32::from(byte),
            warmup: WarmupReport::default(),
            contract: "modnode:gossip-policy@1.0.0".into(),
            state_bytes: 0,
        }
    }

    fn slot(kind: Kind, active: VersionStatus) -> SlotStatus {
        SlotStatus {
            kind,
            scope: Scope::Local,
            active,
            active_faults: None,
            scheduled: None,
            shadow: None,
            canary: None,
            previous: None,
            breaker_threshold: 3,
            breaker_trips: 0,
            failed_calls: 0,
            recent_trips: Vec::new(),
        }
    }

    fn prepared(kind: Kind, name: &str, byte: u8) -> ReadyInfo {
        ReadyInfo {
            kind,
            name: name.into(),
            version: u32::from(byte),
            hash: crate::hashes::ModuleHash([byte; 32]),
            migration: false,
            warmup: WarmupReport::default(),
            new: false,
            contract: "modnode:gossip-policy@1.0.0".into(),
        }
    }

    #[test]
    fn versions_roles_calls_trials_and_breaker_are_series() {
        let mut policy = slot(Kind::GossipPolicy, version("gossip-policy-v2@02", 2));
        policy.shadow = Some(ShadowStatus {
            version: version("gossip-policy-v3@03", 3),
            compared: 40,
            divergences: 7,
            skipped: 1,
            faults: 0,
            recent_divergences: Vec::new(),
        });
        policy.breaker_trips = 2;
        let mut checkpoint = slot(Kind::Checkpoint, version("checkpoint-v1@01", 1));
        checkpoint.canary = Some(CanaryStatus {
            version: version("checkpoint-v2@04", 4),
            percent: 25,
            calls: 3,
            faults: 0,
        });
        let counts = CallCounts {
            calls: 11,
            faults: 1,
            fuel: 1234,
        };
        let text = render_modules(
            &[checkpoint, policy],
            &[
                (
                    prepared(Kind::GossipPolicy, "gossip-policy-v2@02", 2),
                    counts,
                ),
                (
                    prepared(Kind::GossipPolicy, "gossip-policy-v1@05", 5),
                    CallCounts::default(),
                ),
            ],
        );
        for line in [
            "# TYPE modnode_module_calls counter",
            r#"modnode_module_calls_total{kind="gossip-policy",module="gossip-policy-v2@02",version="2"} 11"#,
            r#"modnode_module_faults_total{kind="gossip-policy",module="gossip-policy-v2@02",version="2"} 1"#,
            r#"modnode_module_fuel_total{kind="gossip-policy",module="gossip-policy-v2@02",version="2"} 1234"#,
            r#"modnode_module_shadow_divergences_total{kind="gossip-policy",module="gossip-policy-v3@03"} 7"#,
            r#"modnode_module_shadow_compared_total{kind="gossip-policy",module="gossip-policy-v3@03"} 40"#,
            r#"modnode_module_canary_share_percent{kind="checkpoint"} 25"#,
            r#"modnode_module_canary_share_percent{kind="gossip-policy"} 0"#,
            r#"modnode_module_breaker_trips_total{kind="gossip-policy"} 2"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        let info = |role: &str, module: &str| {
            text.lines().any(|l| {
                l.starts_with("modnode_module_version_info{")
                    && l.contains(&format!(r#"role="{role}""#))
                    && l.contains(&format!(r#"module="{module}""#))
                    && l.ends_with(" 1")
            })
        };
        assert!(info("active", "gossip-policy-v2@02"), "{text}");
        assert!(info("shadow", "gossip-policy-v3@03"), "{text}");
        assert!(info("canary", "checkpoint-v2@04"), "{text}");
        assert!(info("prepared", "gossip-policy-v1@05"), "{text}");
        assert!(!info("prepared", "gossip-policy-v2@02"), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn build_info_names_the_version() {
        let text = render_build_info();
        assert!(
            text.contains(&format!(
                r#"modnode_build_info{{version="{}""#,
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
    }

    /// The families are registered once and refilled at each scrape: a role gone since the
    /// last scrape leaves no series behind, and counters show the current figures, not a sum
    /// over scrapes.
    #[test]
    fn a_second_scrape_shows_only_the_current_roles_and_figures() {
        let mut policy = slot(Kind::GossipPolicy, version("gossip-policy-v2@12", 12));
        policy.shadow = Some(ShadowStatus {
            version: version("gossip-policy-v3@13", 13),
            compared: 40,
            divergences: 7,
            skipped: 1,
            faults: 0,
            recent_divergences: Vec::new(),
        });
        let counts = CallCounts {
            calls: 11,
            faults: 1,
            fuel: 1234,
        };
        let versions = [(
            prepared(Kind::GossipPolicy, "gossip-policy-v2@12", 12),
            counts,
        )];
        let first = render_modules(std::slice::from_ref(&policy), &versions);
        assert!(
            first.contains(r#"module="gossip-policy-v3@13"} 40"#),
            "{first}"
        );
        policy.shadow = None;
        let second = render_modules(&[policy], &versions);
        assert!(!second.contains("gossip-policy-v3@13"), "{second}");
        let calls = r#"modnode_module_calls_total{kind="gossip-policy",module="gossip-policy-v2@12",version="12"} 11"#;
        assert!(second.lines().any(|l| l == calls), "{second}");
    }
}

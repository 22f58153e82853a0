//! What operators see of on-chain governance: the vote tally, readiness attestations, the gate,
//! expiry and drops — as JSON for `GET /modules`, as Prometheus gauges an alert can fire on,
//! and as log lines when the head's schedule changes.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::ScheduledReadiness;
use crate::hashes::ModuleHash;
use crate::state::schedule::{Governance, Schedule, UpgradeOp};

type Labels = Vec<(String, String)>;

fn op_json(op: &UpgradeOp) -> Value {
    json!({
        "kind": op.kind.to_string(),
        "sha256": op.module.to_hex(),
        "height": op.height,
    })
}

fn op_labels(op: &UpgradeOp) -> Labels {
    vec![
        ("kind".into(), op.kind.to_string()),
        ("module".into(), op.module.to_hex()),
        ("height".into(), op.height.to_string()),
    ]
}

/// The governance part of `GET /modules`: pending operations with their votes and expiry,
/// scheduled upgrades with their readiness attestations and gate height, and the latest drops.
pub fn governance_json(schedule: &Schedule, head_height: u64, rules: &Governance) -> Value {
    let needed = rules.majority();
    let pending: Vec<Value> = schedule
        .pending
        .iter()
        .map(|p| {
            let mut v = op_json(&p.op);
            if let Some(map) = v.as_object_mut() {
                map.insert("action".into(), json!(p.action.name()));
                map.insert("votes".into(), json!(p.voters));
                map.insert("votes_needed".into(), json!(needed));
                let by_ttl = p.since.saturating_add(rules.vote_ttl);
                let by_lead = p.op.height.saturating_sub(rules.lead);
                map.insert("expires_at".into(), json!(by_ttl.min(by_lead)));
            }
            v
        })
        .collect();
    let scheduled: Vec<Value> = schedule
        .upcoming(head_height)
        .map(|e| {
            let mut v = op_json(e);
            if let Some(map) = v.as_object_mut() {
                map.insert("attested".into(), json!(schedule.attesters(e)));
                map.insert("attestations_needed".into(), json!(needed));
                map.insert("gate_at".into(), json!(e.height.saturating_sub(rules.lead)));
            }
            v
        })
        .collect();
    let dropped: Vec<Value> = schedule
        .dropped
        .iter()
        .map(|d| {
            let mut v = op_json(&d.op);
            if let Some(map) = v.as_object_mut() {
                map.insert("reason".into(), json!(d.reason));
                map.insert("at".into(), json!(d.at));
                map.insert("attested".into(), json!(d.ready));
            }
            v
        })
        .collect();
    json!({
        "votes_needed": needed,
        "lead_blocks": rules.lead,
        "pending": pending,
        "scheduled": scheduled,
        "dropped": dropped,
    })
}

/// Gauges of every open operation (`modnode_upgrade_*`), for alerts such as "an upgrade is
/// scheduled and this node is not ready within K blocks of H": per pending operation the votes
/// cast (and the votes needed), per scheduled upgrade the blocks until its height and its gate,
/// the on-chain attestations, whether this node has its module ready to attest (`ready_here`),
/// and from `readiness` how many connected peers and authorities report it ready. OpenMetrics text without the closing
/// `# EOF`.
pub fn render_metrics(
    schedule: &Schedule,
    head_height: u64,
    rules: &Governance,
    ready_here: impl Fn(&ModuleHash) -> bool,
    readiness: &[ScheduledReadiness],
) -> String {
    let mut registry = Registry::with_prefix("modnode_upgrade");
    let family = |registry: &mut Registry, name: &str, help: &str| {
        let f = Family::<Labels, Gauge>::default();
        registry.register(name, help, f.clone());
        f
    };
    let needed = family(
        &mut registry,
        "votes_needed",
        "Distinct authorities a vote or readiness attestation needs",
    );
    let votes = family(
        &mut registry,
        "pending_votes",
        "Votes cast for a pending operation",
    );
    let attested = family(
        &mut registry,
        "attested",
        "Authorities that attested a scheduled upgrade ready",
    );
    let until = family(
        &mut registry,
        "blocks_until_activation",
        "Blocks from the head to a scheduled upgrade's height",
    );
    let until_gate = family(
        &mut registry,
        "blocks_until_gate",
        "Blocks from the head to the readiness gate of a scheduled upgrade",
    );
    let here = family(
        &mut registry,
        "ready_here",
        "1 if this node holds the scheduled module compiled and warmed",
    );
    let peers_ready = family(
        &mut registry,
        "peers_ready",
        "Connected peers that report a scheduled upgrade's module ready",
    );
    let authorities_ready = family(
        &mut registry,
        "authorities_ready",
        "Authorities (this node included if it is one) that report a scheduled upgrade's \
         module ready",
    );
    let authorities = family(
        &mut registry,
        "authorities",
        "Authorities of the chain (what authorities_ready counts out of)",
    );
    let dropped = family(
        &mut registry,
        "dropped",
        "A recently dropped upgrade (1), by reason",
    );
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    needed
        .get_or_create(&Vec::new())
        .set(count(rules.majority()));
    authorities
        .get_or_create(&Vec::new())
        .set(count(rules.authorities));
    for p in &schedule.pending {
        let mut labels = op_labels(&p.op);
        labels.push(("action".into(), p.action.name().into()));
        votes.get_or_create(&labels).set(count(p.voters.len()));
    }
    for e in schedule.upcoming(head_height) {
        let labels = op_labels(e);
        attested
            .get_or_create(&labels)
            .set(count(schedule.attesters(e).len()));
        until
            .get_or_create(&labels)
            .set(as_i64(e.height.saturating_sub(head_height)));
        until_gate.get_or_create(&labels).set(as_i64(
            e.height
                .saturating_sub(rules.lead)
                .saturating_sub(head_height),
        ));
        let hash = e.module.to_hex();
        let r = readiness
            .iter()
            .find(|r| r.kind == e.kind && r.sha256 == hash && r.height == e.height);
        here.get_or_create(&labels)
            .set(i64::from(ready_here(&e.module)));
        peers_ready
            .get_or_create(&labels)
            .set(count(r.map_or(0, |r| r.peers_ready)));
        authorities_ready
            .get_or_create(&labels)
            .set(count(r.map_or(0, |r| r.authorities_ready)));
    }
    for d in &schedule.dropped {
        let mut labels = op_labels(&d.op);
        labels.push(("reason".into(), d.reason.name().into()));
        dropped.get_or_create(&labels).set(1);
    }
    let mut out = String::new();
    if encode(&mut out, &registry).is_err() {
        return String::new();
    }
    crate::node::metrics::without_eof(out)
}

/// Logs what changed between the head's schedule before and after a head change: new votes,
/// newly scheduled upgrades, expired votes, cancelled and dropped upgrades.
pub fn log_changes(before: &Schedule, after: &Schedule) {
    for p in &after.pending {
        let old = before
            .pending
            .iter()
            .find(|o| o.action == p.action && o.op == p.op);
        if old.is_none_or(|o| o.voters != p.voters) {
            tracing::info!(
                action = p.action.name(),
                kind = %p.op.kind,
                module = %p.op.module.to_hex(),
                height = p.op.height,
                votes = p.voters.len(),
                "upgrade vote counted"
            );
        }
    }
    for e in after.entries.iter().filter(|e| !before.entries.contains(e)) {
        tracing::info!(kind = %e.kind, module = %e.module.to_hex(), height = e.height,
            "upgrade scheduled by a majority of the authorities");
    }
    for p in before.pending.iter().filter(|p| {
        !after
            .pending
            .iter()
            .any(|a| a.action == p.action && a.op == p.op)
            && !after.entries.contains(&p.op)
            && !after.dropped.iter().any(|d| d.op == p.op)
    }) {
        tracing::info!(
            action = p.action.name(),
            kind = %p.op.kind,
            module = %p.op.module.to_hex(),
            height = p.op.height,
            votes = p.voters.len(),
            "upgrade vote expired without a majority"
        );
    }
    for d in after.dropped.iter().filter(|d| !before.dropped.contains(d)) {
        tracing::warn!(
            kind = %d.op.kind,
            module = %d.op.module.to_hex(),
            height = d.op.height,
            reason = ?d.reason,
            attested = d.ready,
            at = d.at,
            "scheduled upgrade dropped: it will not activate"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Kind;
    use crate::state::schedule::BlockVotes;

    #[test]
    fn the_tally_and_the_gate_are_visible_as_json_and_gauges() {
        let rules = Governance {
            authorities: 3,
            lead: 4,
            max_ahead: 100,
            vote_ttl: 50,
            open_per_authority: 4,
        };
        let op = UpgradeOp {
            kind: Kind::Deposits,
            module: ModuleHash([7; 32]),
            height: 30,
        };
        let one = [op];
        let votes = BlockVotes {
            upgrades: &one,
            cancels: &[],
            ready: &one,
        };
        let s = Schedule::default().with_block(1, 0, votes, &rules).unwrap();
        let view = governance_json(&s, 1, &rules);
        assert_eq!(view["pending"][0]["votes"], json!([0]));
        assert_eq!(view["pending"][0]["votes_needed"], json!(2));
        assert_eq!(view["pending"][0]["expires_at"], json!(26));
        let s = s.with_block(2, 1, votes, &rules).unwrap();
        let view = governance_json(&s, 2, &rules);
        assert_eq!(view["scheduled"][0]["attested"], json!([0, 1]));
        assert_eq!(view["scheduled"][0]["gate_at"], json!(26));
        let module = hex::encode([7u8; 32]);
        let readiness = [ScheduledReadiness {
            kind: Kind::Deposits,
            sha256: module.clone(),
            height: 30,
            ready_here: false,
            peers_ready: 5,
            peers_connected: 6,
            authorities_ready: 2,
            authorities: 3,
        }];
        let text = render_metrics(&s, 2, &rules, |h| *h == ModuleHash([7; 32]), &readiness);
        for line in [
            format!(
                r#"modnode_upgrade_ready_here{{kind="deposits",module="{module}",height="30"}} 1"#
            ),
            format!(
                r#"modnode_upgrade_peers_ready{{kind="deposits",module="{module}",height="30"}} 5"#
            ),
            format!(
                r#"modnode_upgrade_authorities_ready{{kind="deposits",module="{module}",height="30"}} 2"#
            ),
            format!(
                r#"modnode_upgrade_blocks_until_activation{{kind="deposits",module="{module}",height="30"}} 28"#
            ),
            "modnode_upgrade_authorities{} 3".to_string(),
            "modnode_upgrade_votes_needed{} 2".to_string(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        // Without a readiness report no peer or authority is known to have it.
        let text = render_metrics(&s, 2, &rules, |_| false, &[]);
        for line in [
            format!(
                r#"modnode_upgrade_ready_here{{kind="deposits",module="{module}",height="30"}} 0"#
            ),
            format!(
                r#"modnode_upgrade_peers_ready{{kind="deposits",module="{module}",height="30"}} 0"#
            ),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        assert!(
            text.contains(&format!(
                "modnode_upgrade_attested{{kind=\"deposits\",module=\"{module}\",height=\"30\"}} 2"
            )),
            "{text}"
        );
        assert!(
            text.contains("modnode_upgrade_blocks_until_gate{"),
            "{text}"
        );
        assert!(text.contains("} 24"), "{text}");
        assert!(!text.contains("# EOF"));
    }
}

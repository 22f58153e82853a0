//! The checks one sample is put through: blocks agree, deposits land, bans are earned, memory
//! stays bounded, and nodes converge after a heal.

use super::*;

impl Checker {
    pub(super) fn check_blocks(&mut self, s: &Sample, found: &mut Vec<Violation>) {
        for block in &s.blocks {
            self.hashes_at
                .entry(block.height)
                .or_default()
                .insert(block.hash.clone());
            match self.roots.get(&block.hash) {
                Some((first_node, first_root)) if *first_root != block.state_root => {
                    found.push(Violation::StateRootMismatch {
                        height: block.height,
                        hash: block.hash.clone(),
                        first_node: self.name(*first_node),
                        first_root: first_root.clone(),
                        node: self.name(s.node),
                        root: block.state_root.clone(),
                    });
                }
                Some(_) => {}
                None => {
                    self.roots
                        .insert(block.hash.clone(), (s.node, block.state_root.clone()));
                }
            }
            if block.height > s.finalized {
                continue;
            }
            match self.finalized.get(&block.height) {
                Some(first) if first.hash != block.hash => {
                    found.push(Violation::FinalizedConflict {
                        height: block.height,
                        first_node: self.name(first.node),
                        first_hash: first.hash.clone(),
                        node: self.name(s.node),
                        hash: block.hash.clone(),
                    });
                }
                Some(_) => {}
                None => {
                    self.finalized.insert(
                        block.height,
                        Finalized {
                            node: s.node,
                            hash: block.hash.clone(),
                        },
                    );
                }
            }
        }
    }

    pub(super) fn check_deposits(&mut self, s: &Sample, found: &mut Vec<Violation>) {
        if self.genesis_balance.is_none() && s.deposit_count == 0 {
            self.genesis_balance = Some(s.balance_sum_gwei);
        }
        let Some(genesis) = self.genesis_balance else {
            return;
        };
        // A count beyond what the runner has recorded yet cannot be priced; `finish` checks it.
        let Some(applied) = usize::try_from(s.deposit_count)
            .ok()
            .and_then(|count| self.deposit_prefix.get(count))
        else {
            return;
        };
        let expected = genesis.saturating_add(*applied);
        if s.balance_sum_gwei > expected {
            found.push(Violation::DepositDoubled {
                node: self.name(s.node),
                count: s.deposit_count,
                balance_sum_gwei: s.balance_sum_gwei,
                expected_gwei: expected,
            });
        }
    }

    pub(super) fn check_bans(&mut self, s: &Sample, found: &mut Vec<Violation>) {
        for banned in &s.banned {
            if !self.bans_seen.insert((s.node, banned.clone())) {
                continue;
            }
            let Some(target) = self.node_ids.iter().position(|id| id == banned) else {
                continue;
            };
            if self.is_honest(s.node) && self.is_honest(target) {
                found.push(Violation::HonestBan {
                    node: self.name(s.node),
                    banned: self.name(target),
                });
            }
        }
    }

    pub(super) fn check_rss(&mut self, s: &Sample, found: &mut Vec<Violation>) {
        let Some(rss) = s.rss_bytes else {
            return;
        };
        let limit = self.rss_limit;
        let name = self.name(s.node);
        let Some(state) = self.nodes.get_mut(s.node) else {
            return;
        };
        state.max_rss = Some(state.max_rss.map_or(rss, |m| m.max(rss)));
        if rss > limit && !state.rss_flagged {
            state.rss_flagged = true;
            found.push(Violation::RssOverLimit {
                node: name,
                rss_bytes: rss,
                limit_bytes: limit,
            });
        }
    }

    /// After a heal: converged once every live node's latest sample was taken after the heal
    /// and they all report the same block at the lowest of their heads, with no head more than
    /// one block above it (a node that has just imported the next block is on the same chain;
    /// requiring equal heads would depend on when each node was polled).
    pub(super) fn check_convergence(&mut self, now_ms: u64, found: &mut Vec<Violation>) {
        let Some(mut heal) = self.heal else {
            return;
        };
        let heal_ms = heal.at_ms;
        let live: Vec<&Sample> = self
            .nodes
            .iter()
            .filter(|n| !n.down)
            .filter_map(|n| n.latest.as_ref())
            .collect();
        let all_reported = live.len() == self.nodes.iter().filter(|n| !n.down).count();
        let all_after_heal =
            all_reported && !live.is_empty() && live.iter().all(|s| s.at_ms >= heal_ms);
        if heal.caught_up_ms.is_none()
            && all_after_heal
            && live.iter().all(|s| s.head >= heal.target)
        {
            heal.caught_up_ms = Some(now_ms);
            self.heal = Some(heal);
        }
        if all_after_heal && same_chain(&live) {
            let total_ms = now_ms.saturating_sub(heal_ms);
            // Agreeing implies every node has the common block, so a heal not yet caught up
            // catches up now.
            let caught_up = heal.caught_up_ms.unwrap_or(now_ms);
            self.convergence_ms.push(total_ms);
            self.convergences.push(Convergence {
                total_ms,
                sync_ms: caught_up.saturating_sub(heal_ms),
                settle_ms: now_ms.saturating_sub(caught_up),
                blocks_missed: heal.target.saturating_sub(heal.lowest),
                after: heal.after,
            });
            self.heal = None;
            return;
        }
        if let Some(bound) = self.convergence_bound_ms
            && !self.heal_flagged
            && now_ms.saturating_sub(heal_ms) > bound
        {
            self.heal_flagged = true;
            found.push(self.not_converged(heal_ms, now_ms));
        }
    }

    pub(super) fn not_converged(&self, heal_ms: u64, now_ms: u64) -> Violation {
        let heads = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.down)
            .filter_map(|(i, n)| n.latest.as_ref().map(|s| format!("{i}={}", s.head)))
            .collect::<Vec<_>>()
            .join(" ");
        Violation::NotConverged {
            heal_ms,
            waited_ms: now_ms.saturating_sub(heal_ms),
            heads,
        }
    }

    pub(super) fn latest_at_ms(&self) -> u64 {
        self.nodes
            .iter()
            .filter_map(|n| n.latest.as_ref().map(|s| s.at_ms))
            .max()
            .unwrap_or(0)
    }
}

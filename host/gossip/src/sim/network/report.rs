//! What a finished run reports: per-message coverage times, redundancy, misses and traffic.

use super::*;

impl<N: SimNode, M: FnMut(NodeSetup) -> N> Net<N, M> {
    pub(super) fn report(&self, end_time: Time) -> SimReport {
        let mut all = Vec::new();
        let mut high = Vec::new();
        let mut other = Vec::new();
        let (mut missed, mut block_pairs) = (0, 0u64);
        for (m, p) in self.published.iter().enumerate() {
            for (v, slot) in self.delivered[m].iter().enumerate() {
                if v == p.origin || !self.expected[m][v] {
                    continue;
                }
                match slot {
                    Some(t) => {
                        let lat = t.saturating_sub(p.at);
                        all.push(lat);
                        if p.kind == MessageKind::Block {
                            block_pairs += 1;
                        }
                        if p.kind.default_priority() != Priority::High {
                            other.push(lat);
                        } else if !self.slots[v].throttled {
                            high.push(lat);
                        }
                    }
                    None => missed += 1,
                }
            }
        }
        all.sort_unstable();
        high.sort_unstable();
        other.sort_unstable();
        let rmr = |copies: u64, pairs: u64| {
            if pairs == 0 {
                0.0
            } else {
                copies as f64 / pairs as f64 - 1.0
            }
        };
        let n = self.slots.len().max(1);
        let mut engine = self.retired.clone();
        for node in self.slots.iter().filter_map(|s| s.node.as_ref()) {
            super::super::add_stats(&mut engine, &node.engine_stats());
        }
        SimReport {
            messages: self.published.len(),
            pairs: all.len() + missed,
            t50: percentile(&all, 50),
            t90: percentile(&all, 90),
            t99: percentile(&all, 99),
            missed,
            rmr: rmr(self.block_copies, block_pairs),
            payload_rmr: rmr(self.payload_copies, all.len() as u64),
            bytes_per_node: self.rx_bytes / n as u64,
            control_per_node: self.control as f64 / n as f64,
            leaves: self.leaves,
            cuts: self.cuts,
            hp_p99: percentile(&high, 99),
            hp_p50: percentile(&high, 50),
            other_p99: percentile(&other, 99),
            end_time,
            events: self.events,
            engine,
        }
    }
}

//! One event of the simulation handled: a frame delivered, a timer fired, a message published,
//! a node joining or leaving, a link cut or restored.

use super::*;

impl<N: SimNode, M: FnMut(NodeSetup) -> N> Net<N, M> {
    pub(super) fn handle(&mut self, now: Time, ev: Ev<N::Frame>) -> Result<(), GossipError> {
        match ev {
            Ev::Publish { msg } => {
                // A message whose origin is away is published by the next node that is up.
                let n = self.slots.len();
                let first = self.published[msg].origin;
                let Some(origin) = (0..n).map(|i| (first + i) % n).find(|&v| self.up(v)) else {
                    return Ok(());
                };
                for v in 0..n {
                    self.expected[msg][v] = self.up(v);
                }
                let p = &mut self.published[msg];
                p.origin = origin;
                p.at = now;
                let kind = p.kind;
                let payload = p.payload.clone().into();
                self.delivered[msg][origin] = Some(now);
                if let Some(node) = self.slots[origin].node.as_mut() {
                    node.publish(kind, payload, now)?;
                }
                self.pump(origin, now);
            }
            Ev::Arrive {
                to,
                to_life,
                from,
                from_life,
                send_id,
                frame,
                bytes,
                link,
            } => {
                if self.slots[to].life == to_life && self.up(to) {
                    self.slots[to].link.push_back(Incoming {
                        from,
                        from_life,
                        send_id,
                        frame,
                        bytes,
                        link,
                    });
                    self.start_link(to, now);
                }
            }
            Ev::LinkDone { node: v, life } => {
                if self.slots[v].life != life {
                    return Ok(());
                }
                self.slots[v].link_busy = false;
                if let Some(inc) = self.slots[v].link.pop_front() {
                    // A frame from a sender that left since, or over a link cut since, is from a
                    // closed connection.
                    if self.slots[inc.from].life == inc.from_life
                        && self.up(inc.from)
                        && self.link_up(v, inc.from)
                        && self.link_gen(v, inc.from) == inc.link
                    {
                        let cost = N::frame_cost(&inc.frame);
                        self.rx_bytes += inc.bytes as u64;
                        self.payload_copies += cost.payloads;
                        self.block_copies += cost.block_payloads;
                        self.control += cost.control;
                        if let Some(node) = self.slots[v].node.as_mut() {
                            node.handle_frame(peer_handle(inc.from), inc.frame, now)?;
                        }
                        self.record_deliveries(v, now, Some(inc.from));
                        let ack_at = now + self.latency(v, inc.from);
                        self.schedule(
                            ack_at,
                            Ev::Ack {
                                node: inc.from,
                                life: inc.from_life,
                                peer: v,
                                send_id: inc.send_id,
                            },
                        );
                        self.pump(v, now);
                    }
                }
                self.start_link(v, now);
            }
            Ev::UplinkDone { node: v, life } => {
                if self.slots[v].life == life {
                    self.slots[v].uplink_busy = false;
                    self.pump(v, now);
                }
            }
            Ev::Ack {
                node: v,
                life,
                peer,
                send_id,
            } => {
                if self.slots[v].life == life
                    && let Some(node) = self.slots[v].node.as_mut()
                {
                    node.handle_send_complete(peer_handle(peer), send_id, now);
                    self.pump(v, now);
                }
            }
            Ev::Timer {
                node: v,
                generation,
            } => {
                if self.slots[v].timer_generation == generation && self.up(v) {
                    self.slots[v].timer_at = None;
                    if let Some(node) = self.slots[v].node.as_mut() {
                        node.handle_timeout(now);
                    }
                    self.pump(v, now);
                }
            }
            Ev::Leave { node } => self.leave(node, now)?,
            Ev::Join { node } => {
                if !self.up(node) {
                    self.join(node, now)?;
                }
            }
            Ev::Cut => self.cut(now)?,
            Ev::Restore { a, b } => self.restore(a, b, now)?,
        }
        Ok(())
    }
}

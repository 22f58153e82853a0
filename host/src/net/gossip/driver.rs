//! The gossip driver: one task that runs the sans-IO engine, opens and reads the streams its
//! decisions need, and answers the handle's commands.

use super::*;

/// The driver task's state: the engine, the peers' connections and where its output goes.
pub(super) struct Driver<P> {
    pub(super) engine: GossipEngine<Reporting<P>>,
    pub(super) config: GossipConfig,
    pub(super) start: Instant,
    pub(super) peers: HashMap<PeerId, (NodeId, quinn::Connection)>,
    pub(super) next_peer: PeerId,
    pub(super) io: mpsc::Sender<Command>,
    pub(super) events: mpsc::Sender<GossipEvent>,
    pub(super) traffic: Arc<Mutex<TrafficStats>>,
    /// When the throttled receiver may consume its next bytes.
    pub(super) throttle: Arc<Mutex<Instant>>,
}

fn quic_priority(priority: Priority) -> i32 {
    match priority {
        Priority::High => 2,
        Priority::Normal => 1,
        Priority::Low => 0,
    }
}

impl<P: Policy> Driver<P> {
    fn now(&self) -> Time {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Runs until every handle is dropped.
    pub(super) async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        mut io_rx: mpsc::Receiver<Command>,
    ) {
        loop {
            self.flush();
            // A deadline past what `Instant` can represent is no deadline.
            let deadline = self
                .engine
                .poll_timeout()
                .and_then(|t| self.start.checked_add(Duration::from_micros(t)));
            let command = tokio::select! {
                c = rx.recv() => match c {
                    Some(c) => c,
                    None => return,
                },
                Some(c) = io_rx.recv() => c,
                // Without a deadline the branch is disabled and its sleep never polled.
                _ = tokio::time::sleep_until(deadline.unwrap_or(self.start)), if deadline.is_some() => {
                    let now = self.now();
                    self.engine.handle_timeout(now);
                    continue;
                }
            };
            self.handle(command);
            self.tick();
        }
    }

    /// Reports the clock to the policy, at most every [`POLICY_TICK`] (the engine's
    /// `policy_tick`).
    fn tick(&mut self) {
        let now = self.now();
        self.engine.handle_tick(now);
    }

    fn handle(&mut self, command: Command) {
        let now = self.now();
        match command {
            Command::AddPeer { node, conn } => {
                let peer = self.next_peer;
                self.next_peer = self.next_peer.wrapping_add(1);
                if self.engine.add_peer(peer).is_ok() {
                    self.spawn_reader(peer, conn.clone());
                    self.peers.insert(peer, (node, conn));
                }
            }
            Command::Publish {
                kind,
                payload,
                reply,
            } => {
                let _ = reply.send(
                    self.engine
                        .publish(kind, payload, now)
                        .map_err(|e| e.to_string()),
                );
            }
            Command::Incoming { peer, frame } => {
                if let Err(e) = self.engine.handle_frame(peer, frame, now) {
                    self.violation(peer, e.to_string());
                }
            }
            Command::SendDone {
                peer,
                send_id,
                ok,
                rtt_us,
            } => {
                self.engine.handle_rtt_sample(peer, rtt_us);
                if ok {
                    self.engine.handle_send_complete(peer, send_id, now);
                } else {
                    self.engine.handle_send_failed(peer, send_id, now);
                }
            }
            Command::Violation { peer, reason } => self.violation(peer, reason),
            Command::Closed { peer } => {
                if self.peers.remove(&peer).is_some() {
                    let _ = self.engine.remove_peer(peer, now);
                }
            }
            Command::Validated { id, valid } => {
                self.engine.handle_validated(id, valid, now);
            }
            Command::Stats { reply } => {
                let traffic = self.traffic.lock().map(|t| *t).unwrap_or_default();
                let _ = reply.send((self.engine.stats().clone(), traffic));
            }
        }
    }

    fn violation(&mut self, peer: PeerId, reason: String) {
        if let Some((node, conn)) = self.peers.remove(&peer) {
            tracing::warn!(peer = %node, %reason, "gossip protocol violation; disconnecting");
            conn.close(
                quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION),
                b"gossip protocol violation",
            );
            let _ = self.engine.remove_peer(peer, self.now());
            if self
                .events
                .try_send(GossipEvent::Violation { peer: node, reason })
                .is_err()
            {
                bump_traffic(&self.traffic, |t| &mut t.events_dropped);
            }
        }
    }

    /// Hands every pending transmit to its own send task and every event to the application.
    fn flush(&mut self) {
        let now = self.now();
        while let Some(transmit) = self.engine.poll_transmit(now) {
            let Some((_, conn)) = self.peers.get(&transmit.peer) else {
                self.engine
                    .handle_send_failed(transmit.peer, transmit.send_id, now);
                continue;
            };
            let Ok(bytes) = transmit.encode() else {
                self.engine
                    .handle_send_failed(transmit.peer, transmit.send_id, now);
                continue;
            };
            let conn = conn.clone();
            let io = self.io.clone();
            let max = self.config.max_message_bytes;
            tokio::spawn(tracing::Instrument::in_current_span(async move {
                let ok = send(&conn, quic_priority(transmit.priority), &bytes, max)
                    .await
                    .is_ok();
                let rtt_us = u32::try_from(conn.rtt().as_micros()).unwrap_or(u32::MAX);
                let _ = io
                    .send(Command::SendDone {
                        peer: transmit.peer,
                        send_id: transmit.send_id,
                        ok,
                        rtt_us,
                    })
                    .await;
            }));
        }
        while let Some(event) = self.engine.poll_event() {
            if let Event::Delivered {
                id,
                kind,
                payload,
                from,
            } = event
            {
                let from = self.peers.get(&from).map(|(node, _)| *node);
                let delivered = from.is_some_and(|from| {
                    self.events
                        .try_send(GossipEvent::Delivered {
                            id,
                            kind,
                            payload,
                            from,
                        })
                        .is_ok()
                });
                if !delivered {
                    // Nobody will judge it: never relay it.
                    self.engine.handle_validated(id, false, now);
                    bump_traffic(&self.traffic, |t| &mut t.events_dropped);
                }
            }
        }
    }

    fn spawn_reader(&self, peer: PeerId, conn: quinn::Connection) {
        let io = self.io.clone();
        let max = self.config.max_message_bytes;
        let deadline = self.config.stream_read_timeout;
        let budget = Arc::new(ReadBudget {
            held: AtomicUsize::new(0),
            limit: self.config.peer_read_budget,
        });
        let traffic = self.traffic.clone();
        let throttle = self.config.receive_rate_bps.map(|bps| {
            let bps = NonZeroU64::new(bps).unwrap_or(NonZeroU64::MIN);
            (bps, self.throttle.clone())
        });
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            loop {
                let mut stream = match conn.accept_uni().await {
                    Ok(stream) => stream,
                    Err(_) => {
                        let _ = io.send(Command::Closed { peer }).await;
                        return;
                    }
                };
                let io = io.clone();
                let traffic = traffic.clone();
                let throttle = throttle.clone();
                let budget = budget.clone();
                tokio::spawn(tracing::Instrument::in_current_span(async move {
                    let read = read_within_budget(&mut stream, max, &budget, &traffic);
                    let outcome = match tokio::time::timeout(deadline, read).await {
                        Ok(Ok(None)) => Ok(None),
                        Ok(Ok(Some(frame))) => decode(frame, &traffic, throttle).await,
                        Ok(Err(StreamError::Violation(reason))) => Err(reason),
                        Ok(Err(StreamError::OverBudget { held, limit })) => {
                            let _ = stream.stop(quinn::VarInt::from_u32(STREAM_OVER_BUDGET));
                            bump_traffic(&traffic, |t| &mut t.streams_over_budget);
                            Err(format!(
                                "unfinished gossip streams would hold {held} bytes, over the \
                                 budget of {limit}"
                            ))
                        }
                        Err(_) => {
                            let _ = stream.stop(quinn::VarInt::from_u32(STREAM_DEADLINE));
                            bump_traffic(&traffic, |t| &mut t.streams_timed_out);
                            Err(format!(
                                "gossip stream not finished within {} ms",
                                deadline.as_millis()
                            ))
                        }
                    };
                    let command = match outcome {
                        Ok(Some(frame)) => Command::Incoming { peer, frame },
                        Ok(None) => return,
                        Err(reason) => Command::Violation { peer, reason },
                    };
                    let _ = io.send(command).await;
                }));
            }
        }));
    }
}

async fn send(
    conn: &quinn::Connection,
    priority: i32,
    bytes: &[u8],
    max: usize,
) -> Result<(), String> {
    let mut stream = conn.open_uni().await.map_err(|e| e.to_string())?;
    stream.set_priority(priority).map_err(|e| e.to_string())?;
    codec::write_frame(&mut stream, GOSSIP_MESSAGE, bytes, max)
        .await
        .map_err(|e| e.to_string())?;
    stream.finish().map_err(|e| e.to_string())?;
    // Resolves once the peer has acknowledged every byte (or stopped the stream).
    match stream.stopped().await {
        Ok(None) => Ok(()),
        Ok(Some(code)) => Err(format!("peer stopped the stream with code {code}")),
        Err(e) => Err(e.to_string()),
    }
}

fn bump_traffic(traffic: &Mutex<TrafficStats>, field: impl FnOnce(&mut TrafficStats) -> &mut u64) {
    if let Ok(mut t) = traffic.lock() {
        let counter = field(&mut t);
        *counter = counter.saturating_add(1);
    }
}

/// Reads one codec frame from `stream`, charging every buffered byte to the peer's `budget`
/// until the frame is complete. `Ok(None)`: the stream ended before a frame started, or the
/// connection went away (not the peer's fault as far as we know).
async fn read_within_budget(
    stream: &mut quinn::RecvStream,
    max: usize,
    budget: &ReadBudget,
    traffic: &Mutex<TrafficStats>,
) -> Result<Option<codec::Frame>, StreamError> {
    let mut decoder = codec::FrameDecoder::new(max);
    let mut charge = Charge { budget, bytes: 0 };
    loop {
        match decoder.next_frame() {
            Ok(Some(frame)) => return Ok(Some(frame)),
            Ok(None) => {}
            Err(e) => return Err(StreamError::Violation(e.to_string())),
        }
        let chunk = match stream.read_chunk(READ_CHUNK_BYTES, true).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                return match decoder.finish() {
                    Ok(()) => Ok(None),
                    Err(e) => Err(StreamError::Violation(e.to_string())),
                };
            }
            Err(_) => return Ok(None),
        };
        let bytes = chunk.bytes.len();
        let Some(held) = budget.try_charge(bytes) else {
            return Err(StreamError::OverBudget {
                held: budget.held.load(Ordering::Acquire).saturating_add(bytes),
                limit: budget.limit,
            });
        };
        charge.bytes = charge.bytes.saturating_add(bytes);
        if let Ok(mut t) = traffic.lock() {
            t.peak_held_bytes = t
                .peak_held_bytes
                .max(u64::try_from(held).unwrap_or(u64::MAX));
        }
        decoder.push(&chunk.bytes);
    }
}

/// Checks and decodes a gossip frame read from a stream; `Err` is a protocol violation.
async fn decode(
    frame: codec::Frame,
    traffic: &Mutex<TrafficStats>,
    throttle: Option<(NonZeroU64, Arc<Mutex<Instant>>)>,
) -> Result<Option<Frame>, String> {
    if frame.msg_type != GOSSIP_MESSAGE {
        return Err(format!(
            "unexpected message type {} on a gossip stream",
            frame.msg_type
        ));
    }
    let len = u64::try_from(frame.payload.len()).unwrap_or(u64::MAX);
    if let Some((bps, next_free)) = throttle {
        let delay = Duration::from_micros(len.saturating_mul(8_000_000) / bps);
        let wake = {
            let mut next = next_free.lock().unwrap_or_else(|e| e.into_inner());
            let from = (*next).max(Instant::now());
            // Overflowing `Instant` takes a delay of centuries: then stop throttling.
            *next = from.checked_add(delay).unwrap_or(from);
            *next
        };
        tokio::time::sleep_until(wake).await;
    }
    let decoded = Frame::decode(&frame.payload).map_err(|e| e.to_string())?;
    if let Ok(mut t) = traffic.lock() {
        t.bytes_received = t.bytes_received.saturating_add(len);
        t.block_copies = t.block_copies.saturating_add(decoded.block_pushes());
    }
    Ok(Some(decoded))
}

//! Fetching a checkpoint's chunks from the peers that offered it: one request per peer at a
//! time, answers handed to the restore pipeline, every fault blamed on the peer that caused it.

use super::*;

impl Driver<'_> {
    /// Fetches every missing chunk from `holders` in parallel, verifying and writing them in
    /// a [`Pipeline`] as they arrive (off this task, on `threads` verifiers and one batching
    /// writer); a chunk counts once the pipeline reports it durable. The fetcher's
    /// `max_unverified` (sized from a byte budget for this manifest's chunks) is the pipeline's
    /// capacity: while verification or the disk lags, no new request goes out.
    pub(super) async fn fetch_chunks(
        &self,
        restorer: &mut Restorer,
        opener: &Arc<CheckpointModule>,
        peers: &[Peer],
        holders: Vec<NodeId>,
    ) -> Result<(), Stop> {
        let mut fetcher = Fetcher::new(
            restorer.missing(),
            holders,
            FetchConfig::for_manifest(restorer.manifest()),
        );
        let result = self.fetch_with(&mut fetcher, restorer, opener, peers).await;
        let stats = fetcher.stats();
        let counters = self.counters();
        counters
            .requests_timed_out
            .fetch_add(stats.timed_out, Ordering::Relaxed);
        counters
            .chunks_taken_over
            .fetch_add(stats.taken_over, Ordering::Relaxed);
        result
    }

    /// [`fetch_chunks`](Self::fetch_chunks) with `fetcher`.
    async fn fetch_with(
        &self,
        fetcher: &mut Fetcher<NodeId>,
        restorer: &mut Restorer,
        opener: &Arc<CheckpointModule>,
        peers: &[Peer],
    ) -> Result<(), Stop> {
        let id = restorer.id();
        let max = self.parts.transport.max_message_bytes;
        let pipeline_config =
            PipelineConfig::new(self.parts.threads, fetcher.config().max_unverified);
        let opener: Arc<dyn ChunkOpener> = opener.clone();
        let mut pipeline = Pipeline::start(
            restorer.verifier(),
            opener,
            self.progress.clone(),
            pipeline_config,
        )
        .map_err(|e| self.storage(e.to_string()))?;
        let mut in_flight = JoinSet::new();
        let mut progress = super::super::checkpoint_progress::Reporter::new(
            restorer.progress(),
            self.parts.progress,
        );
        let started = Instant::now();
        // Set when no peer is left (or the fetcher finds the checkpoint bad): the answers in
        // flight and the chunks in the pipeline are still taken (and stored) first.
        let mut stop: Option<Stop> = None;
        while !restorer.is_complete() {
            while stop.is_none() {
                match fetcher.poll_request(Instant::now()) {
                    Ok(Some(ChunkRequest {
                        peer,
                        index,
                        deadline,
                    })) => {
                        let Some(conn) =
                            peers.iter().find(|p| p.key == peer).map(|p| p.conn.clone())
                        else {
                            fetcher.handle_unavailable(&peer);
                            continue;
                        };
                        let ask = Request::Chunk {
                            id,
                            index: u32::try_from(index).unwrap_or(u32::MAX),
                        };
                        // The fetcher's deadline and no other: what it counts in flight is
                        // exactly what is waited for here.
                        in_flight.spawn(tracing::Instrument::in_current_span(async move {
                            (peer, index, request_until(&conn, ask, max, deadline).await)
                        }));
                    }
                    Ok(None) => break,
                    Err(e @ FetchError::NoPeers { .. }) => stop = Some(Stop::Retry(e.to_string())),
                    Err(e @ FetchError::BadCheckpoint { .. }) => {
                        stop = Some(Stop::Offerers(format!(
                            "checkpoint {}: {e}",
                            hex::encode(id)
                        )))
                    }
                }
            }
            // A request the fetcher counts in flight is always waited for here (its one
            // deadline is the fetcher's), and a chunk in the pipeline always comes out, so the
            // attempt stops only when none of them is left.
            if in_flight.is_empty()
                && pipeline.held() == 0
                && (stop.is_some() || fetcher.in_flight() == 0)
            {
                return Err(
                    stop.unwrap_or_else(|| Stop::Retry("no chunk request could be made".into()))
                );
            }
            let deadline = fetcher.next_deadline();
            let holding = pipeline.held() > 0;
            tokio::select! {
                joined = in_flight.join_next(), if !in_flight.is_empty() => {
                    if let Some(Ok((peer, index, answer))) = joined {
                        self.on_answer(restorer, fetcher, &mut pipeline, peers, (peer, index), answer)?;
                    }
                }
                outcome = pipeline.next(), if holding => {
                    let Some(outcome) = outcome else {
                        return Err(self.storage("the restore pipeline stopped".into()));
                    };
                    self.on_outcome(restorer, fetcher, peers, outcome)?;
                    let elapsed = started.elapsed().as_secs_f64();
                    let counters = self.counters();
                    if elapsed > 0.0 {
                        let rate = counters.bytes_fetched.load(Ordering::Relaxed) as f64 / elapsed;
                        counters
                            .bytes_per_second
                            .store(rate as u64, Ordering::Relaxed);
                    }
                    progress.update(restorer.progress(), counters);
                }
                () = sleep_until(deadline) => {
                    let expired = fetcher.handle_timeouts(Instant::now());
                    if !expired.is_empty() {
                        tracing::debug!(expired = expired.len(), "chunk requests timed out; reassigned");
                    }
                }
            }
        }
        progress.finish();
        in_flight.abort_all();
        Ok(())
    }

    /// Handles one chunk answer: a chunk's bytes go to the pipeline.
    fn on_answer(
        &self,
        restorer: &Restorer,
        fetcher: &mut Fetcher<NodeId>,
        pipeline: &mut Pipeline<NodeId>,
        peers: &[Peer],
        (peer, index): (NodeId, usize),
        answer: Result<Response, RequestError>,
    ) -> Result<(), Stop> {
        let counters = self.counters();
        let bytes = match answer {
            Ok(Response::Chunk(Some(bytes))) => bytes,
            Ok(_) => {
                tracing::info!(peer = %short(&peer), index, "peer no longer has the checkpoint's chunk");
                fetcher.handle_unavailable(&peer);
                return Ok(());
            }
            Err(e @ RequestError::Malformed(_)) => {
                let reason = format!("chunk answer: {e}");
                self.penalise(peers, peer, &reason);
                return fetcher
                    .handle_refused(&peer, index, Fault::ChunkPeer, reason)
                    .map_err(|e| Stop::Bad(e.to_string()));
            }
            Err(RequestError::Timeout(_)) => {
                // The fetcher's own deadline for this request passed: reassigned.
                fetcher.handle_expired(&peer, index);
                return Ok(());
            }
            Err(e) => {
                tracing::info!(peer = %short(&peer), error = %e, "chunk request failed");
                fetcher.handle_unavailable(&peer);
                return Ok(());
            }
        };
        counters
            .bytes_fetched
            .fetch_add(as_u64(bytes.len()), Ordering::Relaxed);
        if restorer.has(index) {
            // A late answer to a request that timed out and went to another peer.
            bump(&counters.chunks_duplicate);
            fetcher.handle_verified(&peer, index, Instant::now());
            return Ok(());
        }
        if pipeline.holds(index) || fetcher.is_verifying(index) {
            // Another peer's answer for it is being verified; this one is not needed.
            bump(&counters.chunks_duplicate);
            return Ok(());
        }
        bump(&counters.chunks_fetched);
        fetcher.handle_received(&peer, index, Instant::now());
        match pipeline.submit(index, bytes, peer) {
            Ok(()) => Ok(()),
            Err(e @ SubmitError::Stopped) => Err(self.storage(e.to_string())),
            Err(e) => {
                // Never with the fetcher bounded by the pipeline's capacity; asked again.
                tracing::warn!(index, error = %e, "chunk not taken by the restore pipeline");
                fetcher
                    .handle_refused(&peer, index, Fault::Ours, e.to_string())
                    .map_err(|e| Stop::Bad(e.to_string()))
            }
        }
    }

    /// Handles what the pipeline made of a chunk: a durable one is inserted, a refused one
    /// blamed on whoever the error names and fetched again (or the checkpoint dropped).
    fn on_outcome(
        &self,
        restorer: &mut Restorer,
        fetcher: &mut Fetcher<NodeId>,
        peers: &[Peer],
        outcome: Outcome<NodeId>,
    ) -> Result<(), Stop> {
        let counters = self.counters();
        match outcome {
            Outcome::Stored { chunk, from } => {
                let index = chunk.index;
                if let Err(e) = restorer.insert(chunk) {
                    tracing::warn!(error = %e, "verified chunk not inserted");
                }
                fetcher.handle_verified(&from, index, Instant::now());
                bump(&counters.chunks_verified);
                Ok(())
            }
            Outcome::NotStored { reason, .. } => Err(self.storage(reason)),
            Outcome::Refused { index, from, error } => {
                bump(&counters.chunks_refused);
                let fault = error.fault();
                let reason = error.to_string();
                if fault == Fault::ChunkPeer {
                    self.penalise(peers, from, &reason);
                }
                fetcher
                    .handle_refused(&from, index, fault, reason)
                    .map_err(|e| {
                        Stop::Offerers(format!("checkpoint {}: {e}", hex::encode(restorer.id())))
                    })
            }
        }
    }
}

//! The chain worker's queue: bounded, with priorities and per-peer limits.
//!
//! The worker does three kinds of work: producing our block (its slot will not wait), importing
//! blocks (gossip, range sync), and serving peers' block-range requests. One FIFO for all of
//! them let 8 peers × 64 range requests push block production past its slot. Here production
//! goes first, then imports, then serving; serving is capped in total and per peer, and
//! imports in total, so a flood is refused at the door (the sender sees "busy", a transient
//! failure) instead of queueing behind or ahead of our own work.
//!
//! Sans-IO: the type holds items and answers `push`/`pop`; the worker thread drives it.

use std::collections::{HashMap, VecDeque};

/// What a queued job is, in priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobClass {
    /// Build and import our block for a slot.
    Produce,
    /// Import a block (gossip, range sync) or take a deposit.
    Import,
    /// Serve a peer's block-range request.
    Serve,
}

/// Limits of a [`WorkerQueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most produce jobs waiting (one per slot is all there is).
    pub produce: usize,
    /// Most import jobs waiting.
    pub import: usize,
    /// Most serve jobs waiting over all peers.
    pub serve: usize,
    /// Most serve jobs waiting for one peer.
    pub serve_per_peer: usize,
}

impl Default for QueueLimits {
    fn default() -> Self {
        Self {
            produce: 4,
            import: 1024,
            serve: 64,
            serve_per_peer: 4,
        }
    }
}

/// Who asked for a serve job: a peer (limited per peer) or the node itself.
pub type Requester = Option<modnode_peers::NodeId>;

/// A bounded priority queue of worker jobs. See the [module docs](self).
#[derive(Debug)]
pub struct WorkerQueue<T> {
    limits: QueueLimits,
    produce: VecDeque<T>,
    import: VecDeque<T>,
    serve: VecDeque<(Requester, T)>,
    serve_per_peer: HashMap<modnode_peers::NodeId, usize>,
}

impl<T> WorkerQueue<T> {
    /// An empty queue with `limits`.
    pub fn new(limits: QueueLimits) -> Self {
        Self {
            limits,
            produce: VecDeque::new(),
            import: VecDeque::new(),
            serve: VecDeque::new(),
            serve_per_peer: HashMap::new(),
        }
    }

    /// Queues `job`; gives it back when its class (or, for serving, its peer) is at its limit.
    pub fn push(&mut self, class: JobClass, requester: Requester, job: T) -> Result<(), T> {
        match class {
            JobClass::Produce if self.produce.len() < self.limits.produce => {
                self.produce.push_back(job);
            }
            JobClass::Import if self.import.len() < self.limits.import => {
                self.import.push_back(job);
            }
            JobClass::Serve if self.serve.len() < self.limits.serve => {
                if let Some(peer) = requester {
                    let queued = self.serve_per_peer.entry(peer).or_insert(0);
                    if *queued >= self.limits.serve_per_peer {
                        return Err(job);
                    }
                    *queued = queued.saturating_add(1);
                }
                self.serve.push_back((requester, job));
            }
            _ => return Err(job),
        }
        Ok(())
    }

    /// The next job: production first, then imports, then serving (oldest first within each).
    pub fn pop(&mut self) -> Option<T> {
        if let Some(job) = self.produce.pop_front() {
            return Some(job);
        }
        if let Some(job) = self.import.pop_front() {
            return Some(job);
        }
        let (requester, job) = self.serve.pop_front()?;
        if let Some(peer) = requester
            && let Some(queued) = self.serve_per_peer.get_mut(&peer)
        {
            *queued = queued.saturating_sub(1);
            if *queued == 0 {
                self.serve_per_peer.remove(&peer);
            }
        }
        Some(job)
    }

    /// Jobs waiting.
    pub fn len(&self) -> usize {
        self.produce
            .len()
            .saturating_add(self.import.len())
            .saturating_add(self.serve.len())
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

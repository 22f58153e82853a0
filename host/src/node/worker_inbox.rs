//! The chain worker's inbox: its [`WorkerQueue`] shared between the handles that push jobs and
//! the worker thread that pops them.
//!
//! Jobs are admitted — or refused as busy — at the moment they are sent, by the same class and
//! per-peer limits the queue enforces, so what waits for the worker is bounded even while the
//! worker is stuck in one long import (a channel in front of the queue would grow without bound
//! then, and be sorted by priority only once the worker came back for it).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::worker_queue::{JobClass, QueueLimits, Requester, WorkerQueue};

/// Why a job was not queued; the job comes back so its requester can be answered.
#[derive(Debug)]
pub enum Refused<T> {
    /// Its class (or its peer's share) is full: a transient condition.
    Full(T),
    /// The worker has stopped.
    Closed(T),
}

struct Inner<T> {
    queue: WorkerQueue<T>,
    senders: usize,
    closed: bool,
}

struct Shared<T> {
    inner: Mutex<Inner<T>>,
    ready: Condvar,
}

impl<T> Shared<T> {
    /// The state, even if a thread panicked while holding it: every update leaves it
    /// consistent (counters and a queue that is only pushed and popped whole).
    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The sending side; cheap to clone. When the last one is dropped the worker drains what is
/// queued and then stops.
pub struct InboxSender<T> {
    shared: Arc<Shared<T>>,
}

/// The worker's side.
pub struct InboxReceiver<T> {
    shared: Arc<Shared<T>>,
}

/// A new inbox bounded by `limits`.
pub fn inbox<T>(limits: QueueLimits) -> (InboxSender<T>, InboxReceiver<T>) {
    let shared = Arc::new(Shared {
        inner: Mutex::new(Inner {
            queue: WorkerQueue::new(limits),
            senders: 1,
            closed: false,
        }),
        ready: Condvar::new(),
    });
    (
        InboxSender {
            shared: shared.clone(),
        },
        InboxReceiver { shared },
    )
}

impl<T> InboxSender<T> {
    /// Queues `job`, or gives it back at once if its class is full or the worker stopped.
    pub fn send(&self, class: JobClass, requester: Requester, job: T) -> Result<(), Refused<T>> {
        let mut inner = self.shared.lock();
        if inner.closed {
            return Err(Refused::Closed(job));
        }
        inner
            .queue
            .push(class, requester, job)
            .map_err(Refused::Full)?;
        drop(inner);
        self.shared.ready.notify_one();
        Ok(())
    }
}

impl<T> Clone for InboxSender<T> {
    fn clone(&self) -> Self {
        let mut inner = self.shared.lock();
        inner.senders = inner.senders.saturating_add(1);
        drop(inner);
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for InboxSender<T> {
    fn drop(&mut self) {
        let mut inner = self.shared.lock();
        inner.senders = inner.senders.saturating_sub(1);
        let last = inner.senders == 0;
        drop(inner);
        if last {
            self.shared.ready.notify_all();
        }
    }
}

impl<T> InboxReceiver<T> {
    /// The most urgent queued job, waiting for one; `None` once the inbox is closed, or empty
    /// with no sender left.
    pub fn recv(&self) -> Option<T> {
        let mut inner = self.shared.lock();
        loop {
            if inner.closed {
                return None;
            }
            if let Some(job) = inner.queue.pop() {
                return Some(job);
            }
            if inner.senders == 0 {
                return None;
            }
            inner = self
                .shared
                .ready
                .wait(inner)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Refuses every later job and hands back the queued ones (to be answered "stopped").
    pub fn close(&self) -> Vec<T> {
        let mut inner = self.shared.lock();
        inner.closed = true;
        std::iter::from_fn(|| inner.queue.pop()).collect()
    }
}

impl<T> Drop for InboxReceiver<T> {
    fn drop(&mut self) {
        // Dropping the queued jobs drops their reply channels: requesters see "stopped".
        drop(self.close());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> QueueLimits {
        QueueLimits {
            produce: 1,
            import: 2,
            serve: 2,
            serve_per_peer: 1,
        }
    }

    #[test]
    fn jobs_beyond_the_limits_are_refused_at_send_while_the_worker_is_away() {
        let (tx, rx) = inbox::<u32>(limits());
        tx.send(JobClass::Import, None, 1).unwrap();
        tx.send(JobClass::Import, None, 2).unwrap();
        assert!(matches!(
            tx.send(JobClass::Import, None, 3),
            Err(Refused::Full(3))
        ));
        tx.send(JobClass::Serve, Some([7; 32]), 4).unwrap();
        assert!(matches!(
            tx.send(JobClass::Serve, Some([7; 32]), 5),
            Err(Refused::Full(5))
        ));
        tx.send(JobClass::Produce, None, 6).unwrap();
        // Production first, then imports, then serving — whatever the order of arrival.
        let order: Vec<u32> = std::iter::from_fn(|| {
            let more = !rx.shared.lock().queue.is_empty();
            more.then(|| rx.recv()).flatten()
        })
        .collect();
        assert_eq!(order, vec![6, 1, 2, 4]);
    }

    #[test]
    fn the_worker_drains_then_stops_when_the_last_sender_goes() {
        let (tx, rx) = inbox::<u32>(limits());
        let tx2 = tx.clone();
        tx.send(JobClass::Import, None, 1).unwrap();
        drop(tx);
        let worker = std::thread::spawn(move || std::iter::from_fn(|| rx.recv()).count());
        tx2.send(JobClass::Import, None, 2).unwrap();
        drop(tx2);
        assert_eq!(worker.join().unwrap(), 2);
    }

    #[test]
    fn a_closed_inbox_refuses_and_returns_what_was_queued() {
        let (tx, rx) = inbox::<u32>(limits());
        tx.send(JobClass::Import, None, 1).unwrap();
        assert_eq!(rx.close(), vec![1]);
        assert!(matches!(
            tx.send(JobClass::Import, None, 2),
            Err(Refused::Closed(2))
        ));
        assert_eq!(rx.recv(), None);
    }
}

//! The worker thread shadow comparisons run on, behind a bounded queue.

use std::sync::mpsc::{self, SyncSender, TrySendError};

type Job = Box<dyn FnOnce() + Send>;

/// A bounded queue and one worker thread for shadow comparisons. Shared by the slots of a node.
#[derive(Clone)]
pub struct ShadowWorker {
    sender: SyncSender<Job>,
}

impl ShadowWorker {
    /// Starts the worker with room for `capacity` waiting comparisons.
    pub fn start(capacity: usize) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::sync_channel::<Job>(capacity.max(1));
        std::thread::Builder::new()
            .name("modnode-shadow".into())
            .spawn(crate::log_span::in_current_span(move || {
                while let Ok(job) = receiver.recv() {
                    // A panicking comparison must not stop later ones.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            }))?;
        Ok(Self { sender })
    }

    pub(super) fn try_submit(&self, job: Job) -> bool {
        match self.sender.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// Waits until every comparison submitted before this call has finished.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        if self
            .sender
            .send(Box::new(move || {
                let _ = tx.send(());
            }))
            .is_ok()
        {
            let _ = rx.recv();
        }
    }
}

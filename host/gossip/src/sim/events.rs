//! What happens in the simulated network, and when: the events of the simulator's queue,
//! ordered by time, then by the order they were scheduled in (so runs are deterministic).

use std::cmp::Ordering;

use crate::Time;
use crate::engine::SendId;

/// One thing that happens; `life` fields name the life of a node the event belongs to (an
/// event of an earlier life is stale and dropped).
pub(super) enum Ev<F> {
    Publish {
        msg: usize,
    },
    Arrive {
        to: usize,
        to_life: u64,
        from: usize,
        from_life: u64,
        send_id: SendId,
        frame: F,
        bytes: usize,
        /// The generation of the link it travels (a cut makes frames on it stale).
        link: u64,
    },
    LinkDone {
        node: usize,
        life: u64,
    },
    UplinkDone {
        node: usize,
        life: u64,
    },
    Ack {
        node: usize,
        life: u64,
        peer: usize,
        send_id: SendId,
    },
    Timer {
        node: usize,
        generation: u64,
    },
    Leave {
        node: usize,
    },
    Join {
        node: usize,
    },
    /// Cut a random node's parent link.
    Cut,
    /// The cut link between the two nodes works again.
    Restore {
        a: usize,
        b: usize,
    },
}

pub(super) struct Scheduled<F> {
    pub(super) time: Time,
    pub(super) seq: u64,
    pub(super) ev: Ev<F>,
}

impl<F> PartialEq for Scheduled<F> {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl<F> Eq for Scheduled<F> {}
impl<F> PartialOrd for Scheduled<F> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<F> Ord for Scheduled<F> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time, self.seq).cmp(&(other.time, other.seq))
    }
}

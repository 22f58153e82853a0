//! Bounded, expiring set of message ids this node has seen.

use std::collections::{HashMap, VecDeque};

use crate::Time;
use crate::wire::MessageId;

/// Remembers message ids for `ttl` microseconds, holding at most `capacity` of them (the oldest
/// is evicted first). Insertion times must not decrease.
#[derive(Debug)]
pub struct SeenCache {
    capacity: usize,
    ttl: Time,
    expiry: HashMap<MessageId, Time>,
    order: VecDeque<(Time, MessageId)>,
}

impl SeenCache {
    /// An empty cache. A capacity of 0 is treated as 1.
    pub fn new(capacity: usize, ttl: Time) -> SeenCache {
        SeenCache {
            capacity: capacity.max(1),
            ttl,
            expiry: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Records `id` as seen at `now`. Returns `false` if it was already present (and unexpired).
    pub fn insert(&mut self, id: MessageId, now: Time) -> bool {
        self.expire(now);
        if self.expiry.contains_key(&id) {
            return false;
        }
        while self.expiry.len() >= self.capacity {
            match self.order.pop_front() {
                Some((_, old)) => {
                    self.expiry.remove(&old);
                }
                None => break,
            }
        }
        let until = now.saturating_add(self.ttl);
        self.expiry.insert(id, until);
        self.order.push_back((until, id));
        true
    }

    /// True if `id` was seen and has not expired at `now`.
    pub fn contains(&self, id: &MessageId, now: Time) -> bool {
        self.expiry.get(id).is_some_and(|&until| until > now)
    }

    /// Forgets `id` (used when a fetch is abandoned so a later announce can restart it).
    pub fn remove(&mut self, id: &MessageId) {
        if self.expiry.remove(id).is_some() {
            self.order.retain(|(_, other)| other != id);
        }
    }

    /// Drops entries expired at `now`.
    pub fn expire(&mut self, now: Time) {
        while let Some(&(until, id)) = self.order.front() {
            if until > now {
                break;
            }
            self.order.pop_front();
            self.expiry.remove(&id);
        }
    }

    /// Number of remembered ids.
    pub fn len(&self) -> usize {
        self.expiry.len()
    }

    /// True if nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> MessageId {
        MessageId([n; 32])
    }

    #[test]
    fn dedups_until_expiry() {
        let mut seen = SeenCache::new(10, 100);
        assert!(seen.insert(id(1), 0));
        assert!(!seen.insert(id(1), 50));
        assert!(seen.contains(&id(1), 99));
        assert!(!seen.contains(&id(1), 100));
        assert!(seen.insert(id(1), 100));
    }

    #[test]
    fn evicts_oldest_when_full() {
        let mut seen = SeenCache::new(2, 1_000);
        assert!(seen.insert(id(1), 0));
        assert!(seen.insert(id(2), 1));
        assert!(seen.insert(id(3), 2));
        assert_eq!(seen.len(), 2);
        assert!(!seen.contains(&id(1), 3));
        assert!(seen.contains(&id(2), 3) && seen.contains(&id(3), 3));
        seen.remove(&id(2));
        assert!(!seen.contains(&id(2), 3));
        assert_eq!(seen.len(), 1);
    }
}

//! The tunables of the engine's mechanics ([`EngineConfig`]) and the default message id.

use super::routes::RoutingConfig;
use crate::Time;
use crate::policy::MessageKind;
use crate::wire::{MAX_PAYLOAD, MessageId};

const MS: Time = 1_000;

/// Tunables of the engine mechanics (not of the policy).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Transmissions a peer may have outstanding at once.
    pub max_inflight_per_peer: usize,
    /// Pushes with payloads smaller than this may be batched with other small items.
    pub batch_threshold: usize,
    /// Size cap of a batched transmission, in bytes.
    pub batch_max_bytes: usize,
    /// Ids the seen cache holds at most.
    pub seen_capacity: usize,
    /// How long an id stays in the seen cache.
    pub seen_ttl: Time,
    /// Messages the store (served to requests) holds at most.
    pub store_capacity: usize,
    /// How long a message stays in the store.
    pub store_ttl: Time,
    /// Time for a request to be acknowledged by the announcer before another announcer is
    /// asked (doubles with every attempt).
    pub request_ack_timeout: Time,
    /// How much earlier a new announcer must be expected to acknowledge a request than the
    /// current, unacknowledged one before it is asked too.
    pub request_hedge_margin: Time,
    /// Base time to wait for the answer once the request was acknowledged (doubles with every
    /// attempt).
    pub request_timeout: Time,
    /// Added to `request_timeout` per KiB of the messages being fetched from the same peer (a
    /// slow link with many fetches outstanding must not time out and re-request them all).
    pub request_timeout_per_kib: Time,
    /// Longest answer timeout of an acknowledged request, whatever was announced.
    pub max_response_timeout: Time,
    /// Fetches (ids announced but not yet received) tracked at most; announces of new ids
    /// beyond it are ignored (the message can still be pushed or announced again later).
    pub max_fetches: usize,
    /// Fetches one peer may be an announcer of; a new id announced beyond it is a
    /// [`crate::error::PeerFault::TooManyFetches`] (an honest peer answers what it announced).
    pub max_fetches_per_peer: usize,
    /// Largest payload size an announce may claim; above it is a
    /// [`crate::error::PeerFault::AnnouncedSizeTooLarge`] (such a message could never be delivered).
    pub max_announced_size: u32,
    /// Requests made for one id before the fetch is given up.
    pub max_request_attempts: u32,
    /// Timeout of pushes that answer requests.
    pub serve_timeout: Time,
    /// Failures older than this no longer count in `recent_failures`.
    pub failure_window: Time,
    /// RTT reported for a peer before any sample, in microseconds.
    pub initial_rtt_us: u32,
    /// Sends completing faster than this give RTT samples (larger ones measure bandwidth).
    pub rtt_sample_max_bytes: usize,
    /// Cancelled planned pushes become announces (so the peer can still pull).
    pub announce_cancelled_pushes: bool,
    /// A planned push that times out or fails is followed by an announce.
    pub announce_failed_pushes: bool,
    /// Check that a pushed payload's id is [`EngineConfig::message_id`] of it before accepting
    /// it.
    pub verify_payload_ids: bool,
    /// The id of a message of a kind: by default the sha256 of the payload
    /// ([`MessageId::of`]). An application whose messages carry a signed header can make the
    /// id cover only the header, so variants of one message that differ elsewhere share an id
    /// and deduplicate (modnode: a block's id is its header hash).
    pub message_id: fn(MessageKind, &[u8]) -> MessageId,
    /// Messages that travelled this many hops are delivered but not forwarded.
    pub max_hops: u32,
    /// Network size given to the policy; `None` = connected peers + 1.
    pub network_size: Option<u32>,
    /// Hold received messages until the application judged them
    /// ([`super::GossipEngine::handle_validated`]): nothing is forwarded or served before, and a
    /// rejected message never is, so an honest node relays only what it checked.
    pub validate_before_relay: bool,
    /// Shortest time between two ticks told to the policy.
    pub policy_tick: Time,
    /// PRUNE / GRAFT items one peer may make this node hear at once, and this node send it at
    /// once; beyond it, [`EngineConfig::link_per_sec`]. Items heard over it are ignored
    /// (counted), never a fault: they cannot cost more than this, nor cut a link.
    pub link_burst: u32,
    /// PRUNE / GRAFT items per second per peer and direction after the burst.
    pub link_per_sec: u32,
    /// Graft timers that must run out in a row, with no tree link delivering in between,
    /// before the announcer of a missing message is grafted (0: at the first, as PlumTree).
    /// Before that a missing message is only pulled: a copy the tree brings late is not a
    /// lost link, and grafting for it adds a cycle the next duplicates must prune. A tree
    /// peer that leaves counts as enough misses.
    pub graft_after_misses: u32,
    /// Duplicates a tree link may push in a row, with no first copy in between, before it is
    /// pruned (a link off the tree is pruned at its first). A single duplicate over a tree
    /// link is where a message that entered the tree at two places (a pull) met itself, not
    /// a cycle; pruning it would cut the tree in two.
    pub prune_after_duplicates: u32,
    /// Distance-vector routing ([`RoutingConfig`]): with it, pushes name their origin, route
    /// frames are exchanged with every peer, and the policy plans knowing each peer's place on
    /// the origin's shortest-path tree ([`crate::policy::Policy::plan_routed`]). `None`: no
    /// routing (and nothing of it on the wire).
    pub routing: Option<RoutingConfig>,
}

/// The default message id: the sha256 of the payload, whatever the kind.
pub fn payload_message_id(_kind: MessageKind, payload: &[u8]) -> MessageId {
    MessageId::of(payload)
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_inflight_per_peer: 4,
            batch_threshold: 1024,
            batch_max_bytes: 16 * 1024,
            seen_capacity: 65_536,
            seen_ttl: 120_000 * MS,
            store_capacity: 4_096,
            store_ttl: 30_000 * MS,
            request_ack_timeout: 100 * MS,
            request_hedge_margin: 20 * MS,
            request_timeout: 150 * MS,
            request_timeout_per_kib: 2 * MS,
            max_response_timeout: 10_000 * MS,
            max_fetches: 4_096,
            max_fetches_per_peer: 1_024,
            max_announced_size: MAX_PAYLOAD,
            max_request_attempts: 10,
            serve_timeout: 2_000 * MS,
            failure_window: 10_000 * MS,
            initial_rtt_us: 100_000,
            rtt_sample_max_bytes: 2048,
            announce_cancelled_pushes: true,
            announce_failed_pushes: true,
            verify_payload_ids: true,
            message_id: payload_message_id,
            max_hops: 64,
            network_size: None,
            validate_before_relay: false,
            policy_tick: 1_000 * MS,
            link_burst: 32,
            link_per_sec: 16,
            graft_after_misses: 1,
            prune_after_duplicates: 3,
            routing: None,
        }
    }
}

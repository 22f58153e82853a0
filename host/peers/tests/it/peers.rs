//! `PeerManager`: backoff, bootstrap retries, peer exchange, bans, counts.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use modnode_peers::{
    Action, AddrSource, Direction, DisconnectReason, MILLIS, NodeId, PeerAddr, PeerConfig,
    PeerError, PeerManager, PeerState, SECONDS, Time, Violation,
};

/// Our own id: peers with a lower first byte win simultaneous dials against us.
const LOCAL: u8 = 100;

fn id(n: u8) -> NodeId {
    let mut id = [0u8; 32];
    id[0] = n;
    id
}

fn addr(n: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, n], 9000))
}

fn peer(n: u8) -> PeerAddr {
    PeerAddr {
        node: id(n),
        addr: addr(n),
    }
}

fn config() -> PeerConfig {
    PeerConfig::new(id(LOCAL))
}

fn exact_config() -> PeerConfig {
    let mut config = config();
    config.backoff.jitter_percent = 0;
    config
}

fn manager(config: PeerConfig, bootstrap: &[u8]) -> PeerManager {
    PeerManager::new(config, bootstrap.iter().map(|n| peer(*n)), 42, 0).unwrap()
}

fn drain(pm: &mut PeerManager, now: Time) -> Vec<Action> {
    std::iter::from_fn(|| pm.poll_action(now)).collect()
}

fn dials(actions: &[Action]) -> Vec<NodeId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Dial { node, .. } => Some(*node),
            _ => None,
        })
        .collect()
}

fn next_attempt(pm: &PeerManager, n: u8) -> (Time, u32) {
    match pm.peer_state(&id(n)) {
        Some(PeerState::Disconnected {
            next_attempt_at,
            failures,
        }) => (next_attempt_at, failures),
        other => panic!("peer {n} is not disconnected: {other:?}"),
    }
}

/// Dial (if due), connect and complete the handshake with bootstrap peer `n`.
fn connect_outbound(pm: &mut PeerManager, n: u8, now: Time) -> Vec<Action> {
    let actions = drain(pm, now);
    assert!(
        dials(&actions).contains(&id(n)),
        "{n} not dialed: {actions:?}"
    );
    pm.handle_outbound_connected(id(n), now).unwrap();
    pm.handle_handshake_completed(id(n), now).unwrap();
    actions
}

/// Fails one dial to bootstrap peer `n` at `now` and returns the delay until the next one.
fn fail_dial(pm: &mut PeerManager, n: u8, now: Time) -> Time {
    assert_eq!(dials(&drain(pm, now)), vec![id(n)]);
    pm.handle_disconnected(id(n), Direction::Outbound, now);
    let (next, _) = next_attempt(pm, n);
    assert_eq!(pm.poll_timeout(), Some(next));
    assert!(
        drain(pm, next - 1).is_empty(),
        "dialed before the backoff ended"
    );
    next - now
}

#[test]
fn backoff_doubles_from_500ms_and_caps_at_60s() {
    let mut pm = manager(exact_config(), &[1]);
    let mut now = 0;
    let mut delays = Vec::new();
    for failures in 1..=11 {
        let delay = fail_dial(&mut pm, 1, now);
        assert_eq!(next_attempt(&pm, 1).1, failures);
        delays.push(delay / MILLIS);
        now += delay;
    }
    assert_eq!(
        delays,
        [
            500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000, 60_000
        ]
    );
}

#[test]
fn jitter_stays_between_half_and_full_delay_and_is_seeded() {
    let run = |seed| {
        let mut pm = PeerManager::new(config(), [peer(1)], seed, 0).unwrap();
        let mut now = 0;
        (1..=10)
            .map(|_| {
                let delay = fail_dial(&mut pm, 1, now);
                now += delay;
                delay
            })
            .collect::<Vec<_>>()
    };
    let delays = run(7);
    for (index, delay) in delays.iter().enumerate() {
        let ceiling = ((500 * MILLIS) << index).min(60 * SECONDS);
        assert!(
            (ceiling / 2..=ceiling).contains(delay),
            "delay {delay} outside [{}, {ceiling}]",
            ceiling / 2
        );
    }
    assert_eq!(run(7), delays, "same seed, same delays");
    assert_ne!(run(8), delays, "the seed drives the jitter");
}

#[test]
fn backoff_resets_after_a_connection_stayed_up_30s() {
    for (uptime, expected_failures, expected_delay) in [
        (30 * SECONDS, 1, 500 * MILLIS),
        (30 * SECONDS - 1, 5, 8 * SECONDS),
    ] {
        let mut pm = manager(exact_config(), &[1]);
        let mut now = 0;
        for _ in 0..4 {
            now += fail_dial(&mut pm, 1, now);
        }
        connect_outbound(&mut pm, 1, now);
        now += uptime;
        pm.handle_disconnected(id(1), Direction::Outbound, now);
        let (next, failures) = next_attempt(&pm, 1);
        assert_eq!(failures, expected_failures, "uptime {uptime}");
        assert_eq!(next - now, expected_delay, "uptime {uptime}");
    }
}

#[test]
fn bootstrap_is_retried_forever_exchanged_peer_is_forgotten() {
    let mut config = exact_config();
    config.forget_after_failures = 3;
    let mut pm = manager(config, &[1, 2]);
    // Peer 2 stays connected and tells us about peer 3.
    let mut first = dials(&drain(&mut pm, 0));
    first.sort();
    assert_eq!(first, vec![id(1), id(2)]);
    pm.handle_disconnected(id(1), Direction::Outbound, 0);
    pm.handle_outbound_connected(id(2), 0).unwrap();
    pm.handle_handshake_completed(id(2), 0).unwrap();
    assert_eq!(
        drain(&mut pm, 0),
        vec![Action::RequestPeers { node: id(2) }]
    );
    pm.handle_peers_response(id(2), vec![peer(3)], 0).unwrap();

    // Every dial fails from now on.
    let mut now = 0;
    let mut dials_to = [0usize; 4];
    let mut forgotten_at = None;
    for _ in 0..300 {
        for node in dials(&drain(&mut pm, now)) {
            dials_to[usize::from(node[0])] += 1;
            pm.handle_disconnected(node, Direction::Outbound, now);
        }
        if forgotten_at.is_none() && pm.addresses(&id(3)).is_none() {
            forgotten_at = Some(dials_to[3]);
        }
        now = pm.poll_timeout().unwrap();
    }
    assert_eq!(
        forgotten_at,
        Some(3),
        "peer 3 is forgotten after 3 failures"
    );
    assert_eq!(dials_to[3], 3, "and never dialed again");
    assert!(
        dials_to[1] > 250,
        "bootstrap peer 1 dialed {} times",
        dials_to[1]
    );
    let (next, failures) = next_attempt(&pm, 1);
    assert_eq!(failures as usize, dials_to[1] + 1);
    assert!(next - now <= 60 * SECONDS);
    assert_eq!(pm.peer_state(&id(1)).map(|s| s.direction()), Some(None));
}

#[test]
fn keeps_the_outbound_target_and_refills_after_a_failure() {
    let mut config = exact_config();
    config.target_outbound = 2;
    let mut pm = manager(config, &[1, 2, 3, 4, 5]);
    let first = dials(&drain(&mut pm, 0));
    assert_eq!(first.len(), 2);
    assert!(drain(&mut pm, 0).is_empty());
    pm.handle_disconnected(first[0], Direction::Outbound, 0);
    let refill = dials(&drain(&mut pm, 0));
    assert_eq!(refill.len(), 1);
    assert!(
        !first.contains(&refill[0]),
        "a peer without failures is preferred"
    );
    assert_eq!(pm.counts().pending_outbound, 2);
}

#[test]
fn counts_only_handshake_completed_peers() {
    let mut pm = manager(exact_config(), &[1]);
    assert_eq!(dials(&drain(&mut pm, 0)), vec![id(1)]);
    assert_eq!((pm.connected_count(), pm.counts().pending_outbound), (0, 1));
    pm.handle_outbound_connected(id(1), 1).unwrap();
    assert_eq!((pm.connected_count(), pm.counts().pending_outbound), (0, 1));
    pm.handle_handshake_completed(id(1), 2).unwrap();
    assert_eq!(
        (pm.connected_count(), pm.counts().connected_outbound),
        (1, 1)
    );

    pm.handle_inbound(id(7), addr(7), 3).unwrap();
    assert_eq!((pm.connected_count(), pm.counts().pending_inbound), (1, 1));
    pm.handle_handshake_completed(id(7), 4).unwrap();
    assert_eq!(
        (pm.connected_count(), pm.counts().connected_inbound),
        (2, 1)
    );
    let connected: Vec<NodeId> = pm.connected_peers().collect();
    assert_eq!(connected, vec![id(1), id(7)]);

    pm.handle_disconnected(id(7), Direction::Inbound, 5);
    assert_eq!(pm.connected_count(), 1);
    // A handshake that never started does not count either.
    assert!(matches!(
        pm.handle_handshake_completed(id(9), 6),
        Err(PeerError::UnexpectedState { .. })
    ));
}

#[test]
fn dial_and_handshake_deadlines_disconnect_and_count_as_failures() {
    let mut pm = manager(exact_config(), &[1]);
    drain(&mut pm, 0);
    assert_eq!(pm.poll_timeout(), Some(10 * SECONDS));
    assert!(drain(&mut pm, 10 * SECONDS - 1).is_empty());
    assert_eq!(
        drain(&mut pm, 10 * SECONDS),
        vec![Action::Disconnect {
            node: id(1),
            reason: DisconnectReason::ConnectTimeout
        }]
    );
    let (next, failures) = next_attempt(&pm, 1);
    assert_eq!((next, failures), (10 * SECONDS + 500 * MILLIS, 1));
    // The driver's late report of the abandoned dial changes nothing.
    pm.handle_disconnected(id(1), Direction::Outbound, next - 1);
    assert_eq!(next_attempt(&pm, 1), (next, 1));

    assert_eq!(dials(&drain(&mut pm, next)), vec![id(1)]);
    pm.handle_outbound_connected(id(1), next).unwrap();
    let deadline = next + 10 * SECONDS;
    assert_eq!(pm.poll_timeout(), Some(deadline));
    assert_eq!(
        drain(&mut pm, deadline),
        vec![Action::Disconnect {
            node: id(1),
            reason: DisconnectReason::HandshakeTimeout
        }]
    );
    assert_eq!(next_attempt(&pm, 1).1, 2);
}

#[test]
fn inbound_limits_duplicates_and_simultaneous_dials() {
    let mut config = exact_config();
    config.max_inbound = 2;
    let mut pm = manager(config, &[5, 200]);
    assert_eq!(dials(&drain(&mut pm, 0)).len(), 2);

    assert_eq!(
        pm.handle_inbound(id(LOCAL), addr(1), 0),
        Err(PeerError::SelfConnection)
    );
    // Both sides dialed: the lower id's dial survives. 5 < LOCAL, so its inbound wins…
    pm.handle_inbound(id(5), addr(5), 0).unwrap();
    assert!(matches!(
        pm.handle_outbound_connected(id(5), 0),
        Err(PeerError::UnexpectedState { .. })
    ));
    pm.handle_disconnected(id(5), Direction::Outbound, 0);
    assert!(matches!(
        pm.peer_state(&id(5)),
        Some(PeerState::Handshaking {
            direction: Direction::Inbound,
            ..
        })
    ));
    // …while 200 > LOCAL, so ours does.
    assert_eq!(
        pm.handle_inbound(id(200), addr(200), 0),
        Err(PeerError::DuplicateConnection { node: id(200) })
    );

    pm.handle_inbound(id(7), addr(7), 0).unwrap();
    assert_eq!(
        pm.handle_inbound(id(8), addr(8), 0),
        Err(PeerError::InboundFull {
            node: id(8),
            max: 2
        })
    );
    pm.handle_handshake_completed(id(7), 0).unwrap();
    pm.handle_disconnected(id(7), Direction::Inbound, 1);
    pm.handle_inbound(id(8), addr(8), 1).unwrap();
    assert_eq!(pm.counts().inbound(), 2);
}

#[test]
fn a_connected_peer_that_connects_again_supersedes_its_old_connection() {
    let mut config = exact_config();
    config.max_inbound = 2;
    let window = config.handshake_timeout;
    let mut pm = manager(config, &[200]);
    assert_eq!(dials(&drain(&mut pm, 0)).len(), 1);

    // A peer connected to us connects again (it restarted; its old connection is dead but
    // not yet timed out): the new, authenticated connection replaces the old one, without
    // counting twice against the inbound limit.
    pm.handle_inbound(id(9), addr(9), 0).unwrap();
    pm.handle_inbound(id(7), addr(7), 0).unwrap();
    pm.handle_handshake_completed(id(7), 0).unwrap();
    pm.handle_inbound(id(7), addr(7), SECONDS).unwrap();
    pm.handle_handshake_completed(id(7), SECONDS).unwrap();
    assert!(matches!(
        pm.peer_state(&id(7)),
        Some(PeerState::Connected {
            direction: Direction::Inbound,
            ..
        })
    ));
    assert_eq!(pm.counts().inbound(), 2);
    pm.handle_disconnected(id(9), Direction::Inbound, SECONDS);

    // Our connection to 200 (> LOCAL) is up. An inbound one at the same moment is the other
    // half of a simultaneous dial, and ours survives; one that comes later means 200 lost
    // our connection and dialed again: it supersedes ours.
    pm.handle_outbound_connected(id(200), 0).unwrap();
    pm.handle_handshake_completed(id(200), 0).unwrap();
    assert_eq!(
        pm.handle_inbound(id(200), addr(200), window - 1),
        Err(PeerError::DuplicateConnection { node: id(200) })
    );
    pm.handle_inbound(id(200), addr(200), window).unwrap();
    pm.handle_handshake_completed(id(200), window).unwrap();
    assert!(matches!(
        pm.peer_state(&id(200)),
        Some(PeerState::Connected {
            direction: Direction::Inbound,
            ..
        })
    ));
    assert_eq!(pm.counts().inbound(), 2);
}

#[test]
fn inbound_from_a_new_address_supersedes_a_dial_to_a_stale_one() {
    // 200 > LOCAL would lose a simultaneous dial, but it connects from another address than
    // the one we keep dialing: it restarted elsewhere, and its live connection wins.
    let mut pm = manager(exact_config(), &[200]);
    let dialed = dials(&drain(&mut pm, 0));
    assert_eq!(dialed, vec![id(200)]);
    let moved = addr(201);
    pm.handle_inbound(id(200), moved, 0).unwrap();
    pm.handle_handshake_completed(id(200), 0).unwrap();
    assert_eq!(pm.connected_count(), 1);
    // The stale dial, if it ever completes, is refused.
    assert!(matches!(
        pm.handle_outbound_connected(id(200), 1),
        Err(PeerError::UnexpectedState { .. })
    ));
    assert!(
        pm.addresses(&id(200))
            .unwrap()
            .iter()
            .any(|a| a.addr == moved)
    );
}

#[test]
fn violation_bans_until_expiry() {
    let ban = 600 * SECONDS;
    let mut pm = manager(exact_config(), &[1]);
    connect_outbound(&mut pm, 1, 0);
    drain(&mut pm, 0);

    let t = 5 * SECONDS;
    pm.handle_violation(id(1), Violation::WrongChain, t);
    assert_eq!(pm.connected_count(), 0);
    assert_eq!(
        drain(&mut pm, t),
        vec![Action::Disconnect {
            node: id(1),
            reason: DisconnectReason::Banned {
                violation: Violation::WrongChain,
                until: t + ban
            }
        }]
    );
    // The driver's close report after our Disconnect is ignored.
    pm.handle_disconnected(id(1), Direction::Outbound, t + 1);
    assert_eq!(pm.ban_end(&id(1), t + 1), Some(t + ban));
    assert_eq!(
        pm.handle_inbound(id(1), addr(1), t + 2),
        Err(PeerError::Banned {
            node: id(1),
            until: t + ban
        })
    );
    assert_eq!(pm.poll_timeout(), Some(t + ban));
    assert!(dials(&drain(&mut pm, t + ban - 1)).is_empty());

    assert_eq!(dials(&drain(&mut pm, t + ban)), vec![id(1)]);
    assert_eq!(pm.ban_end(&id(1), t + ban), None);
    // And it may connect to us again (our dial superseded: 1 < LOCAL).
    pm.handle_inbound(id(1), addr(1), t + ban).unwrap();
}

#[test]
fn ban_of_unknown_peer_refuses_its_inbound_and_evicts_oldest_when_full() {
    let mut config = exact_config();
    config.max_bans = 2;
    let mut pm = manager(config, &[]);
    pm.handle_violation(id(1), Violation::Malformed("frame".into()), 0);
    pm.handle_violation(id(2), Violation::WrongChain, 1);
    pm.handle_violation(id(3), Violation::WrongChain, 2);
    assert_eq!(
        pm.ban_end(&id(1), 3),
        None,
        "the ban closest to expiry made room"
    );
    assert!(pm.ban_end(&id(2), 3).is_some());
    assert!(matches!(
        pm.handle_inbound(id(3), addr(3), 3),
        Err(PeerError::Banned { .. })
    ));
    pm.handle_inbound(id(1), addr(1), 3).unwrap();
}

/// Connects bootstrap peers `ns` (confirming their addresses) and returns the manager.
fn connected_manager(config: PeerConfig, ns: &[u8]) -> PeerManager {
    let mut pm = manager(config, ns);
    let actions = drain(&mut pm, 0);
    assert_eq!(dials(&actions).len(), ns.len());
    for n in ns {
        pm.handle_outbound_connected(id(*n), 0).unwrap();
        pm.handle_handshake_completed(id(*n), 0).unwrap();
    }
    pm
}

#[test]
fn exchange_answer_holds_known_good_addresses_only() {
    let mut config = exact_config();
    config.exchange_max = 3;
    let mut pm = connected_manager(config, &[1, 2, 3, 4, 5]);
    drain(&mut pm, 0);
    // An inbound peer (unconfirmed address) and an exchanged, never dialed one.
    pm.handle_inbound(id(50), addr(50), 0).unwrap();
    pm.handle_handshake_completed(id(50), 0).unwrap();
    pm.handle_peers_response(id(1), vec![peer(60)], 0).unwrap();

    let mut seen = BTreeSet::new();
    for _ in 0..50 {
        let answer = pm.handle_peers_request(id(1), 0).unwrap();
        assert_eq!(answer.len(), 3);
        for entry in answer {
            assert_eq!(entry.addr, addr(entry.node[0]));
            seen.insert(entry.node[0]);
        }
    }
    assert_eq!(
        seen,
        BTreeSet::from([2, 3, 4, 5]),
        "never 1 itself, 50 or 60"
    );

    pm.handle_violation(id(2), Violation::WrongChain, 1);
    for _ in 0..20 {
        let answer = pm.handle_peers_request(id(1), 1).unwrap();
        assert!(
            answer.iter().all(|p| p.node != id(2)),
            "banned peer handed out"
        );
    }
    assert_eq!(
        pm.handle_peers_request(id(60), 1),
        Err(PeerError::NotConnected { node: id(60) })
    );
}

#[test]
fn exchange_merge_is_capped_per_answer_and_per_source() {
    let mut config = exact_config();
    config.exchange_max = 4;
    config.max_per_source = 6;
    let mut pm = connected_manager(config, &[1]);
    assert_eq!(
        drain(&mut pm, 0),
        vec![Action::RequestPeers { node: id(1) }]
    );

    let flood: Vec<PeerAddr> = (10..30).map(peer).collect();
    let report = pm.handle_peers_response(id(1), flood.clone(), 0).unwrap();
    assert_eq!((report.added_nodes, report.ignored), (4, 16));
    assert_eq!(
        pm.handle_peers_response(id(1), flood, 0),
        Err(PeerError::UnsolicitedPeers { node: id(1) })
    );
    assert_eq!(pm.counts().known, 5);

    // The periodic exchange asks again; the source quota (6) admits two more.
    let again = drain(&mut pm, 60 * SECONDS);
    assert!(
        again.contains(&Action::RequestPeers { node: id(1) }),
        "{again:?}"
    );
    let report = pm
        .handle_peers_response(id(1), (30..34).map(peer).collect(), 60 * SECONDS)
        .unwrap();
    assert_eq!((report.added_nodes, report.ignored), (2, 2));
    let from_1 = (10..34)
        .filter_map(|n| pm.addresses(&id(n)))
        .flatten()
        .filter(|a| a.source == AddrSource::Exchange { from: id(1) })
        .count();
    assert_eq!(from_1, 6);
}

#[test]
fn exchange_merge_skips_self_banned_undialable_and_respects_book_caps() {
    let mut config = exact_config();
    config.max_known = 4;
    config.max_addrs_per_node = 2;
    let mut pm = connected_manager(config, &[1, 2]);
    drain(&mut pm, 0);
    pm.handle_violation(id(9), Violation::WrongChain, 0);
    let entries = vec![
        peer(LOCAL),
        peer(9),
        PeerAddr {
            node: id(10),
            addr: SocketAddr::from(([0, 0, 0, 0], 9000)),
        },
        PeerAddr {
            node: id(11),
            addr: SocketAddr::from(([10, 0, 0, 11], 0)),
        },
        // A second and a third address for peer 2: only one fits.
        PeerAddr {
            node: id(2),
            addr: addr(102),
        },
        PeerAddr {
            node: id(2),
            addr: addr(103),
        },
        // Already known.
        peer(2),
        peer(12),
        peer(13),
        // Book full (1, 2, 12, 13).
        peer(14),
    ];
    let report = pm.handle_peers_response(id(1), entries, 0).unwrap();
    assert_eq!(report.added_nodes, 2);
    assert_eq!(report.added_addrs, 1);
    assert_eq!(report.ignored, 7);
    assert_eq!(pm.counts().known, 4);
    assert_eq!(pm.addresses(&id(2)).map(<[_]>::len), Some(2));
    assert!(pm.addresses(&id(LOCAL)).is_none());
}

#[test]
fn violation_drops_unconfirmed_addresses_the_violator_gave_us() {
    let mut pm = connected_manager(exact_config(), &[1, 2]);
    drain(&mut pm, 0);
    pm.handle_peers_response(id(1), vec![peer(20), peer(21)], 0)
        .unwrap();
    pm.handle_peers_response(id(2), vec![peer(22)], 0).unwrap();
    pm.handle_violation(id(1), Violation::WrongChain, 1);
    assert!(pm.addresses(&id(20)).is_none());
    assert!(pm.addresses(&id(21)).is_none());
    assert!(pm.addresses(&id(22)).is_some());
}

#[test]
fn dialing_an_exchanged_address_confirms_it() {
    let mut config = exact_config();
    config.target_outbound = 2;
    let mut pm = connected_manager(config, &[1]);
    drain(&mut pm, 0);
    pm.handle_peers_response(id(1), vec![peer(30)], 0).unwrap();
    assert_eq!(pm.handle_peers_request(id(1), 0).unwrap(), vec![]);
    assert_eq!(dials(&drain(&mut pm, 0)), vec![id(30)]);
    pm.handle_outbound_connected(id(30), 1).unwrap();
    pm.handle_handshake_completed(id(30), 1).unwrap();
    assert_eq!(pm.handle_peers_request(id(1), 1).unwrap(), vec![peer(30)]);
    // A failed dial withdraws the confirmation.
    pm.handle_disconnected(id(30), Direction::Outbound, 2);
    let (next, _) = next_attempt(&pm, 30);
    assert_eq!(dials(&drain(&mut pm, next)), vec![id(30)]);
    pm.handle_disconnected(id(30), Direction::Outbound, next);
    assert_eq!(pm.handle_peers_request(id(1), next).unwrap(), vec![]);
}

#[test]
fn asks_for_addresses_only_while_below_target() {
    let mut config = exact_config();
    config.target_outbound = 2;
    let mut pm = manager(config, &[1, 2]);
    drain(&mut pm, 0);
    pm.handle_outbound_connected(id(1), 0).unwrap();
    pm.handle_handshake_completed(id(1), 0).unwrap();
    assert_eq!(
        drain(&mut pm, 0),
        vec![Action::RequestPeers { node: id(1) }]
    );
    pm.handle_outbound_connected(id(2), 0).unwrap();
    pm.handle_handshake_completed(id(2), 0).unwrap();
    assert!(drain(&mut pm, 0).is_empty(), "target reached: no request");
    assert_eq!(pm.poll_timeout(), None);
    assert!(drain(&mut pm, 3600 * SECONDS).is_empty());
}

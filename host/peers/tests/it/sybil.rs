//! Sybils and eclipse attempts against `PeerManager`: keys are free, addresses are not.

use std::net::{IpAddr, SocketAddr};

use modnode_peers::{
    Action, Direction, NodeId, PeerAddr, PeerConfig, PeerError, PeerManager, Time, Violation,
};

const LOCAL: u8 = 100;

fn id(n: u16) -> NodeId {
    let mut id = [0u8; 32];
    id[..2].copy_from_slice(&n.to_be_bytes());
    id[2] = 1;
    id
}

fn v4(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([a, b, c, d], port))
}

fn manager(config: PeerConfig, bootstrap: &[PeerAddr]) -> PeerManager {
    PeerManager::new(config, bootstrap.iter().copied(), 7, 0).unwrap()
}

fn config() -> PeerConfig {
    let mut local = [0u8; 32];
    local[0] = LOCAL;
    PeerConfig::new(local)
}

fn drain(pm: &mut PeerManager, now: Time) -> Vec<Action> {
    std::iter::from_fn(|| pm.poll_action(now)).collect()
}

#[test]
fn one_ip_and_one_subnet_get_a_few_inbound_slots_however_many_keys_they_have() {
    let cfg = config();
    let (per_ip, per_subnet) = (cfg.max_inbound_per_ip, cfg.max_inbound_per_subnet);
    assert!(per_ip < per_subnet && per_subnet < cfg.max_inbound);
    let mut pm = manager(cfg, &[]);
    // 1000 fresh keys from one address: only `per_ip` get in.
    let mut admitted = 0;
    for n in 0..1000 {
        match pm.handle_inbound(id(n), v4(203, 0, 113, 7, 40_000 + n), 0) {
            Ok(()) => admitted += 1,
            Err(PeerError::TooManyFromIp { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(admitted, per_ip);
    // Neighbours in the same /24 fill the subnet's slots, then are refused too.
    for host in 8..=255u8 {
        let n = 1000 + u16::from(host);
        match pm.handle_inbound(id(n), v4(203, 0, 113, host, 9000), 0) {
            Ok(()) => admitted += 1,
            Err(PeerError::TooManyFromSubnet { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(admitted, per_subnet);
    // Another subnet is not affected; handshakes in progress count as much as connections.
    pm.handle_inbound(id(5000), v4(198, 51, 100, 1, 9000), 0)
        .unwrap();
    pm.handle_handshake_completed(id(5000), 1).unwrap();
    // IPv6: one /64 is one subnet.
    let v6 = |host: u16| SocketAddr::new(IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, host]), 9000);
    let mut v6_admitted = 0;
    for host in 0..100u16 {
        if pm.handle_inbound(id(6000 + host), v6(host), 0).is_ok() {
            v6_admitted += 1;
        }
    }
    assert_eq!(v6_admitted, per_subnet);
}

#[test]
fn loopback_bootstrap_and_trusted_addresses_are_exempt() {
    let mut cfg = config();
    cfg.max_inbound = 200;
    let trusted: IpAddr = "192.0.2.50".parse().unwrap();
    cfg.trusted_ips.insert(trusted);
    let bootstrap = PeerAddr {
        node: id(9999),
        addr: v4(192, 0, 2, 60, 9000),
    };
    let mut pm = manager(cfg.clone(), &[bootstrap]);
    // A devnet on one machine: many nodes on 127.0.0.1.
    for n in 0..20 {
        pm.handle_inbound(id(n), v4(127, 0, 0, 1, 9000 + n), 0)
            .unwrap();
    }
    for n in 20..40 {
        pm.handle_inbound(id(n), SocketAddr::new(trusted, 9000 + n), 0)
            .unwrap();
    }
    for n in 40..60 {
        pm.handle_inbound(id(n), v4(192, 0, 2, 60, 9000 + n), 0)
            .unwrap();
    }
    assert_eq!(pm.counts().inbound(), 60);
}

#[test]
fn transport_handshakes_in_progress_count_against_the_limits() {
    let cfg = config();
    let (per_ip, pending) = (cfg.max_inbound_per_ip, cfg.max_pending_incoming);
    let mut pm = manager(cfg, &[]);
    let attacker = v4(203, 0, 113, 9, 5000);
    for _ in 0..per_ip {
        pm.handle_incoming(attacker).unwrap();
    }
    assert!(matches!(
        pm.handle_incoming(attacker),
        Err(PeerError::TooManyFromIp { .. })
    ));
    // While those handshakes run, the same address gets no inbound slot either.
    assert!(matches!(
        pm.handle_inbound(id(1), attacker, 0),
        Err(PeerError::TooManyFromIp { .. })
    ));
    // Every one of them ends (fails or becomes an inbound connection): the slots come back.
    for _ in 0..per_ip {
        pm.handle_incoming_done(attacker);
    }
    pm.handle_incoming(attacker).unwrap();
    pm.handle_incoming_done(attacker);
    pm.handle_inbound(id(1), attacker, 0).unwrap();
    // Spread over many subnets, handshakes in progress are still capped in total; loopback too.
    let mut admitted = 0;
    for n in 0..1000u16 {
        let [hi, lo] = n.to_be_bytes();
        if pm.handle_incoming(v4(10, hi, lo, 1, 9000)).is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, pending);
    assert!(matches!(
        pm.handle_incoming(v4(127, 0, 0, 1, 9000)),
        Err(PeerError::TooManyPending { .. })
    ));
}

#[test]
fn identities_learned_only_from_inbound_connections_are_never_dialled() {
    let mut pm = manager(config(), &[]);
    // A thousand sybils connect to us and leave again.
    for n in 0..1000u16 {
        let [hi, lo] = n.to_be_bytes();
        let from = v4(10, hi, lo, 1, 9000);
        if pm.handle_inbound(id(n), from, 0).is_ok() {
            pm.handle_handshake_completed(id(n), 0).unwrap();
            pm.handle_disconnected(id(n), Direction::Inbound, 1);
        }
    }
    let actions = drain(&mut pm, 3_600_000_000);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Dial { .. })),
        "{actions:?}"
    );
    assert_eq!(pm.counts().known, 0, "nothing to dial is kept in the book");
}

#[test]
fn an_inbound_address_confirmed_by_an_exchange_is_dialled() {
    let boot = PeerAddr {
        node: id(1),
        addr: v4(192, 0, 2, 1, 9000),
    };
    let mut pm = manager(config(), &[boot]);
    assert!(matches!(drain(&mut pm, 0)[..], [Action::Dial { .. }]));
    pm.handle_outbound_connected(id(1), 0).unwrap();
    pm.handle_handshake_completed(id(1), 0).unwrap();
    let _ = drain(&mut pm, 0);
    // Node 2 connects to us while connected, then an honest peer vouches for its address.
    let addr2 = v4(192, 0, 2, 2, 9000);
    pm.handle_inbound(id(2), addr2, 1).unwrap();
    pm.handle_handshake_completed(id(2), 1).unwrap();
    pm.handle_disconnected(id(2), Direction::Inbound, 2);
    assert!(
        !drain(&mut pm, 10_000_000)
            .iter()
            .any(|a| matches!(a, Action::Dial { node, .. } if *node == id(2)))
    );
    let report = pm
        .handle_peers_response(
            id(1),
            vec![PeerAddr {
                node: id(2),
                addr: addr2,
            }],
            10_000_000,
        )
        .unwrap();
    assert_eq!(report.added_nodes + report.added_addrs, 1);
    assert!(
        drain(&mut pm, 10_000_000)
            .iter()
            .any(|a| matches!(a, Action::Dial { node, addr } if *node == id(2) && *addr == addr2))
    );
}

#[test]
fn bans_are_reported_for_persistence_and_restored_after_a_restart() {
    let mut pm = manager(config(), &[]);
    let from = v4(192, 0, 2, 9, 9000);
    pm.handle_inbound(id(3), from, 0).unwrap();
    pm.handle_handshake_completed(id(3), 0).unwrap();
    pm.handle_violation(id(3), Violation::WrongChain, 5);
    let until = pm.ban_end(&id(3), 5).unwrap();
    assert_eq!(pm.poll_ban(), Some((id(3), until)));
    assert_eq!(pm.poll_ban(), None);

    // A new manager (the node restarted) gets the ban back and refuses the key.
    let mut restarted = manager(config(), &[]);
    restarted.restore_ban(id(3), until);
    assert_eq!(
        restarted.poll_ban(),
        None,
        "a restored ban is not reported again"
    );
    assert!(matches!(
        restarted.handle_inbound(id(3), from, 6),
        Err(PeerError::Banned { .. })
    ));
    restarted.handle_inbound(id(3), from, until).unwrap();
}

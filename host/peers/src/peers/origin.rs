//! Where inbound connections come from: the [`Subnet`] an address belongs to and the count of
//! transport handshakes in progress per IP. Keys are free, addresses are not, so inbound
//! limits are per IP and per subnet; see [`PeerConfig`](super::PeerConfig) for the numbers.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The network an address belongs to for inbound limits: its /24 (IPv4) or /64 (IPv6).
/// IPv4-mapped IPv6 addresses count as IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subnet {
    /// The first three octets of an IPv4 address.
    V4([u8; 3]),
    /// The first eight bytes of an IPv6 address.
    V6([u8; 8]),
}

impl Subnet {
    /// The subnet of `ip`.
    pub fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let [a, b, c, _] = v4.octets();
                Self::V4([a, b, c])
            }
            IpAddr::V6(v6) => {
                let octets = v6.octets();
                let mut prefix = [0u8; 8];
                for (dst, src) in prefix.iter_mut().zip(octets) {
                    *dst = src;
                }
                Self::V6(prefix)
            }
        }
    }
}

/// Transport (QUIC/TLS) handshakes in progress, per remote IP.
#[derive(Debug, Default)]
pub(super) struct PendingIncoming {
    per_ip: BTreeMap<IpAddr, usize>,
    total: usize,
}

impl PendingIncoming {
    pub(super) fn total(&self) -> usize {
        self.total
    }

    pub(super) fn count_ip(&self, ip: IpAddr) -> usize {
        self.per_ip.get(&ip.to_canonical()).copied().unwrap_or(0)
    }

    pub(super) fn count_subnet(&self, subnet: Subnet) -> usize {
        self.per_ip
            .iter()
            .filter(|(ip, _)| Subnet::of(**ip) == subnet)
            .map(|(_, n)| *n)
            .sum()
    }

    pub(super) fn add(&mut self, ip: IpAddr) {
        let n = self.per_ip.entry(ip.to_canonical()).or_insert(0);
        *n = n.saturating_add(1);
        self.total = self.total.saturating_add(1);
    }

    /// Ends one handshake from `ip`; a report without a matching start is ignored.
    pub(super) fn remove(&mut self, ip: IpAddr) {
        let ip = ip.to_canonical();
        let Some(n) = self.per_ip.get_mut(&ip) else {
            return;
        };
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.per_ip.remove(&ip);
        }
        self.total = self.total.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_are_slash_24_and_slash_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(Subnet::of(ip("10.1.2.3")), Subnet::of(ip("10.1.2.200")));
        assert_ne!(Subnet::of(ip("10.1.2.3")), Subnet::of(ip("10.1.3.3")));
        assert_eq!(
            Subnet::of(ip("::ffff:10.1.2.3")),
            Subnet::of(ip("10.1.2.9"))
        );
        assert_eq!(
            Subnet::of(ip("2001:db8:0:1::1")),
            Subnet::of(ip("2001:db8:0:1:ffff::2"))
        );
        assert_ne!(
            Subnet::of(ip("2001:db8:0:1::1")),
            Subnet::of(ip("2001:db8:0:2::1"))
        );
    }

    #[test]
    fn pending_counts_per_ip_and_total() {
        let mut pending = PendingIncoming::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        pending.add(a);
        pending.add(a);
        pending.add(b);
        assert_eq!((pending.count_ip(a), pending.total()), (2, 3));
        assert_eq!(pending.count_subnet(Subnet::of(b)), 3);
        pending.remove(a);
        pending.remove(a);
        pending.remove(a);
        assert_eq!((pending.count_ip(a), pending.total()), (0, 1));
    }
}

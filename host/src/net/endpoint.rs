//! QUIC endpoints with explicit resource limits.
//!
//! [`make_endpoint`] binds one UDP socket that both accepts (server config)
//! and dials (default client config), authenticated by
//! [`super::tls`]. [`connect`] and [`accept`] wrap the handshake in
//! [`TransportLimits::handshake_timeout`] and return the remote [`NodeId`].
//!
//! quinn-proto's default connection receive window is unlimited; here every
//! flow-control window and stream count comes from [`TransportLimits`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{HandshakeData, QuicClientConfig, QuicServerConfig};

use super::codec::MAX_MESSAGE_BYTES;
use super::identity::{NodeId, NodeIdentity};
use super::tls::{self, TlsError};

/// QUIC application close code sent when a peer fails post-handshake checks.
pub const CLOSE_PROTOCOL_VIOLATION: u32 = 1;

/// Resource limits applied to every connection of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportLimits {
    /// Bytes a peer may have in flight across all streams of one connection
    /// (default 8 MiB). quinn's own default is unlimited.
    pub connection_receive_window: u32,
    /// Bytes a peer may have in flight on one stream (default 1 MiB).
    pub stream_receive_window: u32,
    /// Bidirectional streams a peer may have open at once (default 64).
    pub max_concurrent_bidi_streams: u32,
    /// Unidirectional streams a peer may have open at once (default 16).
    pub max_concurrent_uni_streams: u32,
    /// Connections [`accept`] admits; callers pass their current count
    /// (default 256). Also bounds quinn's queue of not-yet-accepted handshakes.
    pub max_incoming_connections: usize,
    /// Time allowed for the QUIC + TLS handshake (default 5 s).
    pub handshake_timeout: Duration,
    /// Connection closed after this long without traffic (default 30 s).
    pub idle_timeout: Duration,
    /// Keep-alive ping interval, `None` to disable (default 10 s; must be
    /// shorter than `idle_timeout`).
    pub keep_alive: Option<Duration>,
    /// Largest frame `length` accepted by the codec (default 8 MiB,
    /// [`MAX_MESSAGE_BYTES`]).
    pub max_message_bytes: usize,
}

impl Default for TransportLimits {
    fn default() -> Self {
        Self {
            connection_receive_window: 8 * 1024 * 1024,
            stream_receive_window: 1024 * 1024,
            max_concurrent_bidi_streams: 64,
            max_concurrent_uni_streams: 16,
            max_incoming_connections: 256,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            keep_alive: Some(Duration::from_secs(10)),
            max_message_bytes: MAX_MESSAGE_BYTES,
        }
    }
}

impl TransportLimits {
    /// Checks that the limits are usable.
    pub fn validate(&self) -> Result<(), NetError> {
        let invalid =
            |field: &'static str, reason: String| Err(NetError::InvalidLimit { field, reason });
        if self.connection_receive_window == 0 {
            return invalid("connection_receive_window", "must be > 0".into());
        }
        if self.stream_receive_window == 0 {
            return invalid("stream_receive_window", "must be > 0".into());
        }
        if self.stream_receive_window > self.connection_receive_window {
            return invalid(
                "stream_receive_window",
                format!(
                    "{} exceeds connection_receive_window {}",
                    self.stream_receive_window, self.connection_receive_window
                ),
            );
        }
        if self.handshake_timeout.is_zero() {
            return invalid("handshake_timeout", "must be > 0".into());
        }
        if self.idle_timeout.is_zero() {
            return invalid("idle_timeout", "must be > 0".into());
        }
        if quinn::IdleTimeout::try_from(self.idle_timeout).is_err() {
            return invalid(
                "idle_timeout",
                format!("{:?} is too large for QUIC", self.idle_timeout),
            );
        }
        if let Some(k) = self.keep_alive
            && (k.is_zero() || k >= self.idle_timeout)
        {
            return invalid(
                "keep_alive",
                format!(
                    "{k:?} must be > 0 and shorter than idle_timeout {:?}",
                    self.idle_timeout
                ),
            );
        }
        if self.max_message_bytes < 2 || u32::try_from(self.max_message_bytes).is_err() {
            return invalid(
                "max_message_bytes",
                format!("{} is outside 2..=u32::MAX", self.max_message_bytes),
            );
        }
        Ok(())
    }

    /// The quinn transport configuration for these limits (validated first).
    pub fn transport_config(&self) -> Result<quinn::TransportConfig, NetError> {
        self.validate()?;
        let idle = quinn::IdleTimeout::try_from(self.idle_timeout).map_err(|e| {
            NetError::InvalidLimit {
                field: "idle_timeout",
                reason: e.to_string(),
            }
        })?;
        let mut t = quinn::TransportConfig::default();
        t.receive_window(quinn::VarInt::from_u32(self.connection_receive_window))
            .stream_receive_window(quinn::VarInt::from_u32(self.stream_receive_window))
            .send_window(u64::from(self.connection_receive_window))
            .max_concurrent_bidi_streams(quinn::VarInt::from_u32(self.max_concurrent_bidi_streams))
            .max_concurrent_uni_streams(quinn::VarInt::from_u32(self.max_concurrent_uni_streams))
            .max_idle_timeout(Some(idle))
            .keep_alive_interval(self.keep_alive)
            // Unreliable datagrams are not part of the protocol: do not buffer them.
            .datagram_receive_buffer_size(None);
        Ok(t)
    }
}

/// Endpoint and connection errors. Each names the peer address involved.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A [`TransportLimits`] field is out of range.
    #[error("invalid transport limit `{field}`: {reason}")]
    InvalidLimit {
        /// The offending field.
        field: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// Building the TLS configuration failed.
    #[error(transparent)]
    Tls(Box<TlsError>),
    /// The rustls configuration is unusable for QUIC.
    #[error("TLS configuration unusable for QUIC: {0}")]
    QuicCrypto(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
    /// Binding the UDP socket failed (or no tokio runtime is running).
    #[error("failed to bind QUIC endpoint to {addr}: {source}")]
    Bind {
        /// The requested bind address.
        addr: SocketAddr,
        /// The I/O error.
        source: io::Error,
    },
    /// quinn refused to start dialing.
    #[error("cannot dial {addr}: {source}")]
    Dial {
        /// The address being dialed.
        addr: SocketAddr,
        /// quinn's reason.
        source: quinn::ConnectError,
    },
    /// The QUIC/TLS handshake failed (includes certificate rejections such as
    /// an unexpected peer key, whose message names both keys).
    #[error("handshake with {addr} failed: {source}")]
    Handshake {
        /// The remote address.
        addr: SocketAddr,
        /// quinn's error.
        source: quinn::ConnectionError,
    },
    /// The handshake did not complete within the handshake timeout.
    #[error("handshake with {addr} timed out after {timeout:?}")]
    HandshakeTimeout {
        /// The remote address.
        addr: SocketAddr,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The remote's NodeId could not be read from the established connection.
    #[error("cannot identify peer {addr}: {source}")]
    PeerIdentity {
        /// The remote address.
        addr: SocketAddr,
        /// What went wrong.
        source: Box<TlsError>,
    },
    /// The dialed peer is not the expected node.
    #[error("peer at {addr} is node {actual}, expected node {expected}")]
    UnexpectedPeer {
        /// The remote address.
        addr: SocketAddr,
        /// The pinned key.
        expected: NodeId,
        /// The key the peer presented.
        actual: NodeId,
    },
    /// The peer did not negotiate the `modnode/1` application protocol.
    #[error("peer at {addr} negotiated application protocol {found:?} instead of \"modnode/1\"")]
    Alpn {
        /// The remote address.
        addr: SocketAddr,
        /// What was negotiated, if anything.
        found: Option<String>,
    },
    /// An incoming connection was refused because the limit is reached.
    #[error("refused incoming connection from {addr}: {open} connections open, limit is {max}")]
    TooManyConnections {
        /// The remote address.
        addr: SocketAddr,
        /// Connections currently open.
        open: usize,
        /// The configured limit.
        max: usize,
    },
}

impl From<TlsError> for NetError {
    fn from(err: TlsError) -> Self {
        Self::Tls(Box::new(err))
    }
}

/// Binds a QUIC endpoint on `bind` that accepts connections and dials with
/// this node's identity under `limits`. Must be called within a tokio runtime.
pub fn make_endpoint(
    bind: SocketAddr,
    identity: &NodeIdentity,
    limits: &TransportLimits,
) -> Result<quinn::Endpoint, NetError> {
    let transport = Arc::new(limits.transport_config()?);

    let server_crypto = QuicServerConfig::try_from(Arc::new(tls::server_config(identity)?))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
    server
        .transport_config(Arc::clone(&transport))
        .max_incoming(limits.max_incoming_connections.max(1));

    let client_crypto = QuicClientConfig::try_from(Arc::new(tls::client_config(identity)?))?;
    let mut client = quinn::ClientConfig::new(Arc::new(client_crypto));
    client.transport_config(transport);

    let mut endpoint = quinn::Endpoint::server(server, bind)
        .map_err(|source| NetError::Bind { addr: bind, source })?;
    endpoint.set_default_client_config(client);
    tracing::debug!(node_id = %identity.node_id(), %bind, "QUIC endpoint bound");
    Ok(endpoint)
}

/// Dials `addr`. If `expected` is given, the TLS verifier rejects any other
/// key (the error names both). Returns the connection and the peer's NodeId.
pub async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    expected: Option<NodeId>,
    limits: &TransportLimits,
) -> Result<(quinn::Connection, NodeId), NetError> {
    let connecting = endpoint
        .connect(addr, &tls::server_name_for(expected))
        .map_err(|source| NetError::Dial { addr, source })?;
    let conn = complete_handshake(connecting, addr, limits.handshake_timeout).await?;
    let node_id = check_established(&conn, addr)?;
    if let Some(expected) = expected
        && expected != node_id
    {
        // Unreachable while the verifier pins the key; kept as a backstop.
        conn.close(
            quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION),
            b"unexpected node id",
        );
        return Err(NetError::UnexpectedPeer {
            addr,
            expected,
            actual: node_id,
        });
    }
    tracing::debug!(%addr, peer = %node_id, "outgoing connection established");
    Ok((conn, node_id))
}

/// Accepts `incoming` unless `open_connections >= max_incoming_connections`
/// (then it is refused with CONNECTION_REFUSED), completing the handshake
/// within the handshake timeout.
pub async fn accept(
    incoming: quinn::Incoming,
    limits: &TransportLimits,
    open_connections: usize,
) -> Result<(quinn::Connection, NodeId), NetError> {
    let addr = incoming.remote_address();
    if open_connections >= limits.max_incoming_connections {
        incoming.refuse();
        tracing::debug!(%addr, open_connections, "refused incoming connection: limit reached");
        return Err(NetError::TooManyConnections {
            addr,
            open: open_connections,
            max: limits.max_incoming_connections,
        });
    }
    let connecting = incoming
        .accept()
        .map_err(|source| NetError::Handshake { addr, source })?;
    let conn = complete_handshake(connecting, addr, limits.handshake_timeout).await?;
    let node_id = check_established(&conn, addr)?;
    tracing::debug!(%addr, peer = %node_id, "incoming connection established");
    Ok((conn, node_id))
}

async fn complete_handshake(
    connecting: quinn::Connecting,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<quinn::Connection, NetError> {
    // On timeout `connecting` is dropped, which closes the connection.
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(source)) => Err(NetError::Handshake { addr, source }),
        Err(_) => Err(NetError::HandshakeTimeout { addr, timeout }),
    }
}

/// Post-handshake checks: ALPN and peer identity. Closes the connection on failure.
fn check_established(conn: &quinn::Connection, addr: SocketAddr) -> Result<NodeId, NetError> {
    let fail = |err: NetError| {
        conn.close(
            quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION),
            b"handshake checks failed",
        );
        Err(err)
    };
    let protocol = conn
        .handshake_data()
        .and_then(|d| d.downcast::<HandshakeData>().ok())
        .and_then(|d| d.protocol);
    if protocol.as_deref() != Some(tls::ALPN) {
        return fail(NetError::Alpn {
            addr,
            found: protocol.map(|p| String::from_utf8_lossy(&p).into_owned()),
        });
    }
    match tls::peer_node_id(conn) {
        Ok(id) => Ok(id),
        Err(source) => fail(NetError::PeerIdentity {
            addr,
            source: Box::new(source),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::codec::{self, CodecError};
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    const TEST_TIMEOUT: Duration = Duration::from_secs(10);

    fn localhost() -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
    }

    struct Node {
        identity: NodeIdentity,
        endpoint: quinn::Endpoint,
        addr: SocketAddr,
    }

    fn node(limits: &TransportLimits) -> Node {
        let identity = NodeIdentity::generate().unwrap();
        let endpoint = make_endpoint(localhost(), &identity, limits).unwrap();
        let addr = endpoint.local_addr().unwrap();
        Node {
            identity,
            endpoint,
            addr,
        }
    }

    async fn bounded<F: std::future::Future>(f: F) -> F::Output {
        tokio::time::timeout(TEST_TIMEOUT, f)
            .await
            .expect("test timed out")
    }

    /// Accepts one connection on `server` (in a task) and returns its outcome.
    fn spawn_accept(
        server: &Node,
        limits: TransportLimits,
        open: usize,
    ) -> tokio::task::JoinHandle<Result<(quinn::Connection, NodeId), NetError>> {
        let endpoint = server.endpoint.clone();
        tokio::spawn(async move {
            let incoming = endpoint.accept().await.expect("endpoint closed");
            accept(incoming, &limits, open).await
        })
    }

    #[tokio::test]
    async fn nodes_authenticate_each_other_and_exchange_frames() {
        bounded(async {
            let limits = TransportLimits::default();
            let a = node(&limits);
            let b = node(&limits);
            let server = spawn_accept(&b, limits.clone(), 0);

            let (conn_a, seen_by_a) =
                connect(&a.endpoint, b.addr, Some(b.identity.node_id()), &limits)
                    .await
                    .unwrap();
            assert_eq!(seen_by_a, b.identity.node_id());
            let (conn_b, seen_by_b) = server.await.unwrap().unwrap();
            assert_eq!(seen_by_b, a.identity.node_id());
            assert_eq!(tls::peer_node_id(&conn_a).unwrap(), b.identity.node_id());
            assert_eq!(tls::peer_node_id(&conn_b).unwrap(), a.identity.node_id());

            let echo = tokio::spawn(async move {
                let (mut send, mut recv) = conn_b.accept_bi().await.unwrap();
                let f = codec::read_frame(&mut recv, MAX_MESSAGE_BYTES)
                    .await
                    .unwrap()
                    .unwrap();
                let mut reply = f.payload.clone();
                reply.reverse();
                codec::write_frame(&mut send, f.msg_type + 1, &reply, MAX_MESSAGE_BYTES)
                    .await
                    .unwrap();
                send.finish().unwrap();
                // Clean end of stream at a frame boundary.
                assert_eq!(
                    codec::read_frame(&mut recv, MAX_MESSAGE_BYTES)
                        .await
                        .unwrap(),
                    None
                );
                conn_b
            });

            let (mut send, mut recv) = conn_a.open_bi().await.unwrap();
            let payload: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
            codec::write_frame(&mut send, 7, &payload, MAX_MESSAGE_BYTES)
                .await
                .unwrap();
            send.finish().unwrap();
            let reply = codec::read_frame(&mut recv, MAX_MESSAGE_BYTES)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(reply.msg_type, 8);
            let mut expected = payload;
            expected.reverse();
            assert_eq!(reply.payload, expected);
            let _conn_b = echo.await.unwrap();

            // Dialing without pinning also works and reports the key.
            let server = spawn_accept(&b, limits.clone(), 1);
            let (_c, id) = connect(&a.endpoint, b.addr, None, &limits).await.unwrap();
            assert_eq!(id, b.identity.node_id());
            server.await.unwrap().unwrap();
        })
        .await;
    }

    #[tokio::test]
    async fn dialing_the_wrong_key_is_refused_naming_both() {
        bounded(async {
            let limits = TransportLimits::default();
            let a = node(&limits);
            let b = node(&limits);
            let wanted = NodeIdentity::generate().unwrap().node_id();
            let server = spawn_accept(&b, limits.clone(), 0);

            let err = connect(&a.endpoint, b.addr, Some(wanted), &limits)
                .await
                .unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, NetError::Handshake { .. }), "{msg}");
            assert!(msg.contains(&wanted.to_string()), "{msg}");
            assert!(msg.contains(&b.identity.node_id().to_string()), "{msg}");
            assert!(msg.contains(&b.addr.to_string()), "{msg}");
            // The server side fails too.
            assert!(server.await.unwrap().is_err());
        })
        .await;
    }

    #[tokio::test]
    async fn client_without_certificate_is_refused() {
        bounded(async {
            let limits = TransportLimits::default();
            let b = node(&limits);
            let server = spawn_accept(&b, limits.clone(), 0);

            let mut rustls_cfg = tls::client_builder().unwrap().with_no_client_auth();
            rustls_cfg.alpn_protocols = vec![tls::ALPN.to_vec()];
            let crypto = QuicClientConfig::try_from(Arc::new(rustls_cfg)).unwrap();
            let client = quinn::Endpoint::client(localhost()).unwrap();
            let connecting = client
                .connect_with(
                    quinn::ClientConfig::new(Arc::new(crypto)),
                    b.addr,
                    &tls::server_name_for(Some(b.identity.node_id())),
                )
                .unwrap();

            let server_err = server.await.unwrap().unwrap_err();
            assert!(
                matches!(server_err, NetError::Handshake { .. }),
                "{server_err}"
            );
            // The client either fails the handshake or sees the connection closed.
            if let Ok(conn) = connecting.await {
                let reason = conn.closed().await;
                assert!(
                    matches!(reason, quinn::ConnectionError::ConnectionClosed(_)),
                    "{reason:?}"
                );
            }
        })
        .await;
    }

    #[tokio::test]
    async fn accept_refuses_over_the_limit() {
        bounded(async {
            let limits = TransportLimits {
                max_incoming_connections: 2,
                ..TransportLimits::default()
            };
            let a = node(&limits);
            let b = node(&limits);
            let server = spawn_accept(&b, limits.clone(), 2);
            let client_err = connect(&a.endpoint, b.addr, None, &limits)
                .await
                .unwrap_err();
            assert!(
                matches!(client_err, NetError::Handshake { .. }),
                "{client_err}"
            );
            let err = server.await.unwrap().unwrap_err();
            assert!(
                matches!(
                    err,
                    NetError::TooManyConnections {
                        open: 2,
                        max: 2,
                        ..
                    }
                ),
                "{err}"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn handshake_timeout_applies() {
        bounded(async {
            let limits = TransportLimits {
                handshake_timeout: Duration::from_millis(300),
                ..TransportLimits::default()
            };
            let a = node(&limits);
            // A UDP socket that never answers.
            let silent = std::net::UdpSocket::bind(localhost()).unwrap();
            let addr = silent.local_addr().unwrap();
            let err = connect(&a.endpoint, addr, None, &limits).await.unwrap_err();
            assert!(matches!(err, NetError::HandshakeTimeout { .. }), "{err}");
            assert!(err.to_string().contains(&addr.to_string()));
        })
        .await;
    }

    /// A certified key claiming `victim`'s certificate but signing with
    /// `attacker`'s key: only a broken handshake-signature check accepts it.
    fn impersonating_key(
        victim: &NodeIdentity,
        attacker: &NodeIdentity,
    ) -> rustls::sign::SingleCertAndKey {
        let (victim_cert, _) = tls::certificate(victim).unwrap();
        let (_, attacker_key) = tls::certificate(attacker).unwrap();
        let signer = rustls::crypto::ring::sign::any_supported_type(&attacker_key).unwrap();
        rustls::sign::SingleCertAndKey::from(rustls::sign::CertifiedKey::new(
            vec![victim_cert],
            signer,
        ))
    }

    #[tokio::test]
    async fn client_presenting_someone_elses_certificate_is_refused() {
        bounded(async {
            let limits = TransportLimits::default();
            let b = node(&limits);
            let victim = NodeIdentity::generate().unwrap();
            let attacker = NodeIdentity::generate().unwrap();
            let server = spawn_accept(&b, limits.clone(), 0);

            let mut cfg = tls::client_builder()
                .unwrap()
                .with_client_cert_resolver(Arc::new(impersonating_key(&victim, &attacker)));
            cfg.alpn_protocols = vec![tls::ALPN.to_vec()];
            cfg.enable_sni = false;
            let crypto = QuicClientConfig::try_from(Arc::new(cfg)).unwrap();
            let client = quinn::Endpoint::client(localhost()).unwrap();
            let connecting = client
                .connect_with(
                    quinn::ClientConfig::new(Arc::new(crypto)),
                    b.addr,
                    &tls::server_name_for(None),
                )
                .unwrap();
            let err = server.await.unwrap().unwrap_err();
            assert!(matches!(err, NetError::Handshake { .. }), "{err}");
            if let Ok(conn) = connecting.await {
                conn.closed().await;
            }
        })
        .await;
    }

    #[tokio::test]
    async fn server_presenting_someone_elses_certificate_is_refused() {
        bounded(async {
            let limits = TransportLimits::default();
            let a = node(&limits);
            let victim = NodeIdentity::generate().unwrap();
            let attacker = NodeIdentity::generate().unwrap();

            let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_client_cert_verifier(Arc::new(tls::PeerVerifier::new().unwrap()))
            .with_cert_resolver(Arc::new(impersonating_key(&victim, &attacker)));
            cfg.alpn_protocols = vec![tls::ALPN.to_vec()];
            let crypto = QuicServerConfig::try_from(Arc::new(cfg)).unwrap();
            let evil = quinn::Endpoint::server(
                quinn::ServerConfig::with_crypto(Arc::new(crypto)),
                localhost(),
            )
            .unwrap();
            let evil_addr = evil.local_addr().unwrap();
            let evil_task = tokio::spawn(async move {
                while let Some(incoming) = evil.accept().await {
                    if let Ok(connecting) = incoming.accept() {
                        let _ = connecting.await;
                    }
                }
            });

            let err = connect(&a.endpoint, evil_addr, Some(victim.node_id()), &limits)
                .await
                .unwrap_err();
            assert!(matches!(err, NetError::Handshake { .. }), "{err}");
            let err = connect(&a.endpoint, evil_addr, None, &limits)
                .await
                .unwrap_err();
            assert!(matches!(err, NetError::Handshake { .. }), "{err}");
            evil_task.abort();
        })
        .await;
    }

    /// Connects `a` to `b`, sends `raw` on a bi stream and returns what
    /// `read_frame` on `b`'s side says.
    async fn read_raw(raw: Vec<u8>, max: usize) -> Result<Option<codec::Frame>, CodecError> {
        let limits = TransportLimits::default();
        let a = node(&limits);
        let b = node(&limits);
        let server = spawn_accept(&b, limits.clone(), 0);
        let (conn_a, _) = connect(&a.endpoint, b.addr, None, &limits).await.unwrap();
        let (conn_b, _) = server.await.unwrap().unwrap();
        let (mut send, _recv) = conn_a.open_bi().await.unwrap();
        send.write_all(&raw).await.unwrap();
        send.finish().unwrap();
        let (_send_b, mut recv_b) = conn_b.accept_bi().await.unwrap();
        codec::read_frame(&mut recv_b, max).await
    }

    #[tokio::test]
    async fn read_frame_rejects_garbage_and_oversize() {
        bounded(async {
            // Announces 4 GiB - 1: rejected from the header alone.
            let err = read_raw(vec![0xff, 0xff, 0xff, 0xff, 1, 1, 2, 3], MAX_MESSAGE_BYTES)
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    CodecError::Oversize {
                        len: 0xffff_ffff,
                        ..
                    }
                ),
                "{err}"
            );
            assert!(err.is_protocol_violation());

            // Just over a small limit.
            let mut raw = 1025u32.to_be_bytes().to_vec();
            raw.extend([1, 1]);
            raw.extend(vec![0u8; 1023]);
            let err = read_raw(raw, 1024).await.unwrap_err();
            assert!(
                matches!(
                    err,
                    CodecError::Oversize {
                        len: 1025,
                        max: 1024
                    }
                ),
                "{err}"
            );

            // Zero length.
            let err = read_raw(vec![0, 0, 0, 0, 1, 1], MAX_MESSAGE_BYTES)
                .await
                .unwrap_err();
            assert_eq!(err, CodecError::TooShort { len: 0 });

            // Unknown wire version.
            let err = read_raw(vec![0, 0, 0, 3, 9, 1, 0], MAX_MESSAGE_BYTES)
                .await
                .unwrap_err();
            assert_eq!(err, CodecError::UnknownVersion { found: 9 });

            // Announced payload never arrives (stream finished early).
            let err = read_raw(vec![0, 0, 0, 100, 1, 1, 0, 0], MAX_MESSAGE_BYTES)
                .await
                .unwrap_err();
            assert!(matches!(err, CodecError::Truncated { .. }), "{err}");

            // Truncated length prefix.
            let err = read_raw(vec![0, 0], MAX_MESSAGE_BYTES).await.unwrap_err();
            assert!(
                matches!(err, CodecError::Truncated { received: 2, .. }),
                "{err}"
            );
        })
        .await;
    }

    #[test]
    fn limits_validation() {
        assert!(TransportLimits::default().validate().is_ok());
        let bad = [
            TransportLimits {
                connection_receive_window: 0,
                ..Default::default()
            },
            TransportLimits {
                stream_receive_window: 16 * 1024 * 1024,
                ..Default::default()
            },
            TransportLimits {
                keep_alive: Some(Duration::from_secs(60)),
                ..Default::default()
            },
            TransportLimits {
                handshake_timeout: Duration::ZERO,
                ..Default::default()
            },
            TransportLimits {
                max_message_bytes: 1,
                ..Default::default()
            },
        ];
        for limits in bad {
            let err = limits.validate().unwrap_err();
            assert!(matches!(err, NetError::InvalidLimit { .. }), "{err}");
        }
    }
}

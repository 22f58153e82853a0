//! Mutually authenticated TLS 1.3 for QUIC, keyed by [`NodeId`].
//!
//! Every node presents a self-signed X.509 certificate whose
//! SubjectPublicKeyInfo is its ed25519 identity key (see
//! [`super::identity`]). There is no CA: both sides require exactly one
//! certificate from the peer, check that it is well-formed, self-signed with
//! ed25519 and within its validity period, and then verify the TLS 1.3
//! `CertificateVerify` signature with that key, which proves the peer holds
//! the private key of the [`NodeId`] it claims. TLS 1.2 is never negotiated.
//! Design follows rust-libp2p's `transports/tls/src/verifier.rs`.
//!
//! # Pinning the expected peer when dialing
//!
//! quinn passes a per-connection *server name* to the client-side verifier,
//! so the expected [`NodeId`] travels in it: [`server_name_for`] turns
//! `Some(id)` into `<32 hex>.<32 hex>.modnode` and `None` into `modnode`.
//! SNI is disabled, so the name never goes on the wire. The verifier rejects
//! any other key with [`TlsError::UnexpectedPeer`] (naming both keys) and any
//! server name it did not produce with [`TlsError::UnsupportedServerName`].
//!
//! Session resumption and 0-RTT are disabled so that every connection runs
//! the full certificate verification.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, SignatureVerificationAlgorithm,
    UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, PeerIncompatible,
    PeerMisbehaved, SignatureScheme,
};

use super::identity::{NODE_ID_LEN, NodeId, NodeIdentity};

/// ALPN protocol identifier of this protocol version.
pub const ALPN: &[u8] = b"modnode/1";

/// Server name used when dialing without pinning a [`NodeId`].
pub const ANY_PEER_SERVER_NAME: &str = "modnode";

/// DER prefix of an RFC 8410 ed25519 SubjectPublicKeyInfo:
/// `SEQUENCE(42) { SEQUENCE(5) { OID 1.3.101.112 } BIT STRING(33) { 0 unused bits, key } }`.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Errors building TLS configurations or verifying a peer's certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The local self-signed certificate could not be created from the node key.
    #[error("failed to create the TLS certificate for local node {node_id}: {source}")]
    Certificate {
        /// The local node.
        node_id: NodeId,
        /// rcgen's error.
        source: rcgen::Error,
    },
    /// rustls rejected the local configuration.
    #[error("invalid TLS configuration for local node {node_id}: {source}")]
    Config {
        /// The local node.
        node_id: NodeId,
        /// rustls' error.
        source: rustls::Error,
    },
    /// The crypto provider lacks something this module needs (a build problem).
    #[error("TLS crypto provider unusable: {0}")]
    Provider(String),
    /// The peer presented more than one certificate.
    #[error("peer presented {count} certificates; exactly one self-signed certificate is required")]
    UnexpectedChain {
        /// How many certificates were presented.
        count: usize,
    },
    /// The peer certificate is not valid X.509 DER.
    #[error("peer certificate is malformed: {0}")]
    Malformed(webpki::Error),
    /// The peer certificate is not a valid ed25519 self-signed certificate
    /// (bad self-signature, expired, a CA certificate, unknown critical extension, ...).
    #[error("peer certificate is not a valid self-signed ed25519 certificate: {0}")]
    NotSelfSigned(webpki::Error),
    /// The certificate's public key is not an ed25519 key.
    #[error("peer certificate key is not ed25519 (SubjectPublicKeyInfo {spki_hex})")]
    NotEd25519 {
        /// Hex of the offending SubjectPublicKeyInfo (truncated to 64 bytes).
        spki_hex: String,
    },
    /// The dialed peer's key differs from the expected one.
    #[error("peer identity mismatch: expected node {expected}, but the peer is node {actual}")]
    UnexpectedPeer {
        /// The key the dialer pinned.
        expected: NodeId,
        /// The key the peer proved possession of.
        actual: NodeId,
    },
    /// The client-side verifier was given a server name not made by [`server_name_for`].
    #[error(
        "unsupported TLS server name {name:?}: dial with server_name_for(..) / endpoint::connect"
    )]
    UnsupportedServerName {
        /// The name that was passed to the dialer.
        name: String,
    },
    /// The connection carries no peer certificate (handshake not completed).
    #[error("connection to {addr} has no peer certificate (handshake not complete?)")]
    NoPeerIdentity {
        /// The remote address.
        addr: SocketAddr,
    },
    /// The certificate of an established connection could not be decoded.
    #[error("certificate of peer {addr} is invalid: {source}")]
    PeerCertificate {
        /// The remote address.
        addr: SocketAddr,
        /// What is wrong with the certificate.
        source: Box<TlsError>,
    },
}

/// The server name that makes the client verifier require `expected` (or
/// accept any valid node when `None`). See the module docs.
pub fn server_name_for(expected: Option<NodeId>) -> String {
    match expected {
        None => ANY_PEER_SERVER_NAME.to_owned(),
        Some(id) => {
            let hex = id.to_string();
            let (a, b) = hex.split_at(NODE_ID_LEN);
            format!("{a}.{b}.{ANY_PEER_SERVER_NAME}")
        }
    }
}

/// Inverse of [`server_name_for`]; fails closed on anything else.
fn expected_from_server_name(name: &ServerName<'_>) -> Result<Option<NodeId>, TlsError> {
    let unsupported = || TlsError::UnsupportedServerName {
        name: name.to_str().into_owned(),
    };
    let ServerName::DnsName(dns) = name else {
        return Err(unsupported());
    };
    let dns = dns.as_ref();
    if dns == ANY_PEER_SERVER_NAME {
        return Ok(None);
    }
    let mut labels = dns.split('.');
    match (labels.next(), labels.next(), labels.next(), labels.next()) {
        (Some(a), Some(b), Some(ANY_PEER_SERVER_NAME), None)
            if a.len() == NODE_ID_LEN && b.len() == NODE_ID_LEN =>
        {
            format!("{a}{b}")
                .parse::<NodeId>()
                .map(Some)
                .map_err(|_| unsupported())
        }
        _ => Err(unsupported()),
    }
}

/// Extracts the [`NodeId`] from a DER SubjectPublicKeyInfo, requiring ed25519.
fn node_id_from_spki(spki: &[u8]) -> Result<NodeId, TlsError> {
    match spki.strip_prefix(&ED25519_SPKI_PREFIX[..]) {
        Some(key) if key.len() == NODE_ID_LEN => {
            NodeId::try_from(key).map_err(|_| not_ed25519(spki))
        }
        _ => Err(not_ed25519(spki)),
    }
}

fn not_ed25519(spki: &[u8]) -> TlsError {
    TlsError::NotEd25519 {
        spki_hex: hex::encode(spki.get(..64).unwrap_or(spki)),
    }
}

/// Parses a certificate and returns the ed25519 [`NodeId`] in its
/// SubjectPublicKeyInfo. Does not check signatures.
pub fn node_id_from_certificate(cert: &CertificateDer<'_>) -> Result<NodeId, TlsError> {
    let ee = webpki::EndEntityCert::try_from(cert).map_err(TlsError::Malformed)?;
    node_id_from_spki(ee.subject_public_key_info().as_ref())
}

/// The remote node's [`NodeId`], taken from the certificate it presented
/// during the (already verified) handshake.
pub fn peer_node_id(conn: &quinn::Connection) -> Result<NodeId, TlsError> {
    let addr = conn.remote_address();
    let certs = conn
        .peer_identity()
        .and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or(TlsError::NoPeerIdentity { addr })?;
    let wrap = |source| TlsError::PeerCertificate {
        addr,
        source: Box::new(source),
    };
    match certs.as_slice() {
        [cert] => node_id_from_certificate(cert).map_err(wrap),
        [] => Err(TlsError::NoPeerIdentity { addr }),
        more => Err(wrap(TlsError::UnexpectedChain { count: more.len() })),
    }
}

/// rustls server configuration: TLS 1.3 only, presents this node's
/// certificate, requires and verifies a client certificate, ALPN
/// `modnode/1`, no session resumption.
pub fn server_config(identity: &NodeIdentity) -> Result<rustls::ServerConfig, TlsError> {
    let node_id = identity.node_id();
    let config_err = |source| TlsError::Config { node_id, source };
    let (cert, key) = certificate(identity)?;
    let verifier = Arc::new(PeerVerifier::new()?);
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(config_err)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)
        .map_err(config_err)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.max_early_data_size = 0;
    config.send_tls13_tickets = 0;
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    Ok(config)
}

/// rustls client configuration: TLS 1.3 only, presents this node's
/// certificate, verifies the server's certificate (pinning the [`NodeId`]
/// encoded in the server name, see [`server_name_for`]), ALPN `modnode/1`,
/// no SNI, no session resumption, no 0-RTT.
pub fn client_config(identity: &NodeIdentity) -> Result<rustls::ClientConfig, TlsError> {
    let node_id = identity.node_id();
    let config_err = |source| TlsError::Config { node_id, source };
    let (cert, key) = certificate(identity)?;
    let mut config = client_builder()?
        .with_client_auth_cert(vec![cert], key)
        .map_err(config_err)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.enable_sni = false;
    config.enable_early_data = false;
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

/// Client builder up to the point of choosing client authentication (with
/// our server verifier installed).
pub(super) fn client_builder()
-> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>, TlsError> {
    let verifier = Arc::new(PeerVerifier::new()?);
    Ok(
        rustls::ClientConfig::builder_with_provider(Arc::new(provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Provider(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier),
    )
}

fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The node's self-signed certificate and its private key in rustls form.
pub(super) fn certificate(
    identity: &NodeIdentity,
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), TlsError> {
    let node_id = identity.node_id();
    let cert_err = |source| TlsError::Certificate { node_id, source };
    let key_pair = identity.key_pair().map_err(cert_err)?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "modnode node");
    let cert = params.self_signed(&key_pair).map_err(cert_err)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.pkcs8_der().to_vec()));
    Ok((cert.der().clone(), key))
}

/// Verifies peers' self-signed ed25519 certificates; used on both sides.
#[derive(Debug)]
pub(super) struct PeerVerifier {
    /// The ring provider's signature algorithms (for the handshake signature).
    algorithms: WebPkiSupportedAlgorithms,
    /// The ring ed25519 algorithm only (for the certificate self-signature).
    ed25519: &'static [&'static dyn SignatureVerificationAlgorithm],
}

impl PeerVerifier {
    pub(super) fn new() -> Result<Self, TlsError> {
        let algorithms = provider().signature_verification_algorithms;
        let ed25519 = algorithms
            .mapping
            .iter()
            .find(|(scheme, _)| *scheme == SignatureScheme::ED25519)
            .map(|(_, algs)| *algs)
            .ok_or_else(|| TlsError::Provider("ring provider lacks ed25519".into()))?;
        Ok(Self {
            algorithms,
            ed25519,
        })
    }

    /// Checks (a)+(b): exactly one well-formed, valid, ed25519 self-signed
    /// certificate; returns its key.
    fn verify_certificate(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        usage: webpki::KeyUsage,
    ) -> Result<NodeId, TlsError> {
        if !intermediates.is_empty() {
            return Err(TlsError::UnexpectedChain {
                count: std::iter::once(end_entity).chain(intermediates).count(),
            });
        }
        let ee = webpki::EndEntityCert::try_from(end_entity).map_err(TlsError::Malformed)?;
        let node_id = node_id_from_spki(ee.subject_public_key_info().as_ref())?;
        // Self-signed check: the certificate is its own (only) trust anchor,
        // so path building succeeds only if issuer == subject and the
        // signature verifies under the certificate's own ed25519 key. webpki
        // also checks the validity period, basicConstraints (must not be a
        // CA), EKU (if present) and rejects unknown critical extensions.
        let anchor = webpki::anchor_from_trusted_cert(end_entity).map_err(TlsError::Malformed)?;
        ee.verify_for_usage(self.ed25519, &[anchor], &[], now, usage, None, None)
            .map_err(TlsError::NotSelfSigned)?;
        Ok(node_id)
    }

    /// (c): the TLS 1.3 CertificateVerify signature, which must be ed25519.
    fn verify_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if dss.scheme != SignatureScheme::ED25519 {
            return Err(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
        }
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }
}

/// rustls renders `CertificateError::Other` with `{:?}`; this wrapper makes
/// that print our `Display` text (which names the keys involved).
struct Rejection(TlsError);

impl std::fmt::Debug for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Rejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

fn to_rustls(err: TlsError) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(Rejection(
        err,
    )))))
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let expected = expected_from_server_name(server_name).map_err(to_rustls)?;
        let actual = self
            .verify_certificate(
                end_entity,
                intermediates,
                now,
                webpki::KeyUsage::server_auth(),
            )
            .map_err(to_rustls)?;
        match expected {
            Some(expected) if expected != actual => {
                Err(to_rustls(TlsError::UnexpectedPeer { expected, actual }))
            }
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(PeerIncompatible::Tls12NotOffered.into())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verify_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

impl ClientCertVerifier for PeerVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verify_certificate(
            end_entity,
            intermediates,
            now,
            webpki::KeyUsage::client_auth(),
        )
        .map_err(to_rustls)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(PeerIncompatible::Tls12NotOffered.into())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verify_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn now() -> UnixTime {
        UnixTime::now()
    }

    /// `DigitallySignedStruct::new` is crate-private; decode one from its
    /// wire form (u16 scheme, u16 length, signature) instead.
    fn dss(scheme: SignatureScheme, sig: &[u8]) -> DigitallySignedStruct {
        use rustls::internal::msgs::codec::Codec;
        let mut wire = u16::from(scheme).to_be_bytes().to_vec();
        wire.extend(u16::try_from(sig.len()).unwrap().to_be_bytes());
        wire.extend(sig);
        DigitallySignedStruct::read_bytes(&wire).unwrap()
    }

    fn cert_of(identity: &NodeIdentity) -> CertificateDer<'static> {
        certificate(identity).unwrap().0
    }

    #[test]
    fn own_certificate_verifies_and_yields_node_id() {
        let id = NodeIdentity::generate().unwrap();
        let cert = cert_of(&id);
        assert_eq!(node_id_from_certificate(&cert).unwrap(), id.node_id());
        let v = PeerVerifier::new().unwrap();
        for usage in [
            webpki::KeyUsage::server_auth(),
            webpki::KeyUsage::client_auth(),
        ] {
            assert_eq!(
                v.verify_certificate(&cert, &[], now(), usage).unwrap(),
                id.node_id()
            );
        }
        // Pinned server name: right key accepted, wrong key rejected naming both.
        let name = ServerName::try_from(server_name_for(Some(id.node_id()))).unwrap();
        assert!(v.verify_server_cert(&cert, &[], &name, &[], now()).is_ok());
        let other = NodeIdentity::generate().unwrap();
        let name = ServerName::try_from(server_name_for(Some(other.node_id()))).unwrap();
        let err = v
            .verify_server_cert(&cert, &[], &name, &[], now())
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&id.node_id().to_string()), "{msg}");
        assert!(msg.contains(&other.node_id().to_string()), "{msg}");
    }

    #[test]
    fn server_name_roundtrip_and_fail_closed() {
        let id = NodeIdentity::generate().unwrap().node_id();
        for expected in [None, Some(id)] {
            let name = ServerName::try_from(server_name_for(expected)).unwrap();
            assert_eq!(expected_from_server_name(&name).unwrap(), expected);
        }
        for bad in ["example.com", "a.b.modnode", "localhost"] {
            let name = ServerName::try_from(bad).unwrap();
            assert!(expected_from_server_name(&name).is_err(), "{bad}");
        }
        let ip = ServerName::try_from("127.0.0.1").unwrap();
        assert!(expected_from_server_name(&ip).is_err());
    }

    #[test]
    fn rejects_chains_non_ed25519_and_non_self_signed() {
        let v = PeerVerifier::new().unwrap();
        let usage = webpki::KeyUsage::server_auth();
        let id = NodeIdentity::generate().unwrap();
        let cert = cert_of(&id);

        // More than one certificate.
        let err = v
            .verify_certificate(&cert, std::slice::from_ref(&cert), now(), usage)
            .unwrap_err();
        assert!(
            matches!(err, TlsError::UnexpectedChain { count: 2 }),
            "{err}"
        );

        // Garbage.
        let garbage = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
        assert!(matches!(
            v.verify_certificate(&garbage, &[], now(), usage),
            Err(TlsError::Malformed(_))
        ));

        // ECDSA self-signed certificate.
        let p256 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let ec_cert = CertificateParams::default().self_signed(&p256).unwrap();
        assert!(matches!(
            v.verify_certificate(ec_cert.der(), &[], now(), usage),
            Err(TlsError::NotEd25519 { .. })
        ));

        // ed25519 key, same subject/issuer name, but signed by a different key.
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "modnode node");
        let issuer_key = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let issuer = rcgen::Issuer::from_params(&params, &issuer_key);
        let subject_key = id.key_pair().unwrap();
        let forged = params.signed_by(&subject_key, &issuer).unwrap();
        let err = v
            .verify_certificate(forged.der(), &[], now(), usage)
            .unwrap_err();
        assert!(matches!(err, TlsError::NotSelfSigned(_)), "{err}");

        // Expired certificate.
        let mut params = CertificateParams::default();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let expired = params.self_signed(&subject_key).unwrap();
        let err = v
            .verify_certificate(expired.der(), &[], now(), usage)
            .unwrap_err();
        assert!(matches!(err, TlsError::NotSelfSigned(_)), "{err}");
    }

    #[test]
    fn handshake_signatures_are_really_verified() {
        let v = PeerVerifier::new().unwrap();
        let id = NodeIdentity::generate().unwrap();
        let cert = cert_of(&id);
        let key = id.key_pair().unwrap();
        let msg = b"tls13 transcript stand-in";
        let sig = rcgen::SigningKey::sign(&key, msg).unwrap();

        let ok = dss(SignatureScheme::ED25519, &sig);
        assert!(ServerCertVerifier::verify_tls13_signature(&v, msg, &cert, &ok).is_ok());
        assert!(ClientCertVerifier::verify_tls13_signature(&v, msg, &cert, &ok).is_ok());
        assert!(ServerCertVerifier::verify_tls13_signature(&v, b"other", &cert, &ok).is_err());

        let mut bad_sig = sig.clone();
        bad_sig[0] ^= 1;
        let bad = dss(SignatureScheme::ED25519, &bad_sig);
        assert!(ServerCertVerifier::verify_tls13_signature(&v, msg, &cert, &bad).is_err());

        // Signature by another key against this certificate.
        let other = NodeIdentity::generate().unwrap().key_pair().unwrap();
        let foreign = dss(
            SignatureScheme::ED25519,
            &rcgen::SigningKey::sign(&other, msg).unwrap(),
        );
        assert!(ClientCertVerifier::verify_tls13_signature(&v, msg, &cert, &foreign).is_err());

        // Other schemes and TLS 1.2 are refused.
        let ecdsa = dss(SignatureScheme::ECDSA_NISTP256_SHA256, &sig);
        assert!(ServerCertVerifier::verify_tls13_signature(&v, msg, &cert, &ecdsa).is_err());
        assert!(ServerCertVerifier::verify_tls12_signature(&v, msg, &cert, &ok).is_err());
        assert!(ClientCertVerifier::verify_tls12_signature(&v, msg, &cert, &ok).is_err());
    }

    #[test]
    fn configs_build() {
        let id = NodeIdentity::generate().unwrap();
        let s = server_config(&id).unwrap();
        let c = client_config(&id).unwrap();
        assert_eq!(s.alpn_protocols, vec![ALPN.to_vec()]);
        assert_eq!(c.alpn_protocols, vec![ALPN.to_vec()]);
        assert!(!c.enable_sni);
        assert!(quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(s)).is_ok());
        assert!(quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(c)).is_ok());
    }
}

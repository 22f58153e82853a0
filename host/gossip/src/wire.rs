//! Wire messages between gossip engines and their compact, versioned binary encoding.
//!
//! Layout (all multi-byte integers are unsigned LEB128 varints of at most five bytes,
//! minimally encoded):
//!
//! ```text
//! frame    = version:u8 (= 1) body
//! body     = 0x00 id:[32] kind:u8 hops:varint len:varint payload:[len]      ; Push
//!          | 0x01 count:varint { id:[32] kind:u8 size:varint }*count       ; Announce
//!          | 0x02 count:varint { id:[32] }*count                           ; Request
//!          | 0x03 count:varint { len:varint body:[len] }*count              ; Batch (no nesting)
//!          | 0x04 count:varint { id:[32] kind:u8 op:u8 }*count             ; Link (op 0 PRUNE, 1 GRAFT)
//!          | 0x05 id:[32] kind:u8 hops:varint origin:[8] len:varint payload:[len] ; Push with origin
//!          | 0x06 count:varint { origin:[8] route:varint }*count         ; Routes
//! ```
//!
//! `Link` frames (tag 4) are newer than the others under the same version byte: an engine
//! older than them refuses the tag, so they are sent only by policies that ask for them
//! ([`crate::policy::LinkControl`]). So are tags 5 and 6, sent only by engines that route
//! ([`crate::EngineConfig::routing`]): a push that names the node that created the message
//! (`origin`, little endian), and a distance-vector advertisement — per origin, the sender's
//! distance to it (`route` = 33 + microseconds), or `w` < 32 "my route to it runs through you,
//! and about 2^`w` nodes' routes run through me", or 32 "I have no route to it".
//!
//! Decoding checks every length against the input and the limits below, rejects trailing
//! bytes, and never panics.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::error::WireError;
use crate::policy::MessageKind;

/// Version byte written in front of every frame.
pub const WIRE_VERSION: u8 = 1;
/// Largest payload a push may carry (16 MiB).
pub const MAX_PAYLOAD: u32 = 16 * 1024 * 1024;
/// Most items an announce, request or batch frame may carry.
pub const MAX_ITEMS: u32 = 4096;

const TAG_PUSH: u8 = 0;
const TAG_ANNOUNCE: u8 = 1;
const TAG_REQUEST: u8 = 2;
const TAG_BATCH: u8 = 3;
const TAG_LINK: u8 = 4;
const TAG_PUSH_FROM: u8 = 5;
const TAG_ROUTES: u8 = 6;

/// Longest distance a route may advertise, microseconds (an hour).
pub const MAX_ROUTE_US: u32 = 3_600_000_000;
/// Largest subtree size class a "through you" route may carry.
pub const MAX_SUBTREE_CLASS: u8 = 31;
const UNREACHABLE_CODE: u32 = 32;
const DISTANCE_BASE: u32 = 33;

/// Shared, immutable message payload (cloning is cheap).
pub type Payload = Arc<[u8]>;

/// Identifier of a message: the SHA-256 of its payload.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(pub [u8; 32]);

impl MessageId {
    /// The id of `payload`.
    pub fn of(payload: &[u8]) -> MessageId {
        MessageId(Sha256::digest(payload).into())
    }

    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageId({self})")
    }
}

impl fmt::Display for MessageId {
    /// Prints the first eight bytes in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// One entry of an [`Frame::Announce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceItem {
    /// Id of the announced message.
    pub id: MessageId,
    /// Its kind.
    pub kind: MessageKind,
    /// Its payload size in bytes.
    pub size: u32,
}

/// What a [`LinkItem`] asks of the link it travels on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkOp {
    /// "Your push of this message was a duplicate here: stop pushing to me (announce)."
    Prune,
    /// "This message you announced did not arrive in time: push to me again."
    Graft,
}

impl LinkOp {
    fn code(self) -> u8 {
        match self {
            LinkOp::Prune => 0,
            LinkOp::Graft => 1,
        }
    }

    fn from_code(code: u8) -> Option<LinkOp> {
        match code {
            0 => Some(LinkOp::Prune),
            1 => Some(LinkOp::Graft),
            _ => None,
        }
    }
}

/// One entry of a [`Frame::Link`]: PRUNE or GRAFT, naming the message that prompted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkItem {
    /// The message that prompted it.
    pub id: MessageId,
    /// Its kind.
    pub kind: MessageKind,
    /// Prune or graft.
    pub op: LinkOp,
}

/// What a [`RouteItem`] says of the sender's route to an origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteAdvert {
    /// "I reach it in this many microseconds" (at most [`MAX_ROUTE_US`]).
    Distance(u32),
    /// "My route to it runs through you" (poisoned reverse): the receiver is the sender's
    /// parent on that origin's tree; and the sender's subtree on it holds about 2^`n` nodes
    /// (`n` < 32: the size class of its subtree, itself included).
    ViaYou(u8),
    /// "I have no route to it."
    Unreachable,
}

impl RouteAdvert {
    fn code(self) -> u32 {
        match self {
            RouteAdvert::ViaYou(class) => u32::from(class.min(MAX_SUBTREE_CLASS)),
            RouteAdvert::Unreachable => UNREACHABLE_CODE,
            RouteAdvert::Distance(us) => us.min(MAX_ROUTE_US).saturating_add(DISTANCE_BASE),
        }
    }

    fn from_code(code: u32) -> Result<RouteAdvert, WireError> {
        match code {
            c if c < UNREACHABLE_CODE => Ok(RouteAdvert::ViaYou(u8::try_from(c).unwrap_or(0))),
            UNREACHABLE_CODE => Ok(RouteAdvert::Unreachable),
            c => {
                let us = c.saturating_sub(DISTANCE_BASE);
                if us > MAX_ROUTE_US {
                    return Err(WireError::TooLarge {
                        what: "route distance",
                        value: u64::from(us),
                        limit: u64::from(MAX_ROUTE_US),
                    });
                }
                Ok(RouteAdvert::Distance(us))
            }
        }
    }
}

/// One entry of a [`Frame::Routes`]: the sender's route to one origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteItem {
    /// The origin: a node's routing id ([`crate::EngineConfig::routing`]).
    pub origin: u64,
    /// The sender's route to it.
    pub route: RouteAdvert,
}

/// A wire message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A full message.
    Push {
        /// Message id (SHA-256 of `payload`).
        id: MessageId,
        /// Message kind.
        kind: MessageKind,
        /// Hops travelled before this transmission (0 from the creator).
        hops: u32,
        /// Routing id of the node that created the message, when the sender routes.
        origin: Option<u64>,
        /// The message.
        payload: Payload,
    },
    /// "I have these messages."
    Announce {
        /// The announced messages.
        items: Vec<AnnounceItem>,
    },
    /// "Send me these messages."
    Request {
        /// The wanted ids.
        ids: Vec<MessageId>,
    },
    /// Spreading-tree control (PlumTree's PRUNE / GRAFT).
    Link {
        /// The control items.
        items: Vec<LinkItem>,
    },
    /// Distance-vector routes: the sender's route to each origin named.
    Routes {
        /// The routes.
        items: Vec<RouteItem>,
    },
    /// Several non-batch frames sent as one transmission.
    Batch {
        /// The inner frames (none of them a batch).
        frames: Vec<Frame>,
    },
}

impl Frame {
    /// Block payloads this frame carries (a batch counts its inner pushes): how redundancy is
    /// measured, by the simulator and by real drivers alike.
    pub fn block_pushes(&self) -> u64 {
        match self {
            Frame::Push { kind, .. } => u64::from(*kind == MessageKind::Block),
            Frame::Batch { frames } => frames.iter().map(Frame::block_pushes).sum(),
            Frame::Announce { .. }
            | Frame::Request { .. }
            | Frame::Link { .. }
            | Frame::Routes { .. } => 0,
        }
    }
}

impl Frame {
    /// Encodes the frame, version byte included.
    ///
    /// Fails if the frame breaks a protocol limit (payload too large, too many or no items,
    /// nested batch): such a frame would not decode.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(WIRE_VERSION);
        self.encode_body(&mut out, false)?;
        Ok(out)
    }

    /// Length of [`Frame::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        1 + self.body_len()
    }

    /// Decodes one frame; the whole input must be consumed.
    pub fn decode(bytes: &[u8]) -> Result<Frame, WireError> {
        let mut r = Reader { buf: bytes };
        let version = r.u8()?;
        if version != WIRE_VERSION {
            return Err(WireError::UnsupportedVersion(version));
        }
        let frame = decode_body(&mut r, false)?;
        if !r.buf.is_empty() {
            return Err(WireError::TrailingBytes(r.buf.len()));
        }
        Ok(frame)
    }

    fn body_len(&self) -> usize {
        match self {
            Frame::Push {
                hops,
                payload,
                origin,
                ..
            } => {
                let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
                let origin = if origin.is_some() { 8 } else { 0 };
                1 + 32 + 1 + varint_len(*hops) + origin + varint_len(len) + payload.len()
            }
            Frame::Announce { items } => {
                1 + varint_len(count_u32(items.len()))
                    + items.iter().map(|i| 33 + varint_len(i.size)).sum::<usize>()
            }
            Frame::Request { ids } => 1 + varint_len(count_u32(ids.len())) + 32 * ids.len(),
            Frame::Link { items } => 1 + varint_len(count_u32(items.len())) + 34 * items.len(),
            Frame::Routes { items } => {
                1 + varint_len(count_u32(items.len()))
                    + items
                        .iter()
                        .map(|i| 8 + varint_len(i.route.code()))
                        .sum::<usize>()
            }
            Frame::Batch { frames } => {
                1 + varint_len(count_u32(frames.len()))
                    + frames
                        .iter()
                        .map(|f| {
                            let len = f.body_len();
                            varint_len(u32::try_from(len).unwrap_or(u32::MAX)) + len
                        })
                        .sum::<usize>()
            }
        }
    }

    fn encode_body(&self, out: &mut Vec<u8>, in_batch: bool) -> Result<(), WireError> {
        match self {
            Frame::Push {
                id,
                kind,
                hops,
                origin,
                payload,
            } => {
                let len = check_limit("payload length", payload.len(), MAX_PAYLOAD)?;
                out.push(if origin.is_some() {
                    TAG_PUSH_FROM
                } else {
                    TAG_PUSH
                });
                out.extend_from_slice(&id.0);
                out.push(kind.code());
                put_varint(out, *hops);
                if let Some(origin) = origin {
                    out.extend_from_slice(&origin.to_le_bytes());
                }
                put_varint(out, len);
                out.extend_from_slice(payload);
            }
            Frame::Announce { items } => {
                let count = check_count("announce", items.len())?;
                out.push(TAG_ANNOUNCE);
                put_varint(out, count);
                for item in items {
                    out.extend_from_slice(&item.id.0);
                    out.push(item.kind.code());
                    put_varint(out, item.size);
                }
            }
            Frame::Request { ids } => {
                let count = check_count("request", ids.len())?;
                out.push(TAG_REQUEST);
                put_varint(out, count);
                for id in ids {
                    out.extend_from_slice(&id.0);
                }
            }
            Frame::Link { items } => {
                let count = check_count("link", items.len())?;
                out.push(TAG_LINK);
                put_varint(out, count);
                for item in items {
                    out.extend_from_slice(&item.id.0);
                    out.push(item.kind.code());
                    out.push(item.op.code());
                }
            }
            Frame::Routes { items } => {
                let count = check_count("routes", items.len())?;
                out.push(TAG_ROUTES);
                put_varint(out, count);
                for item in items {
                    out.extend_from_slice(&item.origin.to_le_bytes());
                    put_varint(out, item.route.code());
                }
            }
            Frame::Batch { frames } => {
                if in_batch {
                    return Err(WireError::NestedBatch);
                }
                let count = check_count("batch", frames.len())?;
                out.push(TAG_BATCH);
                put_varint(out, count);
                for frame in frames {
                    let len = check_limit("batch entry length", frame.body_len(), u32::MAX)?;
                    put_varint(out, len);
                    frame.encode_body(out, true)?;
                }
            }
        }
        Ok(())
    }
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn check_limit(what: &'static str, value: usize, limit: u32) -> Result<u32, WireError> {
    match u32::try_from(value) {
        Ok(v) if v <= limit => Ok(v),
        _ => Err(WireError::TooLarge {
            what,
            value: value as u64,
            limit: u64::from(limit),
        }),
    }
}

fn check_count(what: &'static str, n: usize) -> Result<u32, WireError> {
    if n == 0 {
        return Err(WireError::Empty(what));
    }
    check_limit("item count", n, MAX_ITEMS)
}

fn varint_len(v: u32) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0x0fff_ffff => 4,
        _ => 5,
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        let (&b, tail) = self.buf.split_first().ok_or(WireError::Truncated)?;
        self.buf = tail;
        Ok(b)
    }

    fn id(&mut self) -> Result<MessageId, WireError> {
        let mut id = [0u8; 32];
        id.copy_from_slice(self.take(32)?);
        Ok(MessageId(id))
    }

    fn u64_le(&mut self) -> Result<u64, WireError> {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }

    fn kind(&mut self) -> Result<MessageKind, WireError> {
        let code = self.u8()?;
        MessageKind::from_code(code).ok_or(WireError::UnknownKind(code))
    }

    fn varint(&mut self) -> Result<u32, WireError> {
        let mut value: u32 = 0;
        for i in 0..5u32 {
            let b = self.u8()?;
            let bits = u32::from(b & 0x7f);
            if i == 4 && bits > 0x0f {
                return Err(WireError::BadVarint);
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                // Minimal encoding: a last byte of zero is only allowed for the value 0.
                if b == 0 && i > 0 {
                    return Err(WireError::BadVarint);
                }
                return Ok(value);
            }
        }
        Err(WireError::BadVarint)
    }

    fn count(&mut self, what: &'static str) -> Result<usize, WireError> {
        let n = self.varint()?;
        if n == 0 {
            return Err(WireError::Empty(what));
        }
        if n > MAX_ITEMS {
            return Err(WireError::TooLarge {
                what: "item count",
                value: u64::from(n),
                limit: u64::from(MAX_ITEMS),
            });
        }
        Ok(n as usize)
    }
}

fn decode_body(r: &mut Reader<'_>, in_batch: bool) -> Result<Frame, WireError> {
    match r.u8()? {
        tag @ (TAG_PUSH | TAG_PUSH_FROM) => {
            let id = r.id()?;
            let kind = r.kind()?;
            let hops = r.varint()?;
            let origin = if tag == TAG_PUSH_FROM {
                Some(r.u64_le()?)
            } else {
                None
            };
            let len = r.varint()?;
            if len > MAX_PAYLOAD {
                return Err(WireError::TooLarge {
                    what: "payload length",
                    value: u64::from(len),
                    limit: u64::from(MAX_PAYLOAD),
                });
            }
            let payload: Payload = Arc::from(r.take(len as usize)?);
            Ok(Frame::Push {
                id,
                kind,
                hops,
                origin,
                payload,
            })
        }
        TAG_ROUTES => {
            let n = r.count("routes")?;
            // Each item is at least 9 bytes: reject impossible counts before allocating.
            if r.buf.len() < n.saturating_mul(9) {
                return Err(WireError::Truncated);
            }
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let origin = r.u64_le()?;
                let route = RouteAdvert::from_code(r.varint()?)?;
                items.push(RouteItem { origin, route });
            }
            Ok(Frame::Routes { items })
        }
        TAG_ANNOUNCE => {
            let n = r.count("announce")?;
            // Each item is at least 34 bytes: reject impossible counts before allocating.
            if r.buf.len() < n.saturating_mul(34) {
                return Err(WireError::Truncated);
            }
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let id = r.id()?;
                let kind = r.kind()?;
                let size = r.varint()?;
                items.push(AnnounceItem { id, kind, size });
            }
            Ok(Frame::Announce { items })
        }
        TAG_REQUEST => {
            let n = r.count("request")?;
            if r.buf.len() < n.saturating_mul(32) {
                return Err(WireError::Truncated);
            }
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(r.id()?);
            }
            Ok(Frame::Request { ids })
        }
        TAG_LINK => {
            let n = r.count("link")?;
            if r.buf.len() < n.saturating_mul(34) {
                return Err(WireError::Truncated);
            }
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let id = r.id()?;
                let kind = r.kind()?;
                let code = r.u8()?;
                let op = LinkOp::from_code(code).ok_or(WireError::UnknownLinkOp(code))?;
                items.push(LinkItem { id, kind, op });
            }
            Ok(Frame::Link { items })
        }
        TAG_BATCH => {
            if in_batch {
                return Err(WireError::NestedBatch);
            }
            let n = r.count("batch")?;
            if r.buf.len() < n.saturating_mul(2) {
                return Err(WireError::Truncated);
            }
            let mut frames = Vec::with_capacity(n);
            for _ in 0..n {
                let len = r.varint()? as usize;
                let mut inner = Reader { buf: r.take(len)? };
                let frame = decode_body(&mut inner, true)?;
                if !inner.buf.is_empty() {
                    return Err(WireError::TrailingBytes(inner.buf.len()));
                }
                frames.push(frame);
            }
            Ok(Frame::Batch { frames })
        }
        tag => Err(WireError::UnknownTag(tag)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> MessageId {
        MessageId([n; 32])
    }

    fn push(n: u8, len: usize) -> Frame {
        Frame::Push {
            id: id(n),
            kind: MessageKind::Deposit,
            hops: 300,
            origin: None,
            payload: vec![n; len].into(),
        }
    }

    fn sample_frames() -> Vec<Frame> {
        vec![
            push(1, 0),
            push(2, 200_000),
            Frame::Push {
                id: id(11),
                kind: MessageKind::Block,
                hops: 2,
                origin: Some(0x0102_0304_0506_0708),
                payload: vec![11; 70].into(),
            },
            Frame::Routes {
                items: vec![
                    RouteItem {
                        origin: 1,
                        route: RouteAdvert::Distance(0),
                    },
                    RouteItem {
                        origin: u64::MAX,
                        route: RouteAdvert::Distance(MAX_ROUTE_US),
                    },
                    RouteItem {
                        origin: 7,
                        route: RouteAdvert::ViaYou(0),
                    },
                    RouteItem {
                        origin: 9,
                        route: RouteAdvert::ViaYou(MAX_SUBTREE_CLASS),
                    },
                    RouteItem {
                        origin: 8,
                        route: RouteAdvert::Unreachable,
                    },
                ],
            },
            Frame::Announce {
                items: vec![
                    AnnounceItem {
                        id: id(3),
                        kind: MessageKind::Block,
                        size: 131_072,
                    },
                    AnnounceItem {
                        id: id(4),
                        kind: MessageKind::PeerExchange,
                        size: 0,
                    },
                ],
            },
            Frame::Request {
                ids: vec![id(5), id(6)],
            },
            Frame::Batch {
                frames: vec![push(7, 10), Frame::Request { ids: vec![id(8)] }],
            },
            Frame::Link {
                items: vec![
                    LinkItem {
                        id: id(9),
                        kind: MessageKind::Deposit,
                        op: LinkOp::Prune,
                    },
                    LinkItem {
                        id: id(10),
                        kind: MessageKind::Block,
                        op: LinkOp::Graft,
                    },
                ],
            },
        ]
    }

    #[test]
    fn roundtrip_and_len() {
        for frame in sample_frames() {
            let bytes = frame.encode().unwrap();
            assert_eq!(bytes.len(), frame.encoded_len(), "{frame:?}");
            assert_eq!(Frame::decode(&bytes).unwrap(), frame);
        }
    }

    #[test]
    fn encoding_is_compact() {
        // version + tag + id + kind + hops(2) + len(1) + payload
        assert_eq!(push(1, 100).encoded_len(), 1 + 1 + 32 + 1 + 2 + 1 + 100);
        let req = Frame::Request { ids: vec![id(1)] };
        assert_eq!(req.encoded_len(), 35);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for frame in sample_frames() {
            let bytes = frame.encode().unwrap();
            for cut in 0..bytes.len().min(400) {
                assert!(
                    Frame::decode(&bytes[..cut]).is_err(),
                    "cut {cut} of {frame:?}"
                );
            }
        }
    }

    #[test]
    fn garbage_is_rejected() {
        assert_eq!(Frame::decode(&[]), Err(WireError::Truncated));
        assert_eq!(
            Frame::decode(&[9, 0]),
            Err(WireError::UnsupportedVersion(9))
        );
        assert_eq!(Frame::decode(&[1, 7]), Err(WireError::UnknownTag(7)));
        assert_eq!(Frame::decode(&[1, 6, 0]), Err(WireError::Empty("routes")));
        // A route distance beyond the hour.
        let mut routes = vec![1, 6, 1];
        routes.extend_from_slice(&[0; 8]);
        put_varint(&mut routes, MAX_ROUTE_US + DISTANCE_BASE + 1);
        assert!(matches!(
            Frame::decode(&routes),
            Err(WireError::TooLarge {
                what: "route distance",
                ..
            })
        ));
        assert_eq!(Frame::decode(&[1, 2, 0]), Err(WireError::Empty("request")));
        assert_eq!(Frame::decode(&[1, 4, 0]), Err(WireError::Empty("link")));
        let mut link = vec![1, 4, 1];
        link.extend_from_slice(&[0; 32]);
        link.extend_from_slice(&[0, 2]);
        assert_eq!(Frame::decode(&link), Err(WireError::UnknownLinkOp(2)));
        // Overlong varint count.
        assert_eq!(
            Frame::decode(&[1, 2, 0x81, 0x00]),
            Err(WireError::BadVarint)
        );
        assert_eq!(
            Frame::decode(&[1, 2, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            Err(WireError::BadVarint)
        );
        // Count above the limit (4097), and a legal count with no data behind it.
        assert!(matches!(
            Frame::decode(&[1, 1, 0x81, 0x20]),
            Err(WireError::TooLarge { .. })
        ));
        assert_eq!(
            Frame::decode(&[1, 1, 0xff, 0x1f]),
            Err(WireError::Truncated)
        );
        // Trailing byte.
        let mut bytes = push(1, 3).encode().unwrap();
        bytes.push(0);
        assert_eq!(Frame::decode(&bytes), Err(WireError::TrailingBytes(1)));
        // Unknown kind.
        let mut bytes = push(1, 3).encode().unwrap();
        bytes[34] = 9;
        assert_eq!(Frame::decode(&bytes), Err(WireError::UnknownKind(9)));
    }

    #[test]
    fn nested_batch_is_rejected_both_ways() {
        let nested = Frame::Batch {
            frames: vec![Frame::Batch {
                frames: vec![push(1, 1)],
            }],
        };
        assert_eq!(nested.encode(), Err(WireError::NestedBatch));
        // Hand-built: version, batch, count 1, len 4, batch, count 1, len 1, tag 9.
        assert_eq!(
            Frame::decode(&[1, 3, 1, 4, 3, 1, 1, 9]),
            Err(WireError::NestedBatch)
        );
    }

    #[test]
    fn message_id_is_sha256() {
        let id = MessageId::of(b"abc");
        assert_eq!(id.to_string(), "ba7816bf8f01cfea");
    }
}

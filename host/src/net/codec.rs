//! Wire framing.
//!
//! Every message on a stream is one frame:
//!
//! ```text
//! +----------------+--------------+--------------+-----------------+
//! | length: u32 BE | version: u8  | msg type: u8 | payload         |
//! +----------------+--------------+--------------+-----------------+
//!                  |<------------ length bytes ------------------->|
//! ```
//!
//! `length` counts everything after the prefix (version + type + payload), so
//! it is at least 2 and at most the configured maximum
//! ([`MAX_MESSAGE_BYTES`] by default). `version` must be [`WIRE_VERSION`].
//! The message type is opaque to this module.
//!
//! [`FrameDecoder`] is a sans-IO incremental decoder; [`read_frame`] and
//! [`write_frame`] are async helpers for quinn streams. Both validate the
//! header before accepting any payload byte and never allocate more than the
//! announced (and allowed) length — buffers grow with the bytes actually
//! received. Every [`CodecError`] for which [`CodecError::is_protocol_violation`]
//! is true means the peer broke the protocol: disconnect and penalize it.

use std::collections::VecDeque;

/// The only wire version this node speaks.
pub const WIRE_VERSION: u8 = 1;

/// Default limit on a frame's `length` field (8 MiB).
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// Size of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Size of the full header: length prefix + version + message type.
pub const HEADER_BYTES: usize = LENGTH_PREFIX_BYTES + 2;

/// Smallest valid `length` value (version + type, empty payload).
const MIN_LENGTH: u32 = 2;

/// Offset of the message type byte in the header.
const TYPE_OFFSET: usize = LENGTH_PREFIX_BYTES + 1;

/// Payload bytes requested from quinn per read in [`read_frame`].
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Application message type.
    pub msg_type: u8,
    /// Message payload (may be empty).
    pub payload: Vec<u8>,
}

/// Framing errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The length field is zero or too small to hold the version and type bytes.
    #[error("frame length {len} is too short (minimum is 2: wire version + message type)")]
    TooShort {
        /// The announced length.
        len: u32,
    },
    /// The length field (or a payload to encode) exceeds the allowed maximum.
    #[error("frame length {len} exceeds the limit of {max} bytes")]
    Oversize {
        /// The announced or requested length.
        len: u64,
        /// The limit in force.
        max: usize,
    },
    /// The frame has a wire version this node does not speak.
    #[error("unknown wire version {found} (this node speaks version {WIRE_VERSION})")]
    UnknownVersion {
        /// The version byte received.
        found: u8,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended mid-frame after {received} of {expected} bytes")]
    Truncated {
        /// Bytes of the frame received (including the header).
        received: usize,
        /// Bytes the frame should have had (including the header).
        expected: usize,
    },
    /// Reading from the QUIC stream failed.
    #[error("failed to read frame from stream: {0}")]
    Read(#[source] quinn::ReadError),
    /// Writing to the QUIC stream failed.
    #[error("failed to write frame to stream: {0}")]
    Write(#[source] quinn::WriteError),
}

impl CodecError {
    /// Whether the peer sent bytes that violate the framing protocol
    /// (disconnect and penalize), as opposed to a transport failure or a
    /// local encoding mistake.
    pub fn is_protocol_violation(&self) -> bool {
        match self {
            Self::TooShort { .. } | Self::UnknownVersion { .. } | Self::Truncated { .. } => true,
            // Oversize is a violation when received; `encode` also returns it
            // for local payloads, where the caller knows better.
            Self::Oversize { .. } => true,
            Self::Read(_) | Self::Write(_) => false,
        }
    }
}

/// A length field that passed [`check_length`].
#[derive(Debug, Clone, Copy)]
struct Length {
    /// Payload bytes the frame announces (its length minus version and type).
    payload: usize,
    /// Bytes of the whole frame, length prefix included.
    frame: usize,
}

/// Validates a received length field against `max`.
fn check_length(len: u32, max: usize) -> Result<Length, CodecError> {
    let payload = len
        .checked_sub(MIN_LENGTH)
        .ok_or(CodecError::TooShort { len })?;
    // u32 -> usize is lossless on every supported target; treat failure as oversize, as a
    // frame whose size does not fit in a usize.
    let oversize = || CodecError::Oversize {
        len: u64::from(len),
        max,
    };
    let frame = usize::try_from(len)
        .ok()
        .filter(|l| *l <= max)
        .and_then(|l| l.checked_add(LENGTH_PREFIX_BYTES))
        .ok_or_else(oversize)?;
    let payload = usize::try_from(payload).map_err(|_| oversize())?;
    Ok(Length { payload, frame })
}

/// Bytes of a frame, header included, carrying `payload` payload bytes. Cannot saturate:
/// payloads are bounded by a checked [`Length`], itself a `u32`.
fn frame_bytes(payload: usize) -> usize {
    payload.saturating_add(HEADER_BYTES)
}

fn check_version(found: u8) -> Result<(), CodecError> {
    if found == WIRE_VERSION {
        Ok(())
    } else {
        Err(CodecError::UnknownVersion { found })
    }
}

/// Builds the 6-byte header for a payload of `payload_len` bytes.
fn header(msg_type: u8, payload_len: usize, max: usize) -> Result<[u8; HEADER_BYTES], CodecError> {
    let oversize = || CodecError::Oversize {
        len: u64::try_from(payload_len)
            .unwrap_or(u64::MAX)
            .saturating_add(u64::from(MIN_LENGTH)),
        max,
    };
    let len = payload_len
        .checked_add(MIN_LENGTH as usize)
        .filter(|l| *l <= max)
        .and_then(|l| u32::try_from(l).ok())
        .ok_or_else(oversize)?;
    let mut h = [0u8; HEADER_BYTES];
    h[..LENGTH_PREFIX_BYTES].copy_from_slice(&len.to_be_bytes());
    h[LENGTH_PREFIX_BYTES] = WIRE_VERSION;
    h[TYPE_OFFSET] = msg_type;
    Ok(h)
}

/// Encodes one frame, enforcing [`MAX_MESSAGE_BYTES`].
pub fn encode(msg_type: u8, payload: &[u8]) -> Result<Vec<u8>, CodecError> {
    encode_with_limit(msg_type, payload, MAX_MESSAGE_BYTES)
}

/// Encodes one frame, enforcing `max_message_bytes` on the length field.
pub fn encode_with_limit(
    msg_type: u8,
    payload: &[u8],
    max_message_bytes: usize,
) -> Result<Vec<u8>, CodecError> {
    let h = header(msg_type, payload.len(), max_message_bytes)?;
    Ok([h.as_slice(), payload].concat())
}

/// Makes room for `additional` more bytes without ever letting the capacity
/// exceed `limit` (the frame's announced size): geometric growth, clamped.
fn reserve_within(buf: &mut Vec<u8>, additional: usize, limit: usize) {
    let needed = buf.len().saturating_add(additional);
    if needed <= buf.capacity() {
        return;
    }
    let target = buf.capacity().saturating_mul(2).min(limit).max(needed);
    if let Some(extra) = target.checked_sub(buf.len()) {
        buf.reserve_exact(extra);
    }
}

/// A frame whose header has been validated and whose payload is arriving.
#[derive(Debug)]
struct PartialBody {
    msg_type: u8,
    payload_len: usize,
    payload: Vec<u8>,
}

impl PartialBody {
    /// Payload bytes still to come. `push` never appends beyond `payload_len`, so this is
    /// the exact difference; it is zero once the payload is complete.
    fn missing(&self) -> usize {
        self.payload_len.saturating_sub(self.payload.len())
    }
}

/// Incremental, sans-IO frame decoder.
///
/// Feed received bytes with [`push`](Self::push) and drain complete frames
/// with [`next_frame`](Self::next_frame). Headers are validated as soon as
/// their bytes arrive, so an oversize or malformed frame is rejected before
/// any of its payload is buffered; after an error the decoder discards all
/// further input and keeps returning that error (the stream cannot be
/// resynchronized). Drain frames after every `push`: completed frames are
/// queued, and the queue holds at most what was pushed.
#[derive(Debug)]
pub struct FrameDecoder {
    max_message_bytes: usize,
    /// The header received so far, at most [`HEADER_BYTES`].
    header: Vec<u8>,
    body: Option<PartialBody>,
    ready: VecDeque<Frame>,
    error: Option<CodecError>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(MAX_MESSAGE_BYTES)
    }
}

impl FrameDecoder {
    /// A decoder that rejects frames whose length field exceeds `max_message_bytes`.
    pub fn new(max_message_bytes: usize) -> Self {
        Self {
            max_message_bytes,
            header: Vec::with_capacity(HEADER_BYTES),
            body: None,
            ready: VecDeque::new(),
            error: None,
        }
    }

    /// Feeds received bytes. Errors surface through [`next_frame`](Self::next_frame)
    /// once the frames completed before the error have been returned.
    pub fn push(&mut self, mut input: &[u8]) {
        while !input.is_empty() && self.error.is_none() {
            if let Some(body) = &mut self.body {
                let (now, rest) = input
                    .split_at_checked(body.missing())
                    .unwrap_or((input, &[]));
                reserve_within(&mut body.payload, now.len(), body.payload_len);
                body.payload.extend_from_slice(now);
                input = rest;
                if body.payload.len() == body.payload_len
                    && let Some(done) = self.body.take()
                {
                    self.ready.push_back(Frame {
                        msg_type: done.msg_type,
                        payload: done.payload,
                    });
                }
                continue;
            }
            // At most HEADER_BYTES bytes, one at a time: no offsets to compute.
            while self.header.len() < HEADER_BYTES
                && let Some((&byte, rest)) = input.split_first()
            {
                self.header.push(byte);
                input = rest;
            }
            if let Err(e) = self.check_partial_header() {
                self.error = Some(e);
            }
        }
    }

    /// Validates whatever part of the header is present; completes it if full.
    fn check_partial_header(&mut self) -> Result<(), CodecError> {
        let Some(prefix) = self.header.first_chunk::<LENGTH_PREFIX_BYTES>() else {
            return Ok(());
        };
        let len = check_length(u32::from_be_bytes(*prefix), self.max_message_bytes)?;
        let Some(&version) = self.header.get(LENGTH_PREFIX_BYTES) else {
            return Ok(());
        };
        check_version(version)?;
        let Some(&msg_type) = self.header.get(TYPE_OFFSET) else {
            return Ok(());
        };
        let payload_len = len.payload;
        self.header.clear();
        if payload_len == 0 {
            self.ready.push_back(Frame {
                msg_type,
                payload: Vec::new(),
            });
        } else {
            self.body = Some(PartialBody {
                msg_type,
                payload_len,
                payload: Vec::new(),
            });
        }
        Ok(())
    }

    /// The next complete frame, `Ok(None)` if more input is needed, or the
    /// error that stopped decoding.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, CodecError> {
        if let Some(frame) = self.ready.pop_front() {
            return Ok(Some(frame));
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(None),
        }
    }

    /// Call when the byte stream has ended: errors if a frame was cut off (or
    /// decoding had already failed).
    pub fn finish(&self) -> Result<(), CodecError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if let Some(body) = &self.body {
            return Err(CodecError::Truncated {
                received: frame_bytes(body.payload.len()),
                expected: frame_bytes(body.payload_len),
            });
        }
        if !self.header.is_empty() {
            return Err(CodecError::Truncated {
                received: self.header.len(),
                expected: HEADER_BYTES,
            });
        }
        Ok(())
    }

    /// Bytes held for the frame currently being assembled (not counting
    /// completed frames waiting in the queue).
    pub fn pending_bytes(&self) -> usize {
        // The header is cleared when a body starts, so at most one of the two is non-empty.
        match &self.body {
            Some(body) => frame_bytes(body.payload.len()),
            None => self.header.len(),
        }
    }
}

/// Writes one frame to `send`, enforcing `max_message_bytes`.
pub async fn write_frame(
    send: &mut quinn::SendStream,
    msg_type: u8,
    payload: &[u8],
    max_message_bytes: usize,
) -> Result<(), CodecError> {
    let h = header(msg_type, payload.len(), max_message_bytes)?;
    send.write_all(&h).await.map_err(CodecError::Write)?;
    send.write_all(payload).await.map_err(CodecError::Write)
}

/// Reads one frame from `recv`.
///
/// Returns `Ok(None)` if the stream finished cleanly at a frame boundary.
/// The header is validated before any payload is read, and the payload
/// buffer grows with the bytes actually received (never beyond the announced,
/// allowed length).
pub async fn read_frame(
    recv: &mut quinn::RecvStream,
    max_message_bytes: usize,
) -> Result<Option<Frame>, CodecError> {
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    match recv.read_exact(&mut prefix).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(0)) => return Ok(None),
        Err(quinn::ReadExactError::FinishedEarly(received)) => {
            return Err(CodecError::Truncated {
                received,
                expected: LENGTH_PREFIX_BYTES,
            });
        }
        Err(quinn::ReadExactError::ReadError(e)) => return Err(CodecError::Read(e)),
    }
    let len = check_length(u32::from_be_bytes(prefix), max_message_bytes)?;
    let expected = len.frame;
    let mut version_and_type = [0u8; 2];
    match recv.read_exact(&mut version_and_type).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(n)) => {
            return Err(CodecError::Truncated {
                // n < 2: cannot saturate.
                received: n.saturating_add(LENGTH_PREFIX_BYTES),
                expected,
            });
        }
        Err(quinn::ReadExactError::ReadError(e)) => return Err(CodecError::Read(e)),
    }
    let [version, msg_type] = version_and_type;
    check_version(version)?;
    let payload_len = len.payload;
    let mut payload = Vec::new();
    while let Some(missing) = payload_len
        .checked_sub(payload.len())
        .filter(|missing| *missing > 0)
    {
        let want = missing.min(READ_CHUNK_BYTES);
        match recv
            .read_chunk(want, true)
            .await
            .map_err(CodecError::Read)?
        {
            Some(chunk) => {
                let bytes: &[u8] = &chunk.bytes;
                // quinn never returns more than `want`; be defensive anyway.
                let bytes = bytes.get(..missing).unwrap_or(bytes);
                reserve_within(&mut payload, bytes.len(), payload_len);
                payload.extend_from_slice(bytes);
            }
            None => {
                return Err(CodecError::Truncated {
                    received: frame_bytes(payload.len()),
                    expected,
                });
            }
        }
    }
    Ok(Some(Frame { msg_type, payload }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(dec: &mut FrameDecoder) -> Result<Vec<Frame>, CodecError> {
        let mut out = Vec::new();
        while let Some(f) = dec.next_frame()? {
            out.push(f);
        }
        Ok(out)
    }

    fn sample() -> Vec<(u8, Vec<u8>)> {
        vec![
            (0, vec![]),
            (7, b"hello".to_vec()),
            (255, (0..=255u8).cycle().take(70_000).collect()),
            (3, vec![0]),
        ]
    }

    #[test]
    fn header_layout() {
        let bytes = encode(9, b"abc").unwrap();
        assert_eq!(bytes, vec![0, 0, 0, 5, WIRE_VERSION, 9, b'a', b'b', b'c']);
        assert_eq!(encode(1, b"").unwrap(), vec![0, 0, 0, 2, 1, 1]);
    }

    #[test]
    fn roundtrip_whole_and_byte_by_byte() {
        let frames = sample();
        let mut wire = Vec::new();
        for (ty, p) in &frames {
            wire.extend(encode(*ty, p).unwrap());
        }
        let expected: Vec<Frame> = frames
            .iter()
            .map(|(t, p)| Frame {
                msg_type: *t,
                payload: p.clone(),
            })
            .collect();

        let mut dec = FrameDecoder::default();
        dec.push(&wire);
        assert_eq!(decode_all(&mut dec).unwrap(), expected);
        dec.finish().unwrap();

        let mut dec = FrameDecoder::default();
        let mut got = Vec::new();
        for b in &wire {
            dec.push(std::slice::from_ref(b));
            got.extend(decode_all(&mut dec).unwrap());
        }
        assert_eq!(got, expected);
        assert_eq!(dec.pending_bytes(), 0);
        dec.finish().unwrap();

        // Odd chunk sizes straddling frame boundaries.
        for chunk in [2, 3, 5, 7, 4096] {
            let mut dec = FrameDecoder::default();
            let mut got = Vec::new();
            for c in wire.chunks(chunk) {
                dec.push(c);
                got.extend(decode_all(&mut dec).unwrap());
            }
            assert_eq!(got, expected, "chunk size {chunk}");
        }
    }

    #[test]
    fn empty_push_and_partial_frame() {
        let mut dec = FrameDecoder::default();
        dec.push(&[]);
        assert_eq!(dec.next_frame().unwrap(), None);
        let wire = encode(4, b"payload").unwrap();
        dec.push(&wire[..wire.len() - 1]);
        assert_eq!(dec.next_frame().unwrap(), None);
        assert!(matches!(
            dec.finish(),
            Err(CodecError::Truncated {
                received: 12,
                expected: 13
            })
        ));
        dec.push(&wire[wire.len() - 1..]);
        assert_eq!(dec.next_frame().unwrap().unwrap().payload, b"payload");

        let mut dec = FrameDecoder::default();
        dec.push(&[0, 0]);
        assert!(matches!(
            dec.finish(),
            Err(CodecError::Truncated { received: 2, .. })
        ));
    }

    #[test]
    fn zero_and_one_length_rejected() {
        for len in [0u32, 1] {
            let mut dec = FrameDecoder::default();
            dec.push(&len.to_be_bytes());
            let err = dec.next_frame().unwrap_err();
            assert_eq!(err, CodecError::TooShort { len });
            assert!(err.is_protocol_violation());
        }
    }

    #[test]
    fn unknown_version_rejected_before_payload() {
        let mut wire = encode(1, &[0u8; 100]).unwrap();
        wire[4] = 2;
        let mut dec = FrameDecoder::default();
        dec.push(&wire[..5]);
        assert_eq!(
            dec.next_frame().unwrap_err(),
            CodecError::UnknownVersion { found: 2 }
        );
        // Further input is discarded and the error sticks.
        dec.push(&wire[5..]);
        assert_eq!(dec.pending_bytes(), 5);
        assert!(dec.next_frame().is_err());
        assert!(dec.finish().is_err());
    }

    #[test]
    fn oversize_rejected_before_buffering_payload() {
        let max = 1024;
        let mut dec = FrameDecoder::new(max);
        // Exactly at the limit is fine.
        dec.push(&encode_with_limit(1, &vec![7u8; max - 2], max).unwrap());
        assert_eq!(dec.next_frame().unwrap().unwrap().payload.len(), max - 2);

        // One over: rejected as soon as the 4 length bytes are in, and the
        // payload that follows is not buffered.
        let mut wire = ((max + 1) as u32).to_be_bytes().to_vec();
        wire.extend([WIRE_VERSION, 1]);
        wire.extend(vec![0u8; max]);
        let mut dec = FrameDecoder::new(max);
        dec.push(&wire[..4]);
        assert_eq!(
            dec.next_frame().unwrap_err(),
            CodecError::Oversize {
                len: max as u64 + 1,
                max
            }
        );
        dec.push(&wire[4..]);
        assert_eq!(dec.pending_bytes(), 4);

        // A u32::MAX announcement with the default limit.
        let mut dec = FrameDecoder::default();
        dec.push(&[0xff, 0xff, 0xff, 0xff, 1, 1, 0, 0]);
        assert!(matches!(dec.next_frame(), Err(CodecError::Oversize { .. })));
        assert!(dec.pending_bytes() <= HEADER_BYTES);
    }

    #[test]
    fn frames_before_an_error_are_delivered_first() {
        let mut wire = encode(1, b"good").unwrap();
        wire.extend([0, 0, 0, 0]);
        let mut dec = FrameDecoder::default();
        dec.push(&wire);
        assert_eq!(dec.next_frame().unwrap().unwrap().payload, b"good");
        assert_eq!(
            dec.next_frame().unwrap_err(),
            CodecError::TooShort { len: 0 }
        );
    }

    #[test]
    fn garbage_never_panics() {
        // Deterministic pseudo-random garbage (xorshift).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..2000 {
            let mut dec = FrameDecoder::new(64 * 1024);
            let len = (round % 97) + 1;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            dec.push(&bytes);
            while let Ok(Some(_)) = dec.next_frame() {}
            assert!(dec.pending_bytes() <= 64 * 1024 + HEADER_BYTES);
            let _ = dec.finish();
        }
    }

    #[test]
    fn encode_enforces_limit() {
        assert!(encode_with_limit(1, &[0; 8], 10).is_ok());
        let err = encode_with_limit(1, &[0; 9], 10).unwrap_err();
        assert_eq!(err, CodecError::Oversize { len: 11, max: 10 });
        assert!(encode(1, &vec![0; MAX_MESSAGE_BYTES - 2]).is_ok());
        assert!(encode(1, &vec![0; MAX_MESSAGE_BYTES - 1]).is_err());
    }

    #[test]
    fn reserve_within_never_exceeds_limit() {
        let mut v = Vec::new();
        let limit = 1000;
        while v.len() < limit {
            let add = 37.min(limit - v.len());
            reserve_within(&mut v, add, limit);
            v.extend(std::iter::repeat_n(0u8, add));
            assert!(v.capacity() <= limit.max(v.len()));
        }
    }
}

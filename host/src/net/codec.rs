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

/// Validates a received length field against `max`.
fn check_length(len: u32, max: usize) -> Result<usize, CodecError> {
    if len < MIN_LENGTH {
        return Err(CodecError::TooShort { len });
    }
    // u32 -> usize is lossless on every supported target; treat failure as oversize.
    match usize::try_from(len) {
        Ok(l) if l <= max => Ok(l),
        _ => Err(CodecError::Oversize {
            len: u64::from(len),
            max,
        }),
    }
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
    h[LENGTH_PREFIX_BYTES + 1] = msg_type;
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
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    Ok(out)
}

/// Makes room for `additional` more bytes without ever letting the capacity
/// exceed `limit` (the frame's announced size): geometric growth, clamped.
fn reserve_within(buf: &mut Vec<u8>, additional: usize, limit: usize) {
    let needed = buf.len().saturating_add(additional);
    if needed <= buf.capacity() {
        return;
    }
    let target = buf.capacity().saturating_mul(2).min(limit).max(needed);
    buf.reserve_exact(target - buf.len());
}

/// A frame whose header has been validated and whose payload is arriving.
#[derive(Debug)]
struct PartialBody {
    msg_type: u8,
    payload_len: usize,
    payload: Vec<u8>,
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
    header: [u8; HEADER_BYTES],
    header_filled: usize,
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
            header: [0; HEADER_BYTES],
            header_filled: 0,
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
                let take = (body.payload_len - body.payload.len()).min(input.len());
                let (now, rest) = input.split_at(take);
                reserve_within(&mut body.payload, take, body.payload_len);
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
            let take = (HEADER_BYTES - self.header_filled).min(input.len());
            let (now, rest) = input.split_at(take);
            self.header[self.header_filled..self.header_filled + take].copy_from_slice(now);
            self.header_filled += take;
            input = rest;
            if let Err(e) = self.check_partial_header() {
                self.error = Some(e);
            }
        }
    }

    /// Validates whatever part of the header is present; completes it if full.
    fn check_partial_header(&mut self) -> Result<(), CodecError> {
        if self.header_filled < LENGTH_PREFIX_BYTES {
            return Ok(());
        }
        let len = check_length(read_len(&self.header), self.max_message_bytes)?;
        if self.header_filled <= LENGTH_PREFIX_BYTES {
            return Ok(());
        }
        check_version(self.header[LENGTH_PREFIX_BYTES])?;
        if self.header_filled < HEADER_BYTES {
            return Ok(());
        }
        let msg_type = self.header[LENGTH_PREFIX_BYTES + 1];
        let payload_len = len - MIN_LENGTH as usize;
        self.header_filled = 0;
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
                received: HEADER_BYTES + body.payload.len(),
                expected: HEADER_BYTES + body.payload_len,
            });
        }
        if self.header_filled > 0 {
            return Err(CodecError::Truncated {
                received: self.header_filled,
                expected: HEADER_BYTES,
            });
        }
        Ok(())
    }

    /// Bytes held for the frame currently being assembled (not counting
    /// completed frames waiting in the queue).
    pub fn pending_bytes(&self) -> usize {
        self.header_filled
            + self
                .body
                .as_ref()
                .map_or(0, |b| HEADER_BYTES + b.payload.len())
    }
}

fn read_len(header: &[u8; HEADER_BYTES]) -> u32 {
    u32::from_be_bytes([header[0], header[1], header[2], header[3]])
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
    let mut h = [0u8; HEADER_BYTES];
    match recv.read_exact(&mut h[..LENGTH_PREFIX_BYTES]).await {
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
    let len = check_length(read_len(&h), max_message_bytes)?;
    let expected = LENGTH_PREFIX_BYTES + len;
    match recv.read_exact(&mut h[LENGTH_PREFIX_BYTES..]).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(n)) => {
            return Err(CodecError::Truncated {
                received: LENGTH_PREFIX_BYTES + n,
                expected,
            });
        }
        Err(quinn::ReadExactError::ReadError(e)) => return Err(CodecError::Read(e)),
    }
    check_version(h[LENGTH_PREFIX_BYTES])?;
    let msg_type = h[LENGTH_PREFIX_BYTES + 1];
    let payload_len = len - MIN_LENGTH as usize;
    let mut payload = Vec::new();
    while payload.len() < payload_len {
        let want = (payload_len - payload.len()).min(READ_CHUNK_BYTES);
        match recv
            .read_chunk(want, true)
            .await
            .map_err(CodecError::Read)?
        {
            Some(chunk) => {
                let bytes: &[u8] = &chunk.bytes;
                // quinn never returns more than `want`; be defensive anyway.
                let bytes = &bytes[..bytes.len().min(payload_len - payload.len())];
                reserve_within(&mut payload, bytes.len(), payload_len);
                payload.extend_from_slice(bytes);
            }
            None => {
                return Err(CodecError::Truncated {
                    received: HEADER_BYTES + payload.len(),
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

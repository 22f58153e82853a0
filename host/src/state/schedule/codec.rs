//! The canonical encoding of upgrade operations and of the schedule, and its root.

use sha2::{Digest, Sha256};

use crate::hashes::ModuleHash;

use super::{
    Action, DropReason, DroppedOp, Hash32, MAX_DROPPED, MAX_OPEN_OPS, PendingOp, Readiness,
    Schedule, ScheduleError, UPGRADE_OP_BYTES, UpgradeOp, kind_code, kind_from_code,
};

/// Domain of [`Schedule::root`].
const ROOT_DOMAIN: &[u8] = b"modnode-schedule-v2";

impl UpgradeOp {
    /// `kind u8 | module 32 | height u64 LE`.
    pub fn encode(&self) -> [u8; UPGRADE_OP_BYTES] {
        let mut out = [0u8; UPGRADE_OP_BYTES];
        let (kind, rest) = out.split_at_mut(1);
        let (module, height) = rest.split_at_mut(32);
        kind.copy_from_slice(&[kind_code(self.kind)]);
        module.copy_from_slice(self.module.as_bytes());
        height.copy_from_slice(&self.height.to_le_bytes());
        out
    }

    /// Decodes [`UpgradeOp::encode`]'s output.
    pub fn decode(bytes: &[u8; UPGRADE_OP_BYTES]) -> Result<Self, ScheduleError> {
        let (kind, rest) = bytes
            .split_first()
            .ok_or(ScheduleError::UnknownKind(0xff))?;
        let (module, height) = rest
            .split_first_chunk::<32>()
            .ok_or(ScheduleError::UnknownKind(0xff))?;
        let height: [u8; 8] = height
            .try_into()
            .map_err(|_| ScheduleError::UnknownKind(0xff))?;
        Ok(Self {
            kind: kind_from_code(*kind)?,
            module: ModuleHash(*module),
            height: u64::from_le_bytes(height),
        })
    }
}

impl Action {
    /// Stable one-byte code in the state and the store.
    pub fn code(self) -> u8 {
        match self {
            Action::Upgrade => 0,
            Action::Cancel => 1,
        }
    }

    /// The action with code `code`.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Action::Upgrade),
            1 => Some(Action::Cancel),
            _ => None,
        }
    }
}

fn reason_code(reason: DropReason) -> u8 {
    match reason {
        DropReason::Cancelled => 0,
        DropReason::NotReady => 1,
    }
}

fn reason_from_code(code: u8) -> Option<DropReason> {
    match code {
        0 => Some(DropReason::Cancelled),
        1 => Some(DropReason::NotReady),
        _ => None,
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) -> usize {
    let n = u16::try_from(len).unwrap_or(u16::MAX);
    out.extend_from_slice(&n.to_le_bytes());
    usize::from(n)
}

fn put_ids(out: &mut Vec<u8>, ids: &[u32]) {
    let n = put_len(out, ids.len());
    for id in ids.iter().take(n) {
        out.extend_from_slice(&id.to_le_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.bytes::<1>().map(|[b]| b)
    }
    fn len(&mut self) -> Option<usize> {
        self.bytes::<2>()
            .map(|b| usize::from(u16::from_le_bytes(b)))
    }
    fn u32(&mut self) -> Option<u32> {
        self.bytes::<4>().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.bytes::<8>().map(u64::from_le_bytes)
    }
    fn op(&mut self) -> Option<UpgradeOp> {
        UpgradeOp::decode(&self.bytes::<UPGRADE_OP_BYTES>()?).ok()
    }
    fn ids(&mut self) -> Option<Vec<u32>> {
        let n = self.len()?;
        let mut ids = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            ids.push(self.u32()?);
        }
        Some(ids)
    }
}

impl Schedule {
    /// Canonical encoding, integers little-endian, counts u16:
    /// `entries | entries × op | pending | pending × (action u8 | op | since u64 | voters |
    /// voters × u32) | ready | ready × (op | attesters | attesters × u32) | dropped | dropped ×
    /// (op | reason u8 | at u64 | ready u32)`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let n = put_len(&mut out, self.entries.len());
        for e in self.entries.iter().take(n) {
            out.extend_from_slice(&e.encode());
        }
        let n = put_len(&mut out, self.pending.len());
        for p in self.pending.iter().take(n) {
            out.push(p.action.code());
            out.extend_from_slice(&p.op.encode());
            out.extend_from_slice(&p.since.to_le_bytes());
            put_ids(&mut out, &p.voters);
        }
        let n = put_len(&mut out, self.ready.len());
        for r in self.ready.iter().take(n) {
            out.extend_from_slice(&r.op.encode());
            put_ids(&mut out, &r.attesters);
        }
        let n = put_len(&mut out, self.dropped.len());
        for d in self.dropped.iter().take(n) {
            out.extend_from_slice(&d.op.encode());
            out.push(reason_code(d.reason));
            out.extend_from_slice(&d.at.to_le_bytes());
            out.extend_from_slice(&d.ready.to_le_bytes());
        }
        out
    }

    /// Decodes [`Schedule::encode`]'s output; `None` if malformed or with trailing bytes.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let n = r.len()?;
        let mut entries = Vec::with_capacity(n.min(MAX_OPEN_OPS));
        for _ in 0..n {
            entries.push(r.op()?);
        }
        let n = r.len()?;
        let mut pending = Vec::with_capacity(n.min(MAX_OPEN_OPS));
        for _ in 0..n {
            pending.push(PendingOp {
                action: Action::from_code(r.u8()?)?,
                op: r.op()?,
                since: r.u64()?,
                voters: r.ids()?,
            });
        }
        let n = r.len()?;
        let mut ready = Vec::with_capacity(n.min(MAX_OPEN_OPS));
        for _ in 0..n {
            ready.push(Readiness {
                op: r.op()?,
                attesters: r.ids()?,
            });
        }
        let n = r.len()?;
        let mut dropped = Vec::with_capacity(n.min(MAX_DROPPED));
        for _ in 0..n {
            dropped.push(DroppedOp {
                op: r.op()?,
                reason: reason_from_code(r.u8()?)?,
                at: r.u64()?,
                ready: r.u32()?,
            });
        }
        r.0.is_empty().then_some(Self {
            entries,
            pending,
            ready,
            dropped,
        })
    }

    /// `sha256("modnode-schedule-v2" ‖ encode())`.
    pub fn root(&self) -> Hash32 {
        let mut h = Sha256::new();
        h.update(ROOT_DOMAIN);
        h.update(self.encode());
        h.finalize().into()
    }
}

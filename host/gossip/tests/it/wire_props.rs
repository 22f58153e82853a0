//! Property tests of the wire codec: roundtrips, and garbage never panics.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use modnode_gossip::policy::MessageKind;
use modnode_gossip::wire::{
    AnnounceItem, Frame, MAX_ROUTE_US, MAX_SUBTREE_CLASS, MessageId, RouteAdvert, RouteItem,
};
use proptest::prelude::*;

fn kind() -> impl Strategy<Value = MessageKind> {
    prop::sample::select(MessageKind::ALL.to_vec())
}

fn id() -> impl Strategy<Value = MessageId> {
    any::<[u8; 32]>().prop_map(MessageId)
}

fn leaf() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (
            id(),
            kind(),
            any::<u32>(),
            any::<Option<u64>>(),
            prop::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(id, kind, hops, origin, payload)| Frame::Push {
                id,
                kind,
                hops,
                origin,
                payload: payload.into(),
            }),
        prop::collection::vec(
            (
                any::<u64>(),
                prop_oneof![
                    (0..=MAX_ROUTE_US).prop_map(RouteAdvert::Distance),
                    (0..=MAX_SUBTREE_CLASS).prop_map(RouteAdvert::ViaYou),
                    Just(RouteAdvert::Unreachable),
                ]
            )
                .prop_map(|(origin, route)| RouteItem { origin, route }),
            1..40
        )
        .prop_map(|items| Frame::Routes { items }),
        prop::collection::vec(
            (id(), kind(), any::<u32>()).prop_map(|(id, kind, size)| AnnounceItem {
                id,
                kind,
                size
            }),
            1..8
        )
        .prop_map(|items| Frame::Announce { items }),
        prop::collection::vec(id(), 1..8).prop_map(|ids| Frame::Request { ids }),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        3 => leaf(),
        1 => prop::collection::vec(leaf(), 1..6).prop_map(|frames| Frame::Batch { frames }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn roundtrip(f in frame()) {
        let bytes = f.encode().unwrap();
        prop_assert_eq!(bytes.len(), f.encoded_len());
        prop_assert_eq!(Frame::decode(&bytes).unwrap(), f);
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Frame::decode(&bytes);
        let mut versioned = vec![1u8];
        versioned.extend_from_slice(&bytes);
        let _ = Frame::decode(&versioned);
    }

    #[test]
    fn corrupted_frames_never_panic(f in frame(), pos in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let original = f.encode().unwrap();
        // A strict prefix of a valid frame never decodes.
        let keep = cut.index(original.len());
        prop_assert!(Frame::decode(&original[..keep]).is_err());
        let mut bytes = original;
        let i = pos.index(bytes.len());
        bytes[i] = byte;
        if let Ok(decoded) = Frame::decode(&bytes) {
            // Whatever decodes re-encodes to the same bytes (the encoding is canonical).
            prop_assert_eq!(decoded.encode().unwrap(), bytes.clone());
        }
    }
}

use super::*;
use crate::hashes::BlockHash;

#[test]
fn a_record_round_trips_and_a_flipped_byte_is_refused() {
    let record = encode_record(b"bkey", b"value bytes").unwrap();
    assert_eq!(
        parse_record(&record),
        Some((&b"bkey"[..], &b"value bytes"[..], record.len()))
    );
    for i in 0..record.len() {
        let mut bad = record.clone();
        bad[i] ^= 0x40;
        assert!(
            parse_record(&bad).is_none_or(|(k, v, _)| k != b"bkey" || v != b"value bytes"),
            "byte {i} flipped and still read back"
        );
    }
    assert!(parse_record(&record[..record.len() - 1]).is_none());
}

#[test]
fn pointers_and_uses_round_trip() {
    let p = Pointer {
        segment: 7,
        offset: 1 << 40,
        len: 123_456,
    };
    assert_eq!(Pointer::decode(&p.encode()), Some(p));
    assert_eq!(Pointer::decode(&[0; 15]), None);
    let u = Use {
        count: 3,
        bytes: 99,
        size: 0,
    };
    assert_eq!(Use::decode(&u.encode()), Some(u));
}

#[test]
fn the_logged_prefixes_are_the_bulk_and_the_internal_keys_are_not_among_them() {
    for key in [
        super::super::keys::block(&BlockHash::new([1; 32])),
        super::super::keys::undo(&BlockHash::new([1; 32])),
        super::super::keys::eth1(&BlockHash::new([1; 32])),
        super::super::keys::schedule(&BlockHash::new([1; 32])),
        super::super::keys::validator_chunk(3),
        super::super::keys::balance_chunk(3),
    ] {
        assert!(is_logged(&key), "{}", hex::encode(&key));
        assert!(!is_internal(&key));
    }
    for key in [
        super::super::keys::height(5),
        super::super::keys::HEAD.to_vec(),
        super::super::keys::first_header(1, 2),
    ] {
        assert!(!is_logged(&key), "{}", hex::encode(&key));
        assert!(!is_internal(&key));
    }
    assert!(is_internal(&pointer_key(b"bx")) && is_internal(&use_key(1)) && is_internal(MARKER));
}

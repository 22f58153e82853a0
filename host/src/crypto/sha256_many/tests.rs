use proptest::prelude::*;
use sha2::{Digest, Sha256};

use super::{hash_each, hash_messages, hash_pairs, lanes, shani};

fn one_by_one(data: &[u8], size: usize) -> Vec<[u8; 32]> {
    data.chunks_exact(size)
        .map(|piece| Sha256::digest(piece).into())
        .collect()
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

/// Every padding shape: sizes around the block boundaries (55/56 bytes left is where the
/// padding spills into a second block), the state's 129-byte leaves and Merkle pairs, with
/// counts below, at and past one group of sixteen and a trailing partial piece.
#[test]
fn every_size_and_count_hashes_as_sha2_does() {
    let sizes = [
        1, 3, 31, 32, 55, 56, 57, 63, 64, 65, 100, 119, 120, 121, 127, 128, 129, 184, 192, 200,
        1000,
    ];
    for size in sizes {
        for count in [0, 1, 15, 16, 17, 31, 32, 33, 50] {
            let mut data = bytes(size * count + size / 2, size as u8);
            data.push(7);
            let mut got = Vec::new();
            hash_each(&data, size, &mut got);
            assert_eq!(got, one_by_one(&data, size), "size {size}, count {count}");
        }
    }
}

#[test]
fn the_sixteen_lanes_hash_as_sha2_does_where_the_cpu_has_them() {
    if !lanes::available() {
        eprintln!("no AVX-512 here: the lanes are not run (hash_each falls back to sha2)");
        return;
    }
    for size in [1, 55, 56, 64, 121, 129, 130, 256] {
        let data = bytes(size * 48, 0x5a);
        let mut got = Vec::new();
        let done = lanes::hash_groups(&data, size, &mut got);
        assert_eq!(
            done,
            data.len(),
            "size {size}: all three groups go through the lanes"
        );
        assert_eq!(got, one_by_one(&data, size), "size {size}");
    }
}

/// The SHA-NI ways on their own (`hash_each` reaches them only where AVX-512 is missing, or
/// for what the sixteen lanes leave): whole groups of four of every padding shape, and
/// messages of different lengths finished one by one past their common blocks.
#[test]
fn the_sha_extension_ways_hash_as_sha2_does_where_the_cpu_has_them() {
    if !shani::available() {
        eprintln!("no SHA extensions here: the ways are not run");
        return;
    }
    for size in [
        1, 16, 48, 55, 56, 63, 64, 65, 80, 119, 120, 121, 128, 129, 130, 256, 1000,
    ] {
        let data = bytes(size * 12 + size / 2, size as u8);
        let mut got = Vec::new();
        let done = shani::hash_groups(&data, size, &mut got);
        assert_eq!(done, size * 12, "size {size}: three whole groups of four");
        assert_eq!(got, one_by_one(&data[..done], size), "size {size}");
    }
    let data = bytes(9000, 0x33);
    let lengths = [0, 64, 65, 700, 701, 4096, 63, 8999, 1, 128, 129, 3000, 55];
    let messages: Vec<&[u8]> = lengths.iter().map(|&len| &data[..len]).collect();
    let mut got = Vec::new();
    let done = shani::hash_message_groups(&messages, &mut got);
    assert_eq!(done, 12, "three whole groups of four");
    let expected: Vec<[u8; 32]> = messages[..done]
        .iter()
        .map(|m| Sha256::digest(m).into())
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn pairs_hash_to_their_parents_and_an_odd_last_node_is_left_alone() {
    let nodes: Vec<[u8; 32]> = (0..37u8).map(|i| [i; 32]).collect();
    let mut got = Vec::new();
    hash_pairs(&nodes, &mut got);
    let expected: Vec<[u8; 32]> = nodes
        .chunks_exact(2)
        .map(|pair| {
            Sha256::new()
                .chain_update(pair[0])
                .chain_update(pair[1])
                .finalize()
                .into()
        })
        .collect();
    assert_eq!(got.len(), 18);
    assert_eq!(got, expected);
}

#[test]
fn a_zero_size_yields_nothing_and_appends_after_what_is_there() {
    let mut out = vec![[9u8; 32]];
    hash_each(&[1, 2, 3], 0, &mut out);
    assert_eq!(out, vec![[9u8; 32]]);
    hash_each(&[1, 2, 3], 3, &mut out);
    assert_eq!(out, vec![[9u8; 32], Sha256::digest([1, 2, 3]).into()]);
}

/// Messages of different lengths in one group: the lanes run the blocks all of them have and
/// each finishes on its own, whatever its tail (every padding shape, and an empty message,
/// which makes the common part nothing).
#[test]
fn messages_of_different_lengths_hash_as_sha2_does() {
    let lengths: Vec<usize> = (0..40).map(|i| 300 + i * 61 % 257).collect();
    let owned: Vec<Vec<u8>> = lengths.iter().map(|&n| bytes(n, n as u8)).collect();
    let messages: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    let mut got = Vec::new();
    hash_messages(&messages, &mut got);
    let expected: Vec<[u8; 32]> = messages.iter().map(|m| Sha256::digest(m).into()).collect();
    assert_eq!(got, expected);

    let mut with_empty = messages.clone();
    with_empty[3] = &[];
    with_empty[20] = &owned[0][..64];
    let mut got = Vec::new();
    hash_messages(&with_empty, &mut got);
    let expected: Vec<[u8; 32]> = with_empty
        .iter()
        .map(|m| Sha256::digest(m).into())
        .collect();
    assert_eq!(got, expected);
    if lanes::available() {
        let mut out = Vec::new();
        assert_eq!(
            lanes::hash_message_groups(&messages, &mut out),
            32,
            "two groups in lanes"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn any_messages_hash_as_sha2_does(lengths in proptest::collection::vec(0usize..700, 0..40), seed: u8) {
        let owned: Vec<Vec<u8>> = lengths.iter().map(|&n| bytes(n, seed ^ n as u8)).collect();
        let messages: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let mut got = Vec::new();
        hash_messages(&messages, &mut got);
        let expected: Vec<[u8; 32]> = messages.iter().map(|m| Sha256::digest(m).into()).collect();
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn any_bytes_hash_as_sha2_does(data in proptest::collection::vec(any::<u8>(), 0..6000), size in 1usize..300) {
        let mut got = Vec::new();
        hash_each(&data, size, &mut got);
        prop_assert_eq!(got, one_by_one(&data, size));
    }
}

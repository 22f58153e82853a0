use proptest::prelude::*;
use sha2::{Digest, Sha256};

use super::{hash_each, hash_pairs, lanes};

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

proptest! {
    #[test]
    fn any_bytes_hash_as_sha2_does(data in proptest::collection::vec(any::<u8>(), 0..6000), size in 1usize..300) {
        let mut got = Vec::new();
        hash_each(&data, size, &mut got);
        prop_assert_eq!(got, one_by_one(&data, size));
    }
}

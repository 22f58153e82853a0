#[test]
fn root_with_matches_applying_the_changes() {
    for len in [0usize, 1, 2, 3, 5, 8, 9, 33] {
        let leaves: Vec<Hash32> = (0..len).map(|i| [i as u8; 32]).collect();
        let tree = MerkleTree::from_leaves(leaves.clone());
        for appended in [0usize, 1, 3, 9] {
            let new: Vec<Hash32> = (0..appended).map(|i| [200 - i as u8; 32]).collect();
            let updates: Vec<(u64, Hash32)> =
                (0..len).step_by(3).map(|i| (i as u64, [77; 32])).collect();
            let predicted = tree.root_with(&updates, &new).unwrap();
            let mut applied = tree.clone();
            applied.set_many(&updates).unwrap();
            applied.extend_from_slice(&new).unwrap();
            assert_eq!(predicted, applied.root(), "len {len}, appended {appended}");
        }
    }
    let tree = MerkleTree::from_leaves(vec![[1; 32]]);
    assert!(tree.root_with(&[(1, [0; 32])], &[]).is_err());
}
use super::*;
use proptest::collection::vec;
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use std::time::Instant;

fn h(left: &Hash32, right: &Hash32) -> Hash32 {
    let mut buf = [0u8; 64];
    buf[..32].copy_from_slice(left);
    buf[32..].copy_from_slice(right);
    Sha256::digest(buf).into()
}

fn len_leaf(len: u64) -> Hash32 {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&len.to_le_bytes());
    out
}

fn leaf(i: u64) -> Hash32 {
    let mut out = [0xA5u8; 32];
    out[..8].copy_from_slice(&i.to_le_bytes());
    out
}

/// Independent reference: pad to a power of two with zero leaves and hash up.
fn naive_root(leaves: &[Hash32]) -> Hash32 {
    let width = leaves.len().max(1).next_power_of_two();
    let mut level = leaves.to_vec();
    level.resize(width, [0u8; 32]);
    while level.len() > 1 {
        level = level.chunks(2).map(|p| h(&p[0], &p[1])).collect();
    }
    h(&level[0], &len_leaf(leaves.len() as u64))
}

fn pushed(leaves: &[Hash32]) -> MerkleTree {
    let mut tree = MerkleTree::new();
    for (i, l) in leaves.iter().enumerate() {
        assert_eq!(tree.push(*l).unwrap(), i as u64);
    }
    tree
}

#[test]
fn zero_hashes_chain() {
    let z = zero_hashes();
    assert_eq!(z[0], [0u8; 32]);
    for d in 0..64 {
        assert_eq!(z[d + 1], h(&z[d], &z[d]));
    }
    let z65 = h(&z[64], &z[64]);
    assert_eq!(zero_hash(65), z65);
    assert_eq!(zero_hash(66), h(&z65, &z65));
}

#[test]
fn known_small_vectors() {
    let z0 = [0u8; 32];
    let z1 = h(&z0, &z0);
    let (a, b, c, d, e) = (leaf(1), leaf(2), leaf(3), leaf(4), leaf(5));

    assert_eq!(MerkleTree::new().root(), h(&z0, &len_leaf(0)));
    assert_eq!(MerkleTree::from_leaves(vec![a]).root(), h(&a, &len_leaf(1)));
    assert_eq!(
        MerkleTree::from_leaves(vec![a, b]).root(),
        h(&h(&a, &b), &len_leaf(2))
    );
    assert_eq!(
        MerkleTree::from_leaves(vec![a, b, c]).root(),
        h(&h(&h(&a, &b), &h(&c, &z0)), &len_leaf(3))
    );
    assert_eq!(
        MerkleTree::from_leaves(vec![a, b, c, d, e]).root(),
        h(
            &h(&h(&h(&a, &b), &h(&c, &d)), &h(&h(&e, &z0), &z1)),
            &len_leaf(5)
        )
    );
    // A zero leaf is indistinguishable from padding in the tree root, but not in the root.
    assert_eq!(
        MerkleTree::from_leaves(vec![a, b, c, z0]).tree_root(),
        MerkleTree::from_leaves(vec![a, b, c]).tree_root()
    );
    assert_ne!(
        MerkleTree::from_leaves(vec![a, b, c, z0]).root(),
        MerkleTree::from_leaves(vec![a, b, c]).root()
    );
}

#[test]
fn levels_long_enough_to_hash_on_two_threads_give_the_serial_tree() {
    // Odd and even lengths around the threshold: the halves split at an even position and
    // only the right one may end in a lone node.
    for n in [PARALLEL_LEVEL_LEN + 1, PARALLEL_LEVEL_LEN + 3] {
        let leaves: Vec<Hash32> = (0..n as u64).map(leaf).collect();
        let built = MerkleTree::from_leaves(leaves.clone());
        assert_eq!(built.root(), naive_root(&leaves), "len {n}");
    }
}

#[test]
fn map_halves_is_the_serial_map_whatever_the_length_and_alignment() {
    for len in [0usize, 1, 2, 3, 4, 5, 17, 1000, 1001] {
        let items: Vec<u64> = (0..len as u64).collect();
        for align in [1usize, 2, 3, 8] {
            // A map that depends on the offset, so a wrong offset shows.
            let mapped = map_halves(&items, align, |at, half| {
                half.iter()
                    .enumerate()
                    .map(|(i, x)| (x * 10, (at + i) as u64))
                    .collect()
            });
            let serial: Vec<(u64, u64)> = items.iter().map(|x| (x * 10, *x)).collect();
            assert_eq!(mapped, serial, "len {len} align {align}");
        }
    }
    // Pairs never straddle the split.
    let items: Vec<u64> = (0..11).collect();
    let sums = map_halves(&items, 2, |_, half| {
        half.chunks(2).map(|p| p.iter().sum::<u64>()).collect()
    });
    assert_eq!(sums, vec![1, 5, 9, 13, 17, 10]);
}

#[test]
fn push_matches_from_leaves_for_all_small_lengths() {
    let leaves: Vec<Hash32> = (0..=70).map(leaf).collect();
    let mut tree = MerkleTree::new();
    for n in 0..=70usize {
        let built = MerkleTree::from_leaves(leaves[..n].to_vec());
        assert_eq!(tree.root(), built.root(), "len {n}");
        assert_eq!(tree, built, "len {n}");
        assert_eq!(tree.root(), naive_root(&leaves[..n]), "len {n}");
        for split in [0, n / 3, n] {
            let mut extended = MerkleTree::from_leaves(leaves[..split].to_vec());
            extended.extend_from_slice(&leaves[split..n]).unwrap();
            assert_eq!(extended, built, "len {n} split {split}");
        }
        assert_eq!(tree.len(), n as u64);
        assert_eq!(
            tree.depth(),
            (n.max(1) as u64).next_power_of_two().trailing_zeros() as usize
        );
        if n < 70 {
            tree.push(leaves[n]).unwrap();
        }
    }
}

#[test]
fn truncate_to_every_length_matches_from_leaves() {
    let leaves: Vec<Hash32> = (0..=70).map(leaf).collect();
    let full = MerkleTree::from_leaves(leaves.clone());
    for n in 0..=70usize {
        let mut tree = full.clone();
        tree.truncate(n as u64).unwrap();
        let built = MerkleTree::from_leaves(leaves[..n].to_vec());
        assert_eq!(tree.levels, built.levels, "len {n}");
        assert_eq!(tree.root(), naive_root(&leaves[..n]), "len {n}");
        // Growing back gives the original tree.
        tree.extend_from_slice(&leaves[n..]).unwrap();
        assert_eq!(tree, full, "len {n}");
    }
    let mut tree = full.clone();
    assert_eq!(
        tree.truncate(72),
        Err(MerkleError::TruncateBeyondLen {
            new_len: 72,
            len: 71
        })
    );
    assert_eq!(
        tree.truncate(u64::MAX),
        Err(MerkleError::TruncateBeyondLen {
            new_len: u64::MAX,
            len: 71
        })
    );
    tree.truncate(71).unwrap();
    assert_eq!(tree, full);
    tree.truncate(0).unwrap();
    assert_eq!(tree, MerkleTree::new());
    assert_eq!(tree.root(), MerkleTree::new().root());
    tree.truncate(0).unwrap();
    assert!(MerkleTree::new().truncate(1).is_err());
    assert!(
        MerkleError::TruncateBeyondLen { new_len: 3, len: 2 }
            .to_string()
            .contains("truncate")
    );
}

#[test]
fn out_of_range_updates_are_rejected_without_change() {
    let mut tree = MerkleTree::from_leaves((0..5).map(leaf).collect());
    let before = tree.clone();
    assert_eq!(
        tree.set(5, leaf(9)),
        Err(MerkleError::IndexOutOfRange { index: 5, len: 5 })
    );
    assert_eq!(
        tree.set_many(&[(1, leaf(9)), (7, leaf(9))]),
        Err(MerkleError::IndexOutOfRange { index: 7, len: 5 })
    );
    assert_eq!(tree, before);
    assert_eq!(tree.leaf(4), Some(leaf(4)));
    assert_eq!(tree.leaf(5), None);
    tree.set_many(&[(1, leaf(8)), (1, leaf(9))]).unwrap();
    assert_eq!(tree.leaf(1), Some(leaf(9)));
    assert_eq!(
        MerkleTree::new().set(0, leaf(0)),
        Err(MerkleError::IndexOutOfRange { index: 0, len: 0 })
    );
}

#[test]
fn invalid_ranges_are_rejected() {
    let tree = MerkleTree::from_leaves((0..5).map(leaf).collect());
    for (s, e) in [(0, 0), (3, 2), (0, 6), (5, 6), (u64::MAX, 0)] {
        assert_eq!(
            tree.range_proof(s, e),
            Err(MerkleError::InvalidRange {
                start: s,
                end: e,
                len: 5
            })
        );
    }
    assert!(MerkleTree::new().range_proof(0, 1).is_err());
    let proof = tree.range_proof(0, 5).unwrap();
    assert!(verify_range(&tree.root(), 0, &[], &proof).is_err());
    assert!(verify_range(&tree.root(), u64::MAX, &[leaf(0)], &proof).is_err());
}

#[test]
fn proof_sizes_are_bounded() {
    for len in 1..=70u64 {
        let tree = MerkleTree::from_leaves((0..len).map(leaf).collect());
        for s in 0..len {
            for e in s + 1..=len {
                let p = tree.range_proof(s, e).unwrap();
                assert!(p.hashes().len() <= 2 * tree.depth());
                let leaves: Vec<_> = (s..e).map(leaf).collect();
                verify_range(&tree.root(), s, &leaves, &p).unwrap();
            }
        }
        // The full range needs no siblings at all.
        assert!(tree.range_proof(0, len).unwrap().hashes().is_empty());
    }
}

#[test]
fn from_bytes_reports_what_is_wrong() {
    let tree = MerkleTree::from_leaves((0..10).map(leaf).collect());
    let bytes = tree.range_proof(3, 7).unwrap().to_bytes();
    assert!(matches!(
        RangeProof::from_bytes(&[]),
        Err(MerkleError::ProofTruncated {
            field: "version",
            ..
        })
    ));
    assert_eq!(
        RangeProof::from_bytes(&[2]),
        Err(MerkleError::UnsupportedProofVersion { version: 2 })
    );
    assert!(matches!(
        RangeProof::from_bytes(&bytes[..5]),
        Err(MerkleError::ProofTruncated {
            field: "tree length",
            ..
        })
    ));
    assert!(matches!(
        RangeProof::from_bytes(&bytes[..11]),
        Err(MerkleError::ProofTruncated {
            field: "hash count",
            ..
        })
    ));
    assert!(matches!(
        RangeProof::from_bytes(&bytes[..bytes.len() - 1]),
        Err(MerkleError::ProofTruncated {
            field: "hashes",
            ..
        })
    ));
    let mut long = bytes.clone();
    long.push(0);
    assert_eq!(
        RangeProof::from_bytes(&long),
        Err(MerkleError::ProofTrailingBytes { extra: 1 })
    );
    let mut empty_tree = bytes.clone();
    empty_tree[1..9].fill(0);
    assert_eq!(
        RangeProof::from_bytes(&empty_tree),
        Err(MerkleError::ProofEmptyTree)
    );
    let mut huge = bytes.clone();
    huge[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        RangeProof::from_bytes(&huge),
        Err(MerkleError::ProofTooManyHashes {
            count: u32::MAX as u64,
            max: 8
        })
    );
    for n in 0..bytes.len() {
        assert!(RangeProof::from_bytes(&bytes[..n]).is_err(), "prefix {n}");
    }
    // Every error renders a message.
    assert!(MerkleError::RootMismatch.to_string().contains("root"));
}

#[derive(Debug, Clone)]
enum Op {
    Push(Hash32),
    Extend(Vec<Hash32>),
    Set(usize, Hash32),
    SetMany(Vec<(usize, Hash32)>),
    Truncate(Cut),
}

/// Where a truncation cuts, relative to the current length.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// To `seed % (len + 1)`.
    Within(usize),
    ToZero,
    /// To the current length: a no-op.
    ToLen,
    /// To `len + 1 + extra`: an error.
    Past(u64),
}

fn cut() -> impl Strategy<Value = Cut> {
    prop_oneof![
        6 => any::<usize>().prop_map(Cut::Within),
        1 => Just(Cut::ToZero),
        1 => Just(Cut::ToLen),
        1 => (0u64..3).prop_map(Cut::Past),
    ]
}

/// Applies `cut` to both `tree` and `model`, checking the outcome.
fn apply_cut(
    tree: &mut MerkleTree,
    model: &mut Vec<Hash32>,
    cut: Cut,
) -> Result<(), TestCaseError> {
    let len = model.len();
    let new_len = match cut {
        Cut::Within(seed) => seed % (len + 1),
        Cut::ToZero => 0,
        Cut::ToLen => len,
        Cut::Past(extra) => {
            let before = tree.clone();
            let new_len = len as u64 + 1 + extra;
            prop_assert_eq!(
                tree.truncate(new_len),
                Err(MerkleError::TruncateBeyondLen {
                    new_len,
                    len: len as u64
                })
            );
            prop_assert_eq!(&*tree, &before);
            return Ok(());
        }
    };
    tree.truncate(new_len as u64).unwrap();
    model.truncate(new_len);
    Ok(())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<Hash32>().prop_map(Op::Push),
        vec(any::<Hash32>(), 0..40).prop_map(Op::Extend),
        (any::<usize>(), any::<Hash32>()).prop_map(|(i, l)| Op::Set(i, l)),
        vec((any::<usize>(), any::<Hash32>()), 0..20).prop_map(Op::SetMany),
        cut().prop_map(Op::Truncate),
    ]
}

/// A non-empty range inside `len` from two seeds.
fn range(len: usize, a: usize, b: usize) -> (u64, u64) {
    let start = a % len;
    let end = start + 1 + b % (len - start);
    (start as u64, end as u64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn incremental_updates_match_rebuild(
        initial in vec(any::<Hash32>(), 0..90),
        ops in vec(op(), 0..30),
    ) {
        let mut tree = MerkleTree::from_leaves(initial.clone());
        let mut model = initial;
        for op in ops {
            match op {
                Op::Push(l) => {
                    prop_assert_eq!(tree.push(l).unwrap(), model.len() as u64);
                    model.push(l);
                }
                Op::Extend(leaves) => {
                    tree.extend_from_slice(&leaves).unwrap();
                    model.extend_from_slice(&leaves);
                }
                Op::Set(i, l) if model.is_empty() => {
                    prop_assert!(tree.set(i as u64, l).is_err());
                }
                Op::Set(i, l) => {
                    let i = i % model.len();
                    tree.set(i as u64, l).unwrap();
                    model[i] = l;
                }
                Op::SetMany(updates) => {
                    if model.is_empty() {
                        prop_assert_eq!(tree.set_many(&[]), Ok(()));
                        continue;
                    }
                    let updates: Vec<(u64, Hash32)> = updates
                        .into_iter()
                        .map(|(i, l)| ((i % model.len()) as u64, l))
                        .collect();
                    tree.set_many(&updates).unwrap();
                    for (i, l) in updates {
                        model[i as usize] = l;
                    }
                }
                Op::Truncate(cut) => apply_cut(&mut tree, &mut model, cut)?,
            }
            let rebuilt = MerkleTree::from_leaves(model.clone());
            prop_assert_eq!(tree.root(), rebuilt.root());
            prop_assert_eq!(&tree, &rebuilt);
        }
        prop_assert_eq!(tree.root(), naive_root(&model));
    }

    /// Push / set / truncate, truncation-heavy, compared after every step with a rebuild of
    /// a model `Vec` (root and every level), with `root_with` predicting each push and set.
    #[test]
    fn truncate_push_set_match_rebuild(
        initial in vec(any::<Hash32>(), 0..200),
        ops in vec(
            prop_oneof![
                3 => any::<Hash32>().prop_map(Op::Push),
                2 => (any::<usize>(), any::<Hash32>()).prop_map(|(i, l)| Op::Set(i, l)),
                2 => cut().prop_map(Op::Truncate),
            ],
            0..40,
        ),
    ) {
        let mut tree = MerkleTree::from_leaves(initial.clone());
        let mut model = initial;
        for op in ops {
            match op {
                Op::Push(l) => {
                    let predicted = tree.root_with(&[], &[l]).unwrap();
                    prop_assert_eq!(tree.push(l).unwrap(), model.len() as u64);
                    prop_assert_eq!(tree.root(), predicted);
                    model.push(l);
                }
                Op::Set(i, l) if model.is_empty() => {
                    prop_assert!(tree.set(i as u64, l).is_err());
                }
                Op::Set(i, l) => {
                    let i = i % model.len();
                    let predicted = tree.root_with(&[(i as u64, l)], &[]).unwrap();
                    tree.set(i as u64, l).unwrap();
                    prop_assert_eq!(tree.root(), predicted);
                    model[i] = l;
                }
                Op::Truncate(cut) => apply_cut(&mut tree, &mut model, cut)?,
                Op::Extend(_) | Op::SetMany(_) => unreachable!("not generated"),
            }
            let rebuilt = MerkleTree::from_leaves(model.clone());
            prop_assert_eq!(tree.len(), model.len() as u64);
            prop_assert_eq!(tree.depth(), rebuilt.depth());
            prop_assert_eq!(tree.root(), rebuilt.root());
            // Every level, node for node (the derived `PartialEq` compares `levels`).
            prop_assert_eq!(&tree.levels, &rebuilt.levels);
        }
        prop_assert_eq!(tree.root(), naive_root(&model));
    }

    #[test]
    fn range_proofs_verify_and_detect_tampering(
        leaves in vec(any::<Hash32>(), 1..150),
        a in any::<usize>(),
        b in any::<usize>(),
        which in any::<usize>(),
        bit in 0u8..8,
    ) {
        let tree = MerkleTree::from_leaves(leaves.clone());
        let root = tree.root();
        let (start, end) = range(leaves.len(), a, b);
        let slice = &leaves[start as usize..end as usize];
        let proof = tree.range_proof(start, end).unwrap();
        prop_assert!(proof.hashes().len() <= 2 * tree.depth());
        prop_assert_eq!(verify_range(&root, start, slice, &proof), Ok(()));

        let bytes = proof.to_bytes();
        prop_assert_eq!(RangeProof::from_bytes(&bytes), Ok(proof.clone()));

        // Any flipped leaf bit.
        let mut bad = slice.to_vec();
        let n = bad.len();
        bad[which % n][(which / n) % 32] ^= 1 << bit;
        prop_assert!(verify_range(&root, start, &bad, &proof).is_err());

        // Any flipped proof byte: rejected when decoding or when verifying.
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 1 << bit;
            let rejected = match RangeProof::from_bytes(&bad) {
                Err(_) => true,
                Ok(p) => verify_range(&root, start, slice, &p).is_err(),
            };
            prop_assert!(rejected, "flipping byte {} bit {} went unnoticed", i, bit);
        }

        // Shifted start.
        prop_assert!(verify_range(&root, start + 1, slice, &proof).is_err());
        if start > 0 {
            prop_assert!(verify_range(&root, start - 1, slice, &proof).is_err());
        }
        // Wrong root, dropped or extra leaf.
        let mut other = root;
        other[0] ^= 1;
        prop_assert!(verify_range(&other, start, slice, &proof).is_err());
        prop_assert!(verify_range(&root, start, &slice[..slice.len() - 1], &proof).is_err());
        if (end as usize) < leaves.len() {
            let wider = &leaves[start as usize..end as usize + 1];
            prop_assert!(verify_range(&root, start, wider, &proof).is_err());
        }
    }

    #[test]
    fn a_tree_from_proven_ranges_is_the_tree_from_its_leaves(
        leaves in vec(any::<Hash32>(), 1..300),
        cuts in vec(any::<usize>(), 0..12),
        dropped in any::<usize>(),
    ) {
        let tree = MerkleTree::from_leaves(leaves.clone());
        let root = tree.root();
        let n = leaves.len();
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % n).collect();
        bounds.extend([0, n]);
        bounds.sort();
        bounds.dedup();
        let proven: Vec<(&[Hash32], RangeNodes)> = bounds
            .windows(2)
            .map(|w| {
                let (start, end) = (w[0] as u64, w[1] as u64);
                let proof = tree.range_proof(start, end).unwrap();
                let slice = &leaves[w[0]..w[1]];
                (slice, verify_range_keeping_nodes(&root, start, slice, &proof).unwrap())
            })
            .collect();
        let ranges: Vec<(&[Hash32], &RangeNodes)> =
            proven.iter().map(|(l, r)| (*l, r)).collect();
        let rebuilt = MerkleTree::from_proven_ranges(n as u64, &ranges).unwrap();
        prop_assert!(rebuilt == tree);
        // A range left out leaves nodes uncovered.
        let mut gapped = ranges.clone();
        gapped.remove(dropped % ranges.len());
        prop_assert!(MerkleTree::from_proven_ranges(n as u64, &gapped).is_err());
    }

    /// Subtrees of one size hashed on their own give the tree's nodes at their level, and
    /// with the levels above them known they build the tree; a subtree cut short or
    /// misaligned is refused, and so are known levels that do not reach the root.
    #[test]
    fn subtrees_give_the_trees_nodes_and_with_the_levels_above_build_the_tree(
        leaves in vec(any::<Hash32>(), 1..300),
        level in 0usize..10,
    ) {
        let tree = MerkleTree::from_leaves(leaves.clone());
        let n = leaves.len() as u64;
        let depth = depth_for_len(n);
        let level = level.min(depth);
        let width = 1usize << level;
        let upper: Vec<Vec<Hash32>> = (level + 1..=depth)
            .map(|d| (0..level_count(n, d)).map(|i| tree.node(d, i).unwrap()).collect())
            .collect();
        let mut builder = ProvenTreeBuilder::above(n, level, &upper).unwrap();
        for (k, slice) in leaves.chunks(width).enumerate() {
            let start = (k * width) as u64;
            let (node, nodes) = subtree_keeping_nodes(start, slice, n, level).unwrap();
            prop_assert_eq!(node, tree.node(level, k as u64).unwrap());
            builder.push(slice, &nodes).unwrap();
            if slice.len() > 1 {
                prop_assert!(subtree_keeping_nodes(start, &slice[1..], n, level).is_err());
            }
            if level > 0 {
                prop_assert!(subtree_keeping_nodes(start + 1, slice, n, level).is_err());
            }
        }
        prop_assert!(builder.finish().unwrap() == tree);
        prop_assert!(subtree_keeping_nodes(n, &leaves[..1], n, 0).is_err());
        if let Some((_, short)) = upper.split_first() {
            prop_assert!(ProvenTreeBuilder::above(n, level, short).is_err());
        }
    }

    #[test]
    fn from_bytes_never_panics_and_accepts_only_canonical(
        bytes in vec(any::<u8>(), 0..300),
    ) {
        if let Ok(proof) = RangeProof::from_bytes(&bytes) {
            prop_assert_eq!(proof.to_bytes(), bytes);
        }
    }

    #[test]
    fn structured_garbage_never_panics(
        len in any::<u64>(),
        count in 0u32..140,
        hashes in vec(any::<Hash32>(), 0..140),
        start in any::<u64>(),
        leaves in vec(any::<Hash32>(), 0..40),
    ) {
        let mut bytes = vec![RANGE_PROOF_VERSION];
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&count.to_le_bytes());
        for hash in &hashes {
            bytes.extend_from_slice(hash);
        }
        if let Ok(proof) = RangeProof::from_bytes(&bytes) {
            prop_assert_eq!(proof.hashes().len(), count as usize);
            let _ = verify_range(&[0u8; 32], start % len.max(1), &leaves, &proof);
            let _ = verify_range(&[0u8; 32], start, &leaves, &proof);
        }
    }
}

/// Run with `cargo test --release -- --ignored --nocapture`.
#[test]
#[ignore = "timing; run in release"]
fn timing_two_million_leaves() {
    const N: u64 = 2_000_000;
    let leaves: Vec<Hash32> = (0..N).map(leaf).collect();

    let t = Instant::now();
    let mut acc = [7u8; 32];
    for _ in 0..1_000_000 {
        acc = hash_pair(&acc, &acc);
    }
    println!(
        "sha256(64 bytes): {:?} per hash ({})",
        t.elapsed() / 1_000_000,
        acc[0]
    );

    let t = Instant::now();
    let mut tree = MerkleTree::from_leaves(leaves.clone());
    println!("from_leaves({N}): {:?}", t.elapsed());

    let t = Instant::now();
    let mut extended = MerkleTree::new();
    for chunk in leaves.chunks(100_000) {
        extended.extend_from_slice(chunk).unwrap();
    }
    println!("extend_from_slice x 20 chunks of 100k: {:?}", t.elapsed());
    assert_eq!(extended, tree);
    drop(extended);

    let t = Instant::now();
    let pushed_tree = pushed(&leaves);
    println!("push x {N}: {:?}", t.elapsed());
    assert_eq!(pushed_tree.root(), tree.root());
    drop(pushed_tree);

    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    const REPS: u32 = 1000;
    let t = Instant::now();
    for r in 0..REPS {
        let updates: Vec<(u64, Hash32)> =
            (0..16).map(|_| (next() % N, leaf(u64::from(r)))).collect();
        tree.set_many(&updates).unwrap();
    }
    println!(
        "set_many(16 random leaves): {:?} per batch",
        t.elapsed() / REPS
    );

    let t = Instant::now();
    for r in 0..REPS {
        for _ in 0..16 {
            tree.set(next() % N, leaf(u64::from(r))).unwrap();
        }
    }
    println!("16 x set: {:?} per batch", t.elapsed() / REPS);

    let t = Instant::now();
    let root = tree.root();
    let proof = tree.range_proof(1_000_000, 1_001_024).unwrap();
    let elapsed = t.elapsed();
    let slice: Vec<Hash32> = (1_000_000..1_001_024)
        .map(|i| tree.leaf(i).unwrap())
        .collect();
    let t = Instant::now();
    verify_range(&root, 1_000_000, &slice, &proof).unwrap();
    println!(
        "range proof of 1024 leaves: {} hashes, {} bytes, prove {:?}, verify {:?}",
        proof.hashes().len(),
        proof.to_bytes().len(),
        elapsed,
        t.elapsed()
    );
    assert_eq!(
        tree.root(),
        MerkleTree::from_leaves((0..N).map(|i| tree.leaf(i).unwrap()).collect()).root()
    );
}

//! Merkle trees in the shape of RFC 6962 / RFC 9162 (Certificate Transparency), for
//! checkpoints and inclusion proofs ([`super::checkpoint`]).
//!
//! A leaf hashes as SHA-256(`0x00` ‖ data) and an inner node as SHA-256(`0x01` ‖ left ‖
//! right), so a leaf can never be passed off as a node. A tree of `n` leaves whose size is
//! not a power of two splits at the largest power of two below `n`: the left subtree is
//! perfect, the right one holds the rest (RFC 9162 §2.1.1). The empty tree's root is
//! SHA-256 of nothing.
//!
//! Small on purpose: a root, an audit path for one leaf, the check of a path, and an
//! [`Accumulator`] that gives the root of every prefix of a list in one pass.

use sha2::{Digest as _, Sha256};

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// The hash of a leaf: SHA-256(`0x00` ‖ `data`).
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0x00]);
    h.update(data);
    h.finalize().into()
}

/// The hash of an inner node: SHA-256(`0x01` ‖ `left` ‖ `right`).
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([0x01]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root of the empty tree: SHA-256 of the empty string.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two strictly below `n` (`n` ≥ 2).
fn split(n: usize) -> usize {
    debug_assert!(n >= 2);
    let mut k = 1;
    while k << 1 < n {
        k <<= 1;
    }
    k
}

/// The root of the tree over `leaves` (already leaf-hashed).
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

/// The audit path of leaf `index` in the tree over `leaves`: the sibling hashes from the
/// leaf up to the root (RFC 6962 §2.1.1 `PATH`). `None` when `index` is out of range.
pub fn path(index: usize, leaves: &[Hash]) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    let mut out = Vec::new();
    fill_path(index, leaves, &mut out);
    Some(out)
}

fn fill_path(index: usize, leaves: &[Hash], out: &mut Vec<Hash>) {
    let n = leaves.len();
    if n <= 1 {
        return;
    }
    let k = split(n);
    if index < k {
        fill_path(index, &leaves[..k], out);
        out.push(root(&leaves[k..]));
    } else {
        fill_path(index - k, &leaves[k..], out);
        out.push(root(&leaves[..k]));
    }
}

/// The root that `leaf` at `index` in a tree of `size` leaves hashes up to along `path`
/// (RFC 9162 §2.1.3.2); `None` when the path cannot belong to such a tree (the index is out
/// of range, or the path is too short or too long).
///
/// The path alone does not pin `size` (leaf 0 has the same path in trees of 13 and 14
/// leaves): compare the result with a root signed together with its size.
pub fn root_from_path(index: u64, size: u64, leaf: &Hash, path: &[Hash]) -> Option<Hash> {
    if index >= size {
        return None;
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if s == 0 {
            return None;
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    (s == 0).then_some(r)
}

/// The roots of a growing list's prefixes in one pass: push leaves in order, ask for the
/// root of what was pushed so far at any point. Keeps one hash per set bit of the count.
#[derive(Clone, Debug, Default)]
pub struct Accumulator {
    /// The roots of the perfect subtrees the count decomposes into, largest first, with
    /// their sizes.
    stack: Vec<(u64, Hash)>,
    count: u64,
}

impl Accumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a leaf (already leaf-hashed).
    pub fn push(&mut self, leaf: Hash) {
        let mut size = 1_u64;
        let mut hash = leaf;
        while let Some(&(top_size, top)) = self.stack.last() {
            if top_size != size {
                break;
            }
            self.stack.pop();
            hash = node_hash(&top, &hash);
            size <<= 1;
        }
        self.stack.push((size, hash));
        self.count += 1;
    }

    /// How many leaves were pushed.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The accumulator's state: the roots of the perfect subtrees its count decomposes
    /// into, largest (leftmost) first, one per set bit of [`Accumulator::count`]. With the
    /// count, all [`Accumulator::from_frontier`] needs to carry on without the leaves.
    pub fn frontier(&self) -> Vec<Hash> {
        self.stack.iter().map(|&(_, h)| h).collect()
    }

    /// An accumulator that has seen `count` leaves whose [`Accumulator::frontier`] is
    /// `roots`: pushing further leaves gives the roots the full list would. `None` when
    /// `roots` does not hold exactly one hash per set bit of `count`.
    pub fn from_frontier(count: u64, roots: &[Hash]) -> Option<Self> {
        if roots.len() != count.count_ones() as usize {
            return None;
        }
        // The subtree sizes are the set bits of `count`, largest first.
        let sizes = (0..64).rev().map(|b| 1_u64 << b).filter(|s| count & s != 0);
        Some(Self {
            stack: sizes.zip(roots.iter().copied()).collect(),
            count,
        })
    }

    /// Where the frontier's subtrees lie: `(first leaf, size, root)` of each, leftmost
    /// first. They are nodes of every tree of `count` or more leaves (RFC 9162 shape).
    fn subtrees(&self) -> Vec<(u64, u64, Hash)> {
        let mut lo = 0;
        self.stack
            .iter()
            .map(|&(size, h)| {
                let at = lo;
                lo += size;
                (at, size, h)
            })
            .collect()
    }

    /// The root of the tree over every leaf pushed so far.
    pub fn root(&self) -> Hash {
        let mut subtrees = self.stack.iter().rev();
        let Some(&(_, mut r)) = subtrees.next() else {
            return empty_root();
        };
        for (_, left) in subtrees {
            r = node_hash(left, &r);
        }
        r
    }
}

/// A tree whose first leaves are known only by the [`Accumulator`] that saw them (their
/// frontier) and whose later leaves are known one by one: what a journal keeps after it
/// pruned its oldest records. Gives the root and the audit path of any later leaf, the same
/// as [`root`] and [`path`] over the full list would.
#[derive(Debug)]
pub struct PrunedTree<'a> {
    /// The frontier's subtrees: `(first leaf, size, root)`.
    subtrees: Vec<(u64, u64, Hash)>,
    /// How many leaves the frontier stands for.
    base: u64,
    /// The leaves after them, in order.
    leaves: &'a [Hash],
}

impl<'a> PrunedTree<'a> {
    /// The tree of `base.count()` leaves known by `base`, followed by `leaves`.
    pub fn new(base: &Accumulator, leaves: &'a [Hash]) -> Self {
        Self {
            subtrees: base.subtrees(),
            base: base.count(),
            leaves,
        }
    }

    /// How many leaves the tree has.
    pub fn size(&self) -> u64 {
        self.base + self.leaves.len() as u64
    }

    /// The root of the leaves `lo..hi`, when it can be known: a range after the base, a
    /// subtree of the frontier, or a node made of such.
    fn node(&self, lo: u64, hi: u64) -> Option<Hash> {
        if lo >= self.base {
            let a = usize::try_from(lo - self.base).ok()?;
            let b = usize::try_from(hi - self.base).ok()?;
            return Some(root(self.leaves.get(a..b)?));
        }
        if let Some(&(_, _, h)) = self
            .subtrees
            .iter()
            .find(|&&(at, size, _)| at == lo && at + size == hi)
        {
            return Some(h);
        }
        if hi - lo < 2 {
            return None;
        }
        let k = split(usize::try_from(hi - lo).ok()?) as u64;
        Some(node_hash(&self.node(lo, lo + k)?, &self.node(lo + k, hi)?))
    }

    /// The root of the whole tree.
    pub fn root(&self) -> Option<Hash> {
        if self.size() == 0 {
            return Some(empty_root());
        }
        self.node(0, self.size())
    }

    /// The audit path of leaf `index` (at or after the base): as [`path`] over the full
    /// list. `None` for a pruned leaf or one out of range.
    pub fn path(&self, index: u64) -> Option<Vec<Hash>> {
        if index < self.base || index >= self.size() {
            return None;
        }
        let mut out = Vec::new();
        let (mut lo, mut hi) = (0, self.size());
        let mut siblings = Vec::new();
        while hi - lo > 1 {
            let k = split(usize::try_from(hi - lo).ok()?) as u64;
            if index < lo + k {
                siblings.push((lo + k, hi));
                hi = lo + k;
            } else {
                siblings.push((lo, lo + k));
                lo += k;
            }
        }
        for (a, b) in siblings.into_iter().rev() {
            out.push(self.node(a, b)?);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(&(i as u64).to_be_bytes()))
            .collect()
    }

    /// The tree computed the slow, obvious way: the RFC's recursive definition over the raw
    /// data, with its own hashing.
    fn naive_root(data: &[Vec<u8>]) -> Hash {
        fn sha(parts: &[&[u8]]) -> Hash {
            let mut h = Sha256::new();
            for p in parts {
                h.update(p);
            }
            h.finalize().into()
        }
        match data.len() {
            0 => sha(&[]),
            1 => sha(&[&[0], &data[0]]),
            n => {
                let mut k = 1;
                while k * 2 < n {
                    k *= 2;
                }
                let (l, r) = (naive_root(&data[..k]), naive_root(&data[k..]));
                sha(&[&[1], &l, &r])
            }
        }
    }

    #[test]
    fn the_rfc_shape_for_small_trees() {
        let l = leaves(3);
        assert_eq!(root(&[]), empty_root());
        assert_eq!(root(&l[..1]), l[0]);
        assert_eq!(root(&l[..2]), node_hash(&l[0], &l[1]));
        // Three leaves: the left subtree is the perfect pair, the third leaf stands alone.
        assert_eq!(root(&l), node_hash(&node_hash(&l[0], &l[1]), &l[2]));
        assert_eq!(path(2, &l), Some(vec![node_hash(&l[0], &l[1])]));
        assert_eq!(path(0, &l), Some(vec![l[1], l[2]]));
        assert_eq!(path(3, &l), None);
        // The empty-string digest, as RFC 6962 gives it.
        assert_eq!(
            hex::encode(empty_root()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    proptest! {
        #[test]
        fn every_path_leads_to_the_naive_root(n in 1_usize..120, seed in any::<u64>()) {
            let data: Vec<Vec<u8>> = (0..n).map(|i| format!("{seed}-{i}").into_bytes()).collect();
            let hashed: Vec<Hash> = data.iter().map(|d| leaf_hash(d)).collect();
            let expected = naive_root(&data);
            prop_assert_eq!(root(&hashed), expected);
            for i in 0..n {
                let p = path(i, &hashed).expect("in range");
                prop_assert_eq!(
                    root_from_path(i as u64, n as u64, &hashed[i], &p),
                    Some(expected)
                );
            }
        }

        #[test]
        fn the_accumulator_gives_every_prefix_root(n in 0_usize..300) {
            let l = leaves(n);
            let mut acc = Accumulator::new();
            prop_assert_eq!(acc.root(), root(&[]));
            for (i, leaf) in l.iter().enumerate() {
                acc.push(*leaf);
                prop_assert_eq!(acc.count(), i as u64 + 1);
                prop_assert_eq!(acc.root(), root(&l[..=i]));
            }
        }

        #[test]
        fn a_frontier_carries_on_as_if_every_leaf_were_pushed(
            n in 0_usize..300,
            more in 0_usize..300,
        ) {
            let l = leaves(n + more);
            let mut acc = Accumulator::new();
            for leaf in &l[..n] {
                acc.push(*leaf);
            }
            let frontier = acc.frontier();
            prop_assert_eq!(frontier.len(), n.count_ones() as usize);
            let mut resumed = Accumulator::from_frontier(n as u64, &frontier).expect("frontier");
            prop_assert_eq!(resumed.root(), root(&l[..n]));
            for (i, leaf) in l.iter().enumerate().skip(n) {
                resumed.push(*leaf);
                prop_assert_eq!(resumed.root(), root(&l[..=i]));
            }
            // One root too many or too few is refused.
            let mut longer = frontier.clone();
            longer.push(root(&[]));
            prop_assert!(Accumulator::from_frontier(n as u64, &longer).is_none());
            if !frontier.is_empty() {
                prop_assert!(Accumulator::from_frontier(n as u64, &frontier[1..]).is_none());
            }
        }

        #[test]
        fn a_pruned_tree_gives_the_full_trees_root_and_paths(
            n in 0_usize..200,
            more in 0_usize..200,
        ) {
            let l = leaves(n + more);
            let mut acc = Accumulator::new();
            for leaf in &l[..n] {
                acc.push(*leaf);
            }
            let tree = PrunedTree::new(&acc, &l[n..]);
            prop_assert_eq!(tree.root(), Some(root(&l)));
            for i in n..n + more {
                prop_assert_eq!(tree.path(i as u64), path(i, &l));
            }
            if n > 0 {
                prop_assert_eq!(tree.path(n as u64 - 1), None);
            }
            prop_assert_eq!(tree.path((n + more) as u64), None);
        }

        #[test]
        fn a_changed_path_index_size_or_leaf_fails(
            n in 2_usize..200,
            pick in any::<prop::sample::Index>(),
            which in any::<prop::sample::Index>(),
        ) {
            let l = leaves(n);
            let r = root(&l);
            let i = pick.index(n);
            let p = path(i, &l).expect("in range");
            let ok = |idx: u64, size: u64, leaf: &Hash, p: &[Hash]| {
                root_from_path(idx, size, leaf, p) == Some(r)
            };
            prop_assert!(ok(i as u64, n as u64, &l[i], &p));
            // Another leaf at this position.
            prop_assert!(!ok(i as u64, n as u64, &l[(i + 1) % n], &p));
            // This leaf at another position.
            prop_assert!(!ok(((i + 1) % n) as u64, n as u64, &l[i], &p));
            // (Another tree size may give the same root for some leaves, e.g. leaf 0 of 13
            // or 14: the size is bound by the signed checkpoint, which names it, not by the
            // path.)
            // A flipped bit in one sibling.
            let mut flipped = p.clone();
            let j = which.index(flipped.len());
            flipped[j][0] ^= 1;
            prop_assert!(!ok(i as u64, n as u64, &l[i], &flipped));
            // A truncated or lengthened path.
            prop_assert!(!ok(i as u64, n as u64, &l[i], &p[..p.len() - 1]));
            let mut longer = p;
            longer.push(r);
            prop_assert!(!ok(i as u64, n as u64, &l[i], &longer));
        }
    }
}

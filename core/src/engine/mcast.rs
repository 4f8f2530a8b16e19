//! Multicast forwarding trees (LFC's `-lfc-tree`): static groups of instances and
//! the binary, binomial and chain trees a packet travels down, forwarded by every
//! member's engine before its own delivery.
//!
//! A tree is laid over the sequence `root, members without root` (in the order the
//! group was created): position 0 is the root, and a position's children are
//! computed, not stored, so every member finds its own from the group, the root
//! (carried in the frame) and the shape (also in the frame: the root decides).

use super::*;

/// Most members a multicast group may have (an instance number is 16 bits).
pub const MCAST_MEMBERS_MAX: usize = u16::MAX as usize;
/// The group id meaning "every instance of my group" (LFC's broadcast).
pub const MCAST_ALL: u16 = 0xFFFE;
/// `dst_port` of a unicast packet.
pub(super) const UNICAST: u16 = 0xFFFF;
/// `dst_port` of a unicast packet for the personality itself (statistics), never
/// handed to the program's upcall.
pub(super) const INTERNAL: u16 = 0xFFFD;
/// Children one position can have: binary 2, chain 1, binomial one per bit.
pub(super) const MAX_CHILDREN: usize = 16;

/// Shape of a multicast forwarding tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Tree {
    /// Position `p` forwards to `2p + 1` and `2p + 2` (LFC's default: fan-out two).
    #[default]
    Binary = 0,
    /// Position `p` forwards to `p + 2^k` for every `2^k > p` (latency `log2 n` hops).
    Binomial = 1,
    /// Position `p` forwards to `p + 1` (throughput, `n - 1` hops).
    Chain = 2,
}

impl Tree {
    /// The shape for a wire value.
    pub fn from_u32(v: u32) -> Option<Tree> {
        match v {
            0 => Some(Tree::Binary),
            1 => Some(Tree::Binomial),
            2 => Some(Tree::Chain),
            _ => None,
        }
    }

    /// Children of position `p` in a tree of `n` positions, written to `out`;
    /// returns how many.
    pub fn children(self, p: usize, n: usize, out: &mut [usize; MAX_CHILDREN]) -> usize {
        let mut k = 0;
        let mut push = |c: usize| {
            if c < n && k < MAX_CHILDREN {
                out[k] = c;
                k += 1;
            }
        };
        match self {
            Tree::Binary => {
                push(2 * p + 1);
                push(2 * p + 2);
            }
            Tree::Chain => push(p + 1),
            Tree::Binomial => {
                let mut step = 1usize;
                while step < n {
                    if step > p {
                        push(p + step);
                    }
                    step <<= 1;
                }
            }
        }
        k
    }
}

/// One static multicast group: `len` instance numbers from `first` in the member arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct McastGroup {
    used: bool,
    first: u32,
    len: u16,
}

impl McastGroup {
    /// An unused slot.
    pub const EMPTY: McastGroup = McastGroup {
        used: false,
        first: 0,
        len: 0,
    };
}

/// Multicast groups and the arena their member lists live in.
#[derive(Debug)]
pub struct McastTables<'a> {
    /// Groups by id.
    pub groups: ManagedSlice<'a, McastGroup>,
    /// Member lists, back to back.
    pub members: ManagedSlice<'a, NodeId>,
    pub(super) used_members: usize,
}

impl Default for McastTables<'_> {
    fn default() -> Self {
        McastTables {
            groups: ManagedSlice::Borrowed(&mut []),
            members: ManagedSlice::Borrowed(&mut []),
            used_members: 0,
        }
    }
}

impl<'a> McastTables<'a> {
    /// Tables from caller storage.
    pub fn new(groups: ManagedSlice<'a, McastGroup>, members: ManagedSlice<'a, NodeId>) -> Self {
        McastTables {
            groups,
            members,
            used_members: 0,
        }
    }
}

/// The members of a multicast group as the tree code reads them.
#[derive(Clone, Copy)]
pub(super) enum MemberList<'m> {
    All(u16),
    List(&'m [NodeId]),
}

impl MemberList<'_> {
    fn len(&self) -> usize {
        match *self {
            MemberList::All(n) => n as usize,
            MemberList::List(l) => l.len(),
        }
    }
    fn get(&self, i: usize) -> NodeId {
        match *self {
            MemberList::All(_) => i as NodeId,
            MemberList::List(l) => l[i],
        }
    }
    fn contains(&self, x: NodeId) -> bool {
        match *self {
            MemberList::All(n) => x < n,
            MemberList::List(l) => l.contains(&x),
        }
    }
}

/// The instances `me` forwards a multicast of `root` to, written to `out`; returns
/// how many, or `None` if `me` is neither the root nor a member.
pub(super) fn forward_targets(
    members: MemberList<'_>,
    root: NodeId,
    me: NodeId,
    tree: Tree,
    out: &mut [NodeId; MAX_CHILDREN],
) -> Option<usize> {
    // The sequence is `root` then the members without it; positions index into it.
    let root_member = members.contains(root);
    let n = members.len() + usize::from(!root_member);
    let at = |pos: usize| -> NodeId {
        if pos == 0 {
            return root;
        }
        // Position `pos` is the `pos - 1`-th member once `root` is skipped.
        let mut k = pos - 1;
        for i in 0..members.len() {
            let m = members.get(i);
            if m == root {
                continue;
            }
            if k == 0 {
                return m;
            }
            k -= 1;
        }
        root
    };
    let pos = if me == root {
        0
    } else {
        let mut pos = None;
        let mut k = 1;
        for i in 0..members.len() {
            let m = members.get(i);
            if m == root {
                continue;
            }
            if m == me {
                pos = Some(k);
                break;
            }
            k += 1;
        }
        pos?
    };
    let mut kids = [0usize; MAX_CHILDREN];
    let c = tree.children(pos, n, &mut kids);
    for (o, &k) in out.iter_mut().zip(&kids[..c]) {
        *o = at(k);
    }
    Some(c)
}

impl<'a, S> Engine<'a, S> {
    /// Creates a static multicast group of instances of this engine's group (LFC
    /// `lfc_group_create`): every process must create the same groups with the same
    /// members in the same order, before packets are multicast to them. Returns the
    /// group id. Members must be distinct and in the group.
    pub fn create_multicast_group(&mut self, members: &[NodeId]) -> Result<u16, Error> {
        if members.is_empty() || members.len() > MCAST_MEMBERS_MAX {
            return Err(Error::BadConfig);
        }
        for (i, &m) in members.iter().enumerate() {
            if m >= self.size || members[..i].contains(&m) {
                return Err(Error::UnknownNode);
            }
        }
        let t = &mut self.mcast;
        let gid = t
            .groups
            .iter()
            .position(|g| !g.used)
            .ok_or(Error::NoResources)?;
        let first = t.used_members;
        let end = first + members.len();
        let dst = t.members.get_mut(first..end).ok_or(Error::NoResources)?;
        dst.copy_from_slice(members);
        t.used_members = end;
        t.groups[gid] = McastGroup {
            used: true,
            first: first as u32,
            len: members.len() as u16,
        };
        Ok(gid as u16)
    }

    /// Members of multicast group `gid` ([`MCAST_ALL`]: every instance).
    pub(super) fn mcast_members(&self, gid: u16) -> Option<MemberList<'_>> {
        if gid == MCAST_ALL {
            return Some(MemberList::All(self.size));
        }
        let g = self.mcast.groups.get(gid as usize).filter(|g| g.used)?;
        let first = g.first as usize;
        self.mcast
            .members
            .get(first..first + g.len as usize)
            .map(MemberList::List)
    }
}

#[cfg(test)]
mod tree_tests {
    use super::*;

    /// Every shape spans its positions exactly once, for every size and root.
    #[test]
    fn trees_span_every_member_once() {
        for tree in [Tree::Binary, Tree::Binomial, Tree::Chain] {
            for n in 1..=40u16 {
                let members: [NodeId; 40] = core::array::from_fn(|i| i as NodeId);
                let list = MemberList::List(&members[..n as usize]);
                for root in 0..n {
                    let mut seen = [0u32; 40];
                    let mut stack = [0 as NodeId; 64];
                    let mut sp = 1;
                    stack[0] = root;
                    let mut hops = 0;
                    while sp > 0 {
                        sp -= 1;
                        let me = stack[sp];
                        seen[me as usize] += 1;
                        let mut out = [0; MAX_CHILDREN];
                        let c = forward_targets(list, root, me, tree, &mut out).unwrap();
                        for &k in &out[..c] {
                            stack[sp] = k;
                            sp += 1;
                        }
                        hops += 1;
                        assert!(hops <= n as usize, "{tree:?} n={n} root={root} loops");
                    }
                    for (i, &s) in seen[..n as usize].iter().enumerate() {
                        assert_eq!(s, 1, "{tree:?} n={n} root={root} member {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn root_outside_the_group_and_strangers() {
        let members = [3 as NodeId, 5, 7];
        let list = MemberList::List(&members);
        let mut out = [0; MAX_CHILDREN];
        // Root 0 is not a member: it heads the tree, members follow in order.
        assert_eq!(forward_targets(list, 0, 0, Tree::Chain, &mut out), Some(1));
        assert_eq!(out[0], 3);
        assert_eq!(forward_targets(list, 0, 3, Tree::Chain, &mut out), Some(1));
        assert_eq!(out[0], 5);
        assert_eq!(forward_targets(list, 0, 7, Tree::Chain, &mut out), Some(0));
        assert_eq!(forward_targets(list, 0, 4, Tree::Chain, &mut out), None);
        // Binomial children of the root: positions 1, 2 (and 4, beyond n = 4).
        assert_eq!(
            forward_targets(list, 5, 5, Tree::Binomial, &mut out),
            Some(2)
        );
        assert_eq!(&out[..2], &[3, 7]);
    }
}

//! Multicast forwarding trees (LFC's `-lfc-tree`): static groups of instances and
//! the binary, binomial and chain trees a packet travels down, forwarded by every
//! member's engine before its own delivery.
//!
//! A tree is laid over the sequence `root, members without root` (in the order the
//! group was created): position 0 is the root, and a position's children are
//! computed, not stored, so every member finds its own from the group, the root
//! (carried in the frame) and the shape (also in the frame: the root decides).

use super::*;

/// Tree shape byte of a reliable broadcast the root sends to every member itself
/// (nobody forwards it; it carries the root's sequence number all the same).
pub(super) const FLAT: u8 = 3;
/// Tree shape byte of a broadcast its root wrote once into its device's board
/// ([`crate::phy::Board::write`]), which every member reads itself.
pub(super) const BOARD: u8 = 4;

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
    pub(crate) fn from_u32(v: u32) -> Option<Tree> {
        match v {
            0 => Some(Tree::Binary),
            1 => Some(Tree::Binomial),
            2 => Some(Tree::Chain),
            _ => None,
        }
    }

    /// Children of position `p` in a tree of `n` positions, written to `out`;
    /// returns how many.
    pub(crate) fn children(self, p: usize, n: usize, out: &mut [usize; MAX_CHILDREN]) -> usize {
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

impl Tree {
    /// Levels below position `p` in a tree of `n` positions: 0 for a leaf. The first
    /// child heads the deepest subtree in both shapes this is asked for (binary:
    /// the heap's left child; binomial: `p + 2^k` for the smallest `2^k > p`), so the
    /// chain of first children is the longest path down.
    pub(super) fn height(self, mut p: usize, n: usize) -> usize {
        let mut h = 0;
        let mut kids = [0usize; MAX_CHILDREN];
        while self.children(p, n, &mut kids) > 0 && h < n {
            p = kids[0];
            h += 1;
        }
        h
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
    pub(super) fn len(&self) -> usize {
        match *self {
            MemberList::All(n) => n as usize,
            MemberList::List(l) => l.len(),
        }
    }
    pub(super) fn get(&self, i: usize) -> NodeId {
        match *self {
            MemberList::All(_) => i as NodeId,
            MemberList::List(l) => l[i],
        }
    }
    pub(super) fn contains(&self, x: NodeId) -> bool {
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

/// The member that passes `root`'s broadcasts on to `me` in a `tree` over the
/// whole group of `size` (`None`: `me` is the root, or either is not in the group).
pub(super) fn tree_parent(size: u16, root: NodeId, me: NodeId, tree: Tree) -> Option<NodeId> {
    if me >= size || root >= size || me == root {
        return None;
    }
    // The sequence is `root` then the others in order (see `forward_targets`).
    let q = if me < root { me + 1 } else { me };
    let p = match tree {
        Tree::Binary => (q - 1) / 2,
        // Position `p` forwards to `p + 2^k` for every `2^k > p`.
        Tree::Binomial => q & !(1 << (15 - q.leading_zeros())),
        Tree::Chain => q - 1,
    };
    Some(match p {
        0 => root,
        p if p <= root => p - 1,
        p => p,
    })
}

impl<'a> Engine<'a> {
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

    /// A member of multicast group `gid` ([`MCAST_ALL`]: every instance) other than
    /// this process that said goodbye ([`Engine::say_goodbye`]), if any: a packet
    /// to the group cannot reach it, nor the members it would forward to.
    pub(crate) fn left_member(&self, gid: u16) -> Option<NodeId> {
        if self.stats.peers_left == 0 {
            return None;
        }
        let me = self.cfg.node;
        let members = self.mcast_members(gid)?;
        (0..members.len())
            .map(|i| members.get(i))
            .find(|&m| m != me && self.peer_left(m))
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

/// Position of `me` in a tree over every instance of the group rooted at `root`
/// (the order [`forward_targets`] lays out for [`MemberList::All`]).
pub(super) fn all_position(root: NodeId, me: NodeId) -> usize {
    match me.cmp(&root) {
        core::cmp::Ordering::Equal => 0,
        core::cmp::Ordering::Less => me as usize + 1,
        core::cmp::Ordering::Greater => me as usize,
    }
}

/// What a [`Flags::TREE`] frame's prefix says.
#[derive(Debug, Clone, Copy)]
pub(super) struct TreeTag {
    pub(super) root: NodeId,
    pub(super) shape: u8,
    pub(super) bseq: u32,
}

impl TreeTag {
    pub(super) fn parse(payload: &[u8]) -> Option<TreeTag> {
        let p = payload.get(..wire::TREE_PREFIX)?;
        Some(TreeTag {
            root: u16::from_be_bytes([p[0], p[1]]),
            shape: p[2],
            bseq: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
        })
    }
}

impl<'a> Engine<'a> {
    /// A fragment of a reliable broadcast in our group ([`Flags::TREE`]): stored
    /// into the port like any message, in the order its root sent them, and, where
    /// this member has children in the tree, copied into an eager buffer that the
    /// forwards to them are sent from once the message is complete (a long one:
    /// into a relay stream's ring, passed on chunk by chunk). `false`: refused for
    /// now (an earlier broadcast of its root has not arrived, or no room).
    pub(super) fn rx_tree(&mut self, now: Instant, ci: usize, repr: &Repr, payload: &[u8]) -> bool {
        let Some(tag) = TreeTag::parse(payload) else {
            self.stats.rx_malformed += 1;
            return true;
        };
        let data = &payload[wire::TREE_PREFIX..];
        let ai = self.assembly_for(ci, repr, |e| e.reserve_tree(now, ci, repr, tag));
        let ai = match ai {
            Ok(ai) => ai,
            Err(taken) => return taken,
        };
        let a = self.asms.table[ai];
        let relay = self
            .ops
            .get(a.relay as usize)
            .filter(|p| p.gen == a.relay_gen && p.state == OpState::Active)
            .map(|p| (p.stream, p.eager));
        let mut ring = None;
        if let Some((si, _)) = relay.filter(|&(si, _)| si != NONE && si == a.stream) {
            match self.stream_fit(si, repr.offset, data.len()) {
                stream::Fit::Full => return false,
                stream::Fit::Copy(buf, at) => ring = Some((si, buf, at)),
                stream::Fit::Skip => {}
            }
        }
        self.place(ai, repr.offset, data);
        if let Some((si, buf, at)) = ring {
            self.stream_copy(si, buf, at, repr.offset, data);
            self.kick_stream(ai);
        } else if let Some((_, eager)) = relay.filter(|&(si, _)| si == NONE) {
            self.bufs.eager_write(eager, repr.offset as usize, data);
        }
        true
    }

    /// Queues a long broadcast's forwards once its first chunk is here, and the
    /// messages that came before it on its channel have been delivered (and so
    /// forwarded): a member passes its parent's messages on in the order they came.
    pub(super) fn kick_stream(&mut self, ai: usize) {
        let a = self.asms.table[ai];
        let Some(p) = self.ops.table.get(a.relay as usize) else {
            return;
        };
        let ready = self
            .bufs
            .streams
            .get(p.stream as usize)
            .is_some_and(|st| !st.queued && st.ready_bytes() > 0);
        let first = self
            .chans
            .get(a.chan as usize)
            .is_some_and(|c| c.next_deliver == a.msg_id);
        if a.used && a.stream != NONE && p.stream == a.stream && ready && first {
            self.forward_tree(a.relay, a.relay_gen);
        }
    }

    /// Reserves the port (or a discarding assembly where it is closed) for a tree
    /// broadcast's first fragment and, for an inner member, the eager buffer and
    /// the operations its forwards need; `None` refuses the frame for now.
    fn reserve_tree(
        &mut self,
        now: Instant,
        ci: usize,
        repr: &Repr,
        tag: TreeTag,
    ) -> Option<usize> {
        let me = self.cfg.node;
        let sane = repr.ends.src_group == self.cfg.group && tag.root < self.size && tag.root != me;
        if let Some(&want) = self.bcast.seq.get(tag.root as usize) {
            // A tree broadcast waits for the root's earlier flat ones (too long
            // for the relays' rings), which the root sent straight to us and so
            // before it sent this one to anyone. Only tree messages wait: a
            // channel's head never waits for a message queued after it, so
            // refusals cannot hold each other up in a cycle (refusing flat ones
            // too could: each channel's head waiting for tree ones queued behind
            // the other's). The root keeps a flat one back until we have its
            // earlier ones instead (see `fence`).
            let root_dead = self
                .addr_of(self.cfg.group, tag.root)
                .ok()
                .and_then(|a| self.chans.peer_map.get(a.0 as usize))
                .and_then(|&c| self.chans.table.get(c as usize))
                .is_some_and(|c| c.failed);
            if sane && tag.shape != FLAT && seq_lt(want, tag.bseq) && !root_dead {
                return None;
            }
        }
        let mut kids = [0 as NodeId; MAX_CHILDREN];
        let tree = Tree::from_u32(tag.shape as u32);
        let mut n = match tree {
            Some(t) if sane => {
                forward_targets(MemberList::All(self.size), tag.root, me, t, &mut kids).unwrap_or(0)
            }
            _ => 0,
        };
        if !sane || (tree.is_none() && tag.shape != FLAT) {
            // An authenticated peer that breaks the protocol: taken, not forwarded.
            self.stats.rx_malformed += 1;
            n = 0;
        }
        let mut eager = NONE;
        let mut ring = None;
        if n > 0 {
            // Buffers by level (Merlin and Schweitzer's structured pool): a member
            // `h` levels above the leaves takes its buffers only while `unit` are
            // left for each level below it, a unit being what a long broadcast's
            // ring takes (a short one takes one buffer). So the last free ones go
            // to members nearer the leaves, whose forwards end without waiting for
            // anyone else's buffer: broadcasts from different roots crossing the
            // same members cannot hold each other's up for ever.
            let size = self.size as usize;
            let (h, levels) = tree.map_or((1, 1), |t| {
                (
                    t.height(all_position(tag.root, me), size),
                    t.height(0, size),
                )
            });
            let pool = self.bufs.eager.len();
            let unit = stream::relay_unit(pool, levels);
            let long = repr.total_len as usize > EAGER_MAX;
            let mine = if long {
                unit.min((repr.total_len as usize).div_ceil(stream::CHUNK))
            } else {
                1
            };
            let need = (unit * (h.max(1) - 1) + mine).min(pool.max(1));
            let free = self.bufs.eager_free;
            // One operation per child and their parent.
            if free < need || self.reserve_sends(&kids[..n], 1).is_err() {
                return None;
            }
            if long {
                // Passed on chunk by chunk through a ring (see `stream`).
                ring = Some(self.stream_room(h, mine)?);
            } else {
                eager = self.bufs.free_eager()? as u16;
            }
        }
        let ai = match self.reserve(ci, repr, true, now) {
            Some(ai) => ai,
            None if self.closed_port(ci, repr, now, false) => {
                self.reserve_discard(ci, repr, now)?
            }
            None => return None,
        };
        self.chans.table[ci].unbound_msg = None;
        let a = &mut self.asms.table[ai];
        a.tree = sane;
        a.shape = tag.shape;
        a.bseq = tag.bseq;
        if sane {
            a.src.src_node = tag.root;
        }
        if n > 0 {
            let si = ring.map_or(NONE, |len| self.open_stream(repr.total_len, len));
            let pi = self.reserve_forwards(repr, tag, eager, si, &kids[..n]);
            let a = &mut self.asms.table[ai];
            a.relay = pi;
            a.stream = si;
            a.relay_gen = self.ops.table.get(pi as usize).map_or(0, |p| p.gen);
        }
        Some(ai)
    }

    /// Takes eager buffer `eager` and one operation per child plus a parent for
    /// forwarding `repr`'s message, linked through `next` and queued on no channel
    /// until [`Engine::forward_tree`]; returns the parent.
    fn reserve_forwards(
        &mut self,
        repr: &Repr,
        tag: TreeTag,
        eager: u16,
        stream: u16,
        kids: &[NodeId],
    ) -> u16 {
        self.bufs.take_eager(eager);
        let mut op = Op::EMPTY;
        op.state = OpState::Active;
        op.reliable = true;
        op.detached = true;
        op.eager = eager;
        op.total = repr.total_len;
        op.src_port = repr.ends.src_port;
        op.dest = Dest {
            group: self.cfg.group,
            node: BROADCAST,
            port: repr.ends.dst_port,
        };
        op.kind = Kind::Multicast;
        op.tree = true;
        op.relay = true;
        op.root = tag.root;
        op.aux = tag.shape;
        op.bseq = tag.bseq;
        op.stream = stream;
        // Room was checked by the caller.
        let Ok(pi) = self.ops.alloc() else {
            return NONE;
        };
        let mut parent = op;
        parent.gen = self.ops.table[pi].gen;
        parent.children = kids.len() as u16;
        op.parent = pi as u16;
        let mut next = NONE;
        for &k in kids.iter().rev() {
            let Ok(oi) = self.ops.alloc() else { break };
            let mut child = op;
            child.gen = self.ops.table[oi].gen;
            child.dest.node = k;
            child.next = next;
            self.ops.table[oi] = child;
            next = oi as u16;
            if stream != NONE {
                self.stream_kid(stream, oi);
            }
        }
        parent.next = next;
        self.ops.table[pi] = parent;
        pi as u16
    }

    /// Forward `oi` of a tree broadcast cannot reach its member (dead, or no
    /// channel): the member's children in the tree get copies from us instead, so
    /// that nobody below a dead member goes without. Those that cannot reach theirs
    /// pass them on the same way (a member's children sit deeper in the tree, so
    /// this ends). Call before the forward ends. A long one whose first chunks are
    /// gone from our ring already cannot be sent from the start, and is not.
    pub(super) fn reroute(&mut self, oi: usize) {
        let o = self.ops.table[oi];
        let Some(tree) = Tree::from_u32(o.aux as u32) else {
            return; // flat, board, or not a broadcast: nobody below
        };
        if !o.tree || o.kind != Kind::Multicast || o.parent == NONE || o.cut(&self.bufs) {
            return;
        }
        let mut kids = [0 as NodeId; MAX_CHILDREN];
        let members = MemberList::All(self.size);
        let n = forward_targets(members, o.root, o.dest.node, tree, &mut kids).unwrap_or(0);
        if let Some(st) = self.bufs.streams.get(o.stream as usize) {
            if !st.holds_start() || st.kids().len() + n > MAX_CHILDREN {
                return;
            }
        }
        let group = self.cfg.group;
        for &k in &kids[..n] {
            let Ok(ni) = self.ops.alloc() else {
                return;
            };
            let mut copy = o;
            copy.dest.node = k;
            copy.framed = 0;
            copy.unacked = 0;
            copy.started = false;
            copy.next = NONE;
            copy.chan = NONE;
            copy.gen = self.ops.table[ni].gen;
            self.ops.table[ni] = copy;
            self.ops.table[o.parent as usize].children += 1;
            if o.stream != NONE {
                self.stream_kid(o.stream, ni);
            }
            self.stats.rerouted += 1;
            match self
                .addr_of(group, k)
                .and_then(|a| self.channel_for(a, group, k))
            {
                Ok(ci) => self.enqueue(ci, ni, &copy),
                Err(_) => {
                    self.reroute(ni);
                    finish_op(&mut self.ops, &mut self.bufs, ni, false);
                }
            }
        }
    }

    /// A tree broadcast has been stored whole: its forwards (reserved by
    /// [`Engine::reserve_forwards`]) go to their channels, ahead of its delivery.
    pub(super) fn forward_tree(&mut self, pi: u16, gen: u16) {
        let Some(p) = self
            .ops
            .get(pi as usize)
            .filter(|p| p.gen == gen && p.state == OpState::Active && p.next != NONE)
        else {
            // Forwarded already (a long one, chunk by chunk), or every forward failed.
            return;
        };
        if let Some(st) = self.bufs.streams.get_mut(p.stream as usize) {
            if !st.queued {
                st.queued = true;
                self.bufs.queued_streams += 1;
            }
        }
        self.queue_forwards(pi as usize);
        self.stats.forwarded += 1;
    }
}

#[cfg(test)]
mod tree_tests {
    use super::*;

    /// Every shape spans its positions exactly once, for every size and root.
    #[test]
    fn a_members_parent_is_the_member_it_is_a_child_of() {
        for tree in [Tree::Binary, Tree::Binomial, Tree::Chain] {
            for size in 1..40u16 {
                for root in 0..size {
                    for c in 0..size {
                        let mut kids = [0; MAX_CHILDREN];
                        let all = MemberList::All(size);
                        let n = forward_targets(all, root, c, tree, &mut kids).unwrap();
                        for &k in &kids[..n] {
                            assert_eq!(tree_parent(size, root, k, tree), Some(c), "{tree:?}");
                        }
                    }
                    assert_eq!(tree_parent(size, root, root, tree), None);
                }
            }
        }
    }

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

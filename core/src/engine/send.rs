//! Starting sends and following them: the operation table, handles, channels for
//! new peers.

use super::mcast::{self, forward_targets, MemberList, FLAT, MAX_CHILDREN};
use super::*;

/// The longest broadcast a root sends from a copy in its eager buffers. Longer
/// ones go from the program's buffer: measured on 8 and 16 ranks over `shm`, the
/// copy of a 16 KiB one delays every member more than it saves the root.
pub(super) const BCAST_COPY_MAX: usize = 4096;

/// Who a broadcast's root sends copies to: its children in the tree, or every
/// member but (in its own group) itself.
#[derive(Clone, Copy)]
enum Targets<'k> {
    Some(&'k [NodeId]),
    AllBut(u16, Option<NodeId>),
}

impl<'k> Targets<'k> {
    fn iter(self) -> impl Iterator<Item = NodeId> + 'k {
        let (list, n, skip) = match self {
            Targets::Some(l) => (l, 0, None),
            Targets::AllBut(n, skip) => (&[][..], n, skip),
        };
        list.iter()
            .copied()
            .chain((0..n).filter(move |&i| Some(i) != skip))
    }
    fn len(self) -> usize {
        self.iter().count()
    }
}

impl<'a> Engine<'a> {
    // ---------------------------------------------------------------- sends

    /// Starts a send (see [`SendRequest`]). A reliable one whose body is
    /// [`Body::Copied`] may be [`Engine::detach`]ed once `Engine::handed_off`:
    /// delivery is then the engine's job, and a failure is reported through the
    /// port's error handler or error semaphore. `NoResources` when no buffer is
    /// free for a copy, a copy is too long, or a copied body is not reliable; a
    /// copied broadcast also leaves a unit of buffers free for each level of relays
    /// below it.
    #[inline]
    pub fn start_send(&mut self, req: SendRequest<'a, '_>) -> Result<SendHandle, Error> {
        self.start(req.port, req.head, Src::Body(req.body), req.reliable)
    }

    #[inline]
    pub(super) fn start(
        &mut self,
        port: PortId,
        head: &[u8],
        body: Src<'a, '_>,
        reliable: bool,
    ) -> Result<SendHandle, Error> {
        let p = self
            .ports
            .table
            .get(port as usize)
            .ok_or(Error::InvalidPort)?;
        let dest = p.dest.ok_or(Error::NotBound)?;
        if head.len() > INLINE_HEAD_MAX {
            return Err(Error::FirstPieceTooLong);
        }
        let mut eager = NONE;
        // A broadcast's copy is taken once its tree is known (see below).
        let mut bcast_copy = None;
        let (body_ref, body_len, external) = match body {
            Src::Body(Body::Borrowed(b)) => (b, b.len(), false),
            Src::Body(Body::External(n)) => (&[][..], n, true),
            Src::Queued { idx, len } => {
                eager = idx;
                (&[][..], len, false)
            }
            Src::Body(Body::Copied(b)) => {
                if b.len() > EAGER_MAX || !reliable {
                    return Err(Error::NoResources);
                }
                if dest.node == BROADCAST && b.len() > BCAST_COPY_MAX {
                    return Err(Error::NoResources);
                } else if dest.node == BROADCAST {
                    bcast_copy = Some(b);
                    (&[][..], b.len(), false)
                } else {
                    eager = self.bufs.eager_copy(b, 0).ok_or(Error::NoResources)?;
                    (&[][..], b.len(), false)
                }
            }
        };
        let total = u32::try_from(head.len() + body_len).map_err(|_| Error::MessageTooLong)?;
        let mut op = Op::EMPTY;
        op.state = OpState::Active;
        op.reliable = reliable;
        op.external = external;
        op.head[..head.len()].copy_from_slice(head);
        op.head_len = head.len() as u8;
        op.body = body_ref;
        op.eager = eager;
        op.total = total;
        op.src_port = port;
        op.dest = dest;
        if dest.node != BROADCAST {
            let slots = self
                .addr_of(dest.group, dest.node)
                .and_then(|addr| self.channel_for(addr, dest.group, dest.node))
                .and_then(|ci| Ok((ci, self.ops.alloc()?)));
            let (ci, oi) = match slots {
                Ok(x) => x,
                Err(e) => {
                    self.bufs.give_eager(eager);
                    return Err(e);
                }
            };
            self.enqueue(ci, oi, &op);
            return Ok(SendHandle::new(oi, self.ops.table[oi].gen));
        }
        // Broadcast: a parent slot plus one child per target, all or nothing.
        let g = *self.group(dest.group).ok_or(Error::UnknownGroup)?;
        let own = dest.group == self.cfg.group;
        let me = self.cfg.node;
        let mut kids = [0 as NodeId; MAX_CHILDREN];
        // A reliable broadcast in our group is numbered, so that members deliver a
        // root's broadcasts in order whichever way each came, and goes down the
        // tree when every level of relays can hold all of it in eager buffers (a
        // long one passed on chunk by chunk, see `stream`) and, past 256 KiB, when
        // that spares the root enough copies (`stream::long_tree_pays`).
        let numbered = own && reliable && (me as usize) < self.bcast.seq.len();
        let tree = self.cfg.bcast_tree.filter(|&t| {
            let size = self.size as usize;
            let levels = t.height(0, size);
            let pool = self.bufs.eager.len();
            let chunks = (total as usize).div_ceil(stream::CHUNK);
            numbered
                && levels <= pool
                && chunks <= stream::relay_unit(pool, levels)
                && (chunks <= stream::TREE_ANY_CHUNKS || stream::long_tree_pays(t, size))
        });
        // The root's copy is held until every member has the message, like a
        // relay's at the top of the tree: it leaves a unit of buffers for each level
        // of relays below it (see `reserve_tree`), so that broadcasts from every
        // root at once cannot take the buffers their relays need.
        let keep = if tree.is_some() { self.bcast.keep } else { 0 };
        // Written once where every member reads it (see `board`), after our
        // broadcasts waiting in the gate (see `fence`): a short copy in one frame,
        // or the caller's bytes in as many frames as they take.
        let copy_fits = bcast_copy.is_some() && self.board_fits(&g, total);
        // A best-effort one to our group takes the board too where reliable ones do
        // (the board loses nothing), numbered among them: it keeps its place in the
        // root's order. Elsewhere it waits in the gate like a flat one (below).
        let be_board = own
            && !reliable
            && (me as usize) < self.bcast.seq.len()
            && bcast_copy.is_none()
            && self.board_takes(&g);
        let board =
            be_board || (numbered && (copy_fits || (bcast_copy.is_none() && self.board_takes(&g))));
        if board {
            let held = self.bcast.must_hold(false);
            if held && !self.bcast.gate_room() {
                return Err(Error::NoResources);
            }
            if let Some(b) = bcast_copy {
                op.eager = self.bufs.eager_copy(b, keep).ok_or(Error::NoResources)?;
            }
            let Ok(pi) = self.ops.alloc() else {
                self.bufs.give_eager(op.eager);
                return Err(Error::NoResources);
            };
            op.tree = true;
            op.root = me;
            op.aux = mcast::BOARD;
            op.bseq = self.bcast.next;
            self.bcast.next = self.bcast.next.wrapping_add(1);
            op.gen = self.ops.table[pi].gen;
            self.ops.table[pi] = op;
            if held {
                self.hold(pi);
            } else {
                self.queue_board(pi);
                self.bcast.released(mcast::BOARD, op.bseq);
            }
            return Ok(SendHandle::new(pi, self.ops.table[pi].gen));
        }
        let targets: Targets = match tree {
            Some(t) => {
                let n =
                    forward_targets(MemberList::All(self.size), me, me, t, &mut kids).unwrap_or(0);
                Targets::Some(&kids[..n])
            }
            None => Targets::AllBut(g.members.len(), own.then_some(me)),
        };
        let members = targets.len() as u16;
        let free = self
            .ops
            .table
            .iter()
            .filter(|o| o.state == OpState::Free)
            .count();
        if free < members as usize + 1 {
            return Err(Error::NoResources);
        }
        // Every target needs a channel: check there is room before starting any.
        let need = targets
            .iter()
            .filter_map(|i| g.members.addr(i))
            .filter(|a| {
                self.chans
                    .peer_map
                    .get(a.0 as usize)
                    .is_none_or(|&s| s == NONE)
            })
            .count();
        let free_chans = self.chans.table.iter().filter(|c| !c.in_use).count();
        let unmapped = targets
            .iter()
            .filter_map(|i| g.members.addr(i))
            .any(|a| a.0 as usize >= self.chans.peer_map.len());
        if need > free_chans || unmapped {
            return Err(Error::NoResources);
        }
        // A flat one after one by board or tree, and anything after one waiting,
        // waits in the gate with its forwards on no channel yet (see `fence`). So
        // does every best-effort one to our group: unnumbered, members cannot
        // order it, so the gate does (fenced behind our earlier board and tree
        // ones, and holding later ones until its copies have left).
        let be_gated = own && !reliable && (me as usize) < self.bcast.seq.len();
        let held = members > 0 && (be_gated || (numbered && self.bcast.must_hold(tree.is_none())));
        if held && !self.bcast.gate_room() {
            return Err(Error::NoResources);
        }
        if let (Some(b), true) = (bcast_copy, members > 0) {
            op.eager = self.bufs.eager_copy(b, keep).ok_or(Error::NoResources)?;
        }
        let pi = self.ops.alloc()?;
        if numbered {
            op.tree = true;
            op.root = me;
            op.aux = tree.map_or(FLAT, |t| t as u8);
            op.bseq = self.bcast.next;
            self.bcast.next = self.bcast.next.wrapping_add(1);
        } else if be_gated {
            // Its fence asks for every numbered one before the next number.
            op.aux = FLAT;
            op.bseq = self.bcast.next;
        }
        let mut parent = op;
        parent.children = members;
        parent.gen = self.ops.table[pi].gen;
        parent.state = if members == 0 {
            OpState::Done
        } else {
            OpState::Active
        };
        self.ops.table[pi] = parent;
        op.kind = Kind::Multicast;
        op.parent = pi as u16;
        let mut last = NONE;
        for i in targets.iter() {
            let Some(addr) = g.members.addr(i) else {
                continue;
            };
            let mut child = op;
            child.dest.node = i;
            // Room was checked above.
            let ci = self.channel_for(addr, dest.group, i)?;
            let oi = self.ops.alloc()?;
            if held {
                // Linked from the parent in target order, queued on release.
                child.gen = self.ops.table[oi].gen;
                self.ops.table[oi] = child;
                if last == NONE {
                    self.ops.table[pi].next = oi as u16;
                } else {
                    self.ops.table[last as usize].next = oi as u16;
                }
                last = oi as u16;
            } else {
                self.enqueue(ci, oi, &child);
            }
        }
        if held {
            self.hold(pi);
        } else if numbered {
            self.bcast.released(op.aux, op.bseq);
        }
        Ok(SendHandle::new(pi, self.ops.table[pi].gen))
    }

    /// Fills slot `oi` (already taken by `Ops::alloc`) from `proto` and queues it on
    /// channel `ci`.
    #[inline]
    pub(super) fn enqueue(&mut self, ci: usize, oi: usize, proto: &Op<'a>) {
        let ch = &mut self.chans.table[ci];
        let gen = self.ops.table[oi].gen;
        let op = &mut self.ops.table[oi];
        *op = *proto;
        op.gen = gen;
        op.chan = ci as u16;
        op.next = NONE;
        if ch.failed {
            let port = if op.relay { op.dest.port } else { op.src_port };
            let (dest, kind, owned) = (op.dest, op.kind, op.owned);
            self.reroute(oi);
            finish_op(&mut self.ops, &mut self.bufs, oi, false);
            if owned {
                return;
            }
            if kind == Kind::Packet {
                self.packet_send_failed(dest.node);
            } else {
                self.notify_send_failure(port, dest);
            }
            return;
        }
        if op.reliable {
            op.msg_id = ch.next_msg;
            ch.next_msg = ch.next_msg.wrapping_add(1);
        } else {
            op.msg_id = ch.next_be_msg;
            ch.next_be_msg = ch.next_be_msg.wrapping_add(1);
        }
        self.chans.work.set(true);
        if ch.q_tail == NONE {
            ch.q_head = oi as u16;
        } else {
            self.ops.table[ch.q_tail as usize].next = oi as u16;
        }
        ch.q_tail = oi as u16;
    }

    pub(super) fn notify_send_failure(&mut self, port: PortId, dest: Dest) {
        self.notify(Note {
            port,
            fault: Some(Fault::SendFailed),
            count: false,
            msg_len: 0,
            stored: 0,
            base: 0,
            src: Endpoints {
                src_group: dest.group,
                src_node: dest.node,
                src_port: dest.port,
                ..Endpoints::default()
            },
        });
    }

    /// Progress of a send. A finished one keeps its slot until [`Engine::release`].
    pub fn send_status(&self, h: SendHandle) -> Result<SendStatus, Error> {
        let op = self.ops.table.get(h.idx()).ok_or(Error::InvalidHandle)?;
        if op.gen != h.gen() || op.state == OpState::Free || op.parent != NONE {
            return Err(Error::InvalidHandle);
        }
        Ok(match op.state {
            OpState::Done => SendStatus::Done,
            OpState::Failed => SendStatus::Failed,
            OpState::Rejected => SendStatus::Rejected,
            _ => SendStatus::Pending,
        })
    }

    /// True once every byte of the send has been handed to the device (for an eager
    /// send, the caller's part is then over), or the send has finished.
    pub(crate) fn handed_off(&self, h: SendHandle) -> Result<bool, Error> {
        let st = self.send_status(h)?;
        let op = &self.ops.table[h.idx()];
        // A broadcast's children send from the root's eager copy.
        let copied = op.dest.node == BROADCAST && op.eager != NONE;
        Ok(st != SendStatus::Pending || copied || (op.started && op.framed == op.total))
    }

    /// True if the send works from a copy in an eager buffer (the caller's
    /// bytes are no longer needed), as those of a copied [`Engine::start_send`] do.
    pub(crate) fn copied(&self, h: SendHandle) -> Result<bool, Error> {
        self.send_status(h)?;
        Ok(self.ops.table[h.idx()].eager != NONE)
    }

    /// Lets go of a send: its slot frees itself when it finishes. A failure is still
    /// reported through the port's error handler or error semaphore.
    pub fn detach(&mut self, h: SendHandle) -> Result<(), Error> {
        let st = self.send_status(h)?;
        let op = &mut self.ops.table[h.idx()];
        if st == SendStatus::Pending {
            op.detached = true;
        } else {
            op.state = OpState::Free;
        }
        Ok(())
    }

    /// Frees a finished send's slot and returns how it ended. A pending send is left alone.
    pub fn release(&mut self, h: SendHandle) -> Result<SendStatus, Error> {
        let st = self.send_status(h)?;
        if st != SendStatus::Pending {
            self.ops.table[h.idx()].state = OpState::Free;
        }
        Ok(st)
    }

    #[inline]
    pub(super) fn channel_for(
        &mut self,
        addr: NodeAddr,
        group: GroupId,
        node: NodeId,
    ) -> Result<usize, Error> {
        match self.chans.peer_map.get(addr.0 as usize) {
            Some(&slot) if slot != NONE => Ok(slot as usize),
            Some(_) => self.open_channel_to(addr, group, node),
            None => Err(Error::NoResources),
        }
    }

    /// [`Engine::channel_for`] of a peer without a channel yet: the first frame
    /// either way opens one.
    #[cold]
    #[inline(never)]
    fn open_channel_to(
        &mut self,
        addr: NodeAddr,
        group: GroupId,
        node: NodeId,
    ) -> Result<usize, Error> {
        let ci = self
            .chans
            .iter()
            .position(|c| !c.in_use)
            .ok_or(Error::NoResources)?;
        self.chans.table[ci].open(
            addr,
            group,
            node,
            self.cfg.window.min(MAX_WINDOW as u16),
            self.cfg.rto_initial,
        );
        self.chans.peer_map[addr.0 as usize] = ci as u16;
        self.chans.hwm = self.chans.hwm.max(ci + 1);
        Ok(ci)
    }
}

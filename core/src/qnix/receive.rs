//! Arriving messages and control packets: matching to posted receives, early
//! messages, filling receive regions.

use super::*;

/// A message arriving from one source.
#[derive(Debug, Default)]
pub(super) struct RxPartial {
    pub(super) active: bool,
    pub(super) tag: i32,
    pub(super) len: usize,
    pub(super) got: usize,
    /// A write into the receive region failed.
    pub(super) fault: bool,
    pub(super) target: Target,
}

#[derive(Debug)]
pub(super) struct Unexpected {
    pub(super) src: NodeId,
    pub(super) tag: i32,
    pub(super) data: Vec<u8>,
    /// A rendezvous request (the sender's context, the length) that no receive
    /// matched: its data follows as packets and takes this place in the order.
    pub(super) rts: Option<(i32, usize)>,
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    pub(super) fn take(&mut self, d: Delivery) {
        let src = d.src as usize;
        if src >= self.rx.len() {
            let _ = self.ep.engine.packet_free(d.packet);
            return;
        }
        if d.multicast {
            self.take_board(d);
            return;
        }
        self.take_unicast(d);
        // Board broadcasts that waited for this packet may follow it now.
        self.got_from[src] = self.got_from[src].wrapping_add(1);
        self.take_boards(src);
    }

    pub(super) fn take_unicast(&mut self, d: Delivery) {
        let src = d.src as usize;
        if self.rx[src].active {
            self.body(d, 0);
            return;
        }
        let h = self
            .ep
            .engine
            .packet(d.packet)
            .and_then(|p| p.get(..d.len))
            .and_then(parse_head);
        let Some((kind, a, b, c)) = h else {
            let _ = self.ep.engine.packet_free(d.packet);
            return;
        };
        if kind == K_CTS {
            let addr = self
                .ep
                .engine
                .packet(d.packet)
                .and_then(|p| p.get(HEAD..HEAD + 8))
                .and_then(|p| p.try_into().ok())
                .map_or(0, u64::from_be_bytes);
            let _ = self.ep.engine.packet_free(d.packet);
            self.cleared(d.src, a, b, c, addr);
            return;
        }
        let held = (kind == K_MSG || kind == K_RTS) && self.held(d);
        if kind == K_RTS && held {
            let bc = bc_of(&self.ep.engine, d);
            let _ = self.ep.engine.packet_free(d.packet);
            self.stats.parked += 1;
            let item = ParkedItem::Rts { a, b, c };
            self.parked[src].push_back(Parked { bc, item });
            return;
        }
        if kind != K_MSG && kind != K_MSG_TO {
            let _ = self.ep.engine.packet_free(d.packet);
            self.control(d.src, kind, a, b, c);
            return;
        }
        let len = c as usize;
        let from = self
            .name_of(d.src)
            .filter(|n| n.ai == self.me.ai && len <= MESSAGE_MAX);
        let target = match from {
            // The data of a request kept early: into the receive matched to it since,
            // else into its place among the early messages.
            Some(_) if kind == K_MSG_TO && b < 0 => {
                let sid = -(b + 1);
                let i = self
                    .early_bound
                    .iter()
                    .position(|&(s, x, _)| s == d.src && x == sid);
                match i {
                    Some(i) => Target::Direct(self.early_bound.swap_remove(i).2),
                    None => Target::Early(sid, Vec::with_capacity(len.min(1 << 20))),
                }
            }
            // Matched when its rendezvous was granted.
            Some(_) if kind == K_MSG_TO => {
                let ctx = usize::try_from(b).ok().filter(|&x| x < CONTEXTS);
                match ctx.filter(|&x| self.bound[x] == Some(d.src)) {
                    Some(ctx) => {
                        self.bound[ctx] = None;
                        Target::Direct(ctx)
                    }
                    None => {
                        self.stats.dropped += 1;
                        Target::Discard
                    }
                }
            }
            Some(_) if held => {
                self.stats.parked += 1;
                Target::Parked(
                    bc_of(&self.ep.engine, d),
                    Vec::with_capacity(len.min(1 << 20)),
                )
            }
            Some(n) => match self.match_posted(n, a) {
                Some(ctx) => Target::Direct(ctx),
                None => Target::Buffer(Vec::with_capacity(len.min(1 << 20))),
            },
            None => {
                self.stats.dropped += 1;
                Target::Discard
            }
        };
        self.rx[src] = RxPartial {
            active: true,
            tag: a,
            len,
            got: 0,
            fault: false,
            target,
        };
        self.body(d, HEAD);
    }

    /// The bytes of a message's packet, straight to their place.
    pub(super) fn body(&mut self, d: Delivery, skip: usize) {
        let src = d.src as usize;
        let st = &mut self.rx[src];
        if let Some(p) = self
            .ep
            .engine
            .packet(d.packet)
            .and_then(|p| p.get(skip..d.len))
        {
            let n = p.len().min(st.len - st.got);
            let p = &p[..n];
            match &mut st.target {
                Target::Direct(ctx) => {
                    let c = &self.ctxs[RECV][*ctx];
                    let room = c.len.saturating_sub(st.got).min(n);
                    if room > 0 && write_at(&mut self.mem, &c.segs, st.got, &p[..room]).is_err() {
                        st.fault = true;
                    }
                }
                Target::Buffer(v) | Target::Early(_, v) => {
                    v.extend_from_slice(p);
                    self.unexpected_bytes += n;
                }
                Target::Parked(_, v) => {
                    v.extend_from_slice(p);
                    self.parked_bytes += n;
                }
                Target::Discard => {}
            }
            st.got += n;
        }
        let _ = self.ep.engine.packet_free(d.packet);
        if self.rx[src].got >= self.rx[src].len {
            self.finish_message(src);
        }
    }

    pub(super) fn finish_message(&mut self, src: usize) {
        let st = core::mem::take(&mut self.rx[src]);
        match st.target {
            Target::Direct(ctx) => {
                let room = self.ctxs[RECV][ctx].len;
                let r = if st.fault {
                    Err(QxError::Fault)
                } else if st.len > room {
                    Err(QxError::Truncated)
                } else {
                    Ok(())
                };
                self.stats.messages_received += 1;
                self.complete_recv(ctx, st.len.min(room), r);
            }
            Target::Buffer(v) => {
                self.unexpected_bytes -= v.len();
                self.arrived(src as NodeId, st.tag, v);
            }
            Target::Early(sid, v) => self.early_arrived(src as NodeId, sid, v),
            Target::Parked(bc, data) => {
                let item = ParkedItem::Msg { tag: st.tag, data };
                self.parked[src].push_back(Parked { bc, item });
                self.release(src);
            }
            Target::Discard => {}
        }
    }

    pub(super) fn match_posted(&mut self, from: Name, tag: i32) -> Option<usize> {
        let i = self
            .posted
            .iter()
            .position(|&c| self.ctxs[RECV][c].peer == from && self.ctxs[RECV][c].tag == tag)?;
        Some(self.posted.remove(i))
    }

    /// A whole message from `src`: into its posted receive, else kept until one is.
    pub(super) fn arrived(&mut self, src: NodeId, tag: i32, data: Vec<u8>) {
        let Some(from) = self.name_of(src) else {
            self.stats.dropped += 1;
            return;
        };
        match self.match_posted(from, tag) {
            Some(ctx) => {
                self.fill(ctx, &data);
                self.spares.give_bytes(data);
            }
            None => {
                self.stats.unexpected += 1;
                self.unexpected_bytes += data.len();
                self.unexpected.push_back(Unexpected {
                    src,
                    tag,
                    data,
                    rts: None,
                });
            }
        }
    }

    /// Completes receive `ctx` with a whole message.
    pub(super) fn fill(&mut self, ctx: usize, data: &[u8]) {
        let c = &self.ctxs[RECV][ctx];
        let n = data.len().min(c.len);
        let r = match write_at(&mut self.mem, &c.segs, 0, &data[..n]) {
            Err(_) => Err(QxError::Fault),
            Ok(()) if data.len() > c.len => Err(QxError::Truncated),
            Ok(()) => Ok(()),
        };
        self.stats.messages_received += 1;
        self.complete_recv(ctx, n, r);
    }

    // ------------------------------------------------------------ rendezvous

    /// A registration, join or barrier token from `src`.
    pub(super) fn control(&mut self, src: NodeId, kind: u8, a: i32, b: i32, c: u32) {
        let me = self.ep.engine.config().node;
        match kind {
            K_REG => {
                let name = Name::new(a, b);
                if src != me && self.app_size != 0 && name == self.me {
                    self.conflict = true;
                }
                if let Some(slot) = self.names.get_mut(src as usize) {
                    if slot.is_none() {
                        *slot = Some((name, c as i32));
                    }
                }
            }
            K_JOIN => {
                let Some(from) = self.name_of(src).filter(|n| n.ai == self.me.ai) else {
                    self.stats.dropped += 1;
                    return;
                };
                let Some(gi) = self.group_index(a) else {
                    return;
                };
                let g = &mut self.groups[gi];
                match g.size {
                    None => g.size = Some(b),
                    Some(s) if s != b => g.bad = true,
                    _ => {}
                }
                if let Err(at) = g.members.binary_search(&(from.pi, src)) {
                    g.members.insert(at, (from.pi, src));
                }
                if g.members.len() as i32 > b {
                    g.bad = true;
                }
            }
            K_RTS => self.requested(src, a, b, c as usize),
            K_FIN => {
                let i = self
                    .armed
                    .iter()
                    .position(|x| Ok(x.ctx) == usize::try_from(a) && x.src == src);
                if let Some(i) = i {
                    let x = self.armed.swap_remove(i);
                    self.complete_recv(x.ctx, 0, Err(QxError::Fault));
                }
            }
            K_BAR => {
                if self.name_of(src).is_none_or(|n| n.ai != self.me.ai) {
                    self.stats.dropped += 1;
                    return;
                }
                let Ok(round) = usize::try_from(b) else {
                    return;
                };
                if round >= 32 {
                    return;
                }
                if let Some(gi) = self.group_index(a) {
                    let t = &mut self.groups[gi].tokens;
                    if t.len() <= round {
                        t.resize(round + 1, 0);
                    }
                    t[round] = t[round].wrapping_add(1);
                }
            }
            _ => self.stats.dropped += 1,
        }
    }
}

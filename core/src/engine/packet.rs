//! Packets (LFC): fixed-size buffers in engine memory that the program fills and
//! launches, and that received packets are lent in.
//!
//! A send packet comes from the transmit pool; launching it queues one reliable
//! single-frame message per destination that reads the same buffer (no copy at
//! launch; the frame is built from it, and rebuilt from it if it must be sent
//! again), and the buffer returns to the pool once every destination has acked.
//! A received packet is stored into a slot of the receive pool (LFC's host receive
//! ring: `-lfc-ring-frames`) and queued for delivery; the program either hands it
//! back at once or keeps it until [`Engine::packet_free`]. A kept packet holds its
//! slot, and when the pool is empty new packets are refused at the wire: the sender
//! keeps them and retries, so kept packets throttle their senders (credits), and
//! nothing is dropped. A multicast packet is forwarded to the receiver's children in
//! the tree from the same slot before it is queued for delivery.
//!
//! Delivery is an event the personality pulls ([`Engine::next_delivery`]) outside
//! `poll`, so the code it runs (LFC's `lfc_upcall`) may launch packets and free
//! others with the whole engine at hand.

use super::mcast::{forward_targets, Tree, BOARD, INTERNAL, MAX_CHILDREN, UNICAST};
use super::*;

/// Largest payload of a packet (LFC's `lfc_packet_size` is this or less where a
/// device's frames are smaller).
pub const PACKET_MAX: usize = 1024;

/// One packet buffer.
#[derive(Debug, Clone)]
pub struct PacketBuf {
    /// The program holds it (allocated for sending, or a delivered packet kept).
    user: bool,
    /// Delivery is queued, not yet taken by the program.
    queued: bool,
    /// A delivered packet (as opposed to one allocated for sending).
    lent: bool,
    /// Sends still reading it.
    net: u16,
    len: u16,
    /// The bytes lie in the device's send slot of the same index, not in `data`.
    pooled: bool,
    data: [u8; PACKET_MAX],
}

impl PacketBuf {
    /// A free buffer.
    pub const EMPTY: PacketBuf = PacketBuf {
        user: false,
        queued: false,
        lent: false,
        net: 0,
        len: 0,
        pooled: false,
        data: [0; PACKET_MAX],
    };

    fn is_free(&self) -> bool {
        !self.user && !self.queued && self.net == 0
    }
}

/// Names a packet buffer: transmit or receive pool, and index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketId(u16);

const RX_BIT: u16 = 0x8000;

impl PacketId {
    /// The number an operation keeps (`Op::packet`).
    pub(super) fn raw(self) -> u16 {
        self.0
    }

    fn tx(i: usize) -> Self {
        PacketId(i as u16)
    }
    fn rx(i: usize) -> Self {
        PacketId(i as u16 | RX_BIT)
    }
    /// True for a buffer of the receive pool.
    pub(crate) fn is_rx(self) -> bool {
        self.0 & RX_BIT != 0
    }
    /// Index in its pool.
    pub fn index(self) -> usize {
        (self.0 & !RX_BIT) as usize
    }
}

/// A received packet, waiting for the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Where the bytes are ([`Engine::packet`]).
    pub packet: PacketId,
    /// The instance that launched it (for a multicast, the tree's root).
    pub src: NodeId,
    /// Payload length.
    pub len: usize,
    /// Delivered by a multicast or broadcast (LFC `LFC_UPCALL_MCAST`).
    pub multicast: bool,
    /// Sent by the personality to itself ([`Engine::launch_internal`]), not for the program.
    pub internal: bool,
}

impl Delivery {
    /// An empty queue entry (for caller storage).
    pub const EMPTY: Delivery = Delivery {
        packet: PacketId(0),
        src: 0,
        len: 0,
        multicast: false,
        internal: false,
    };
}

/// Packet pools and the delivery queue.
#[derive(Debug)]
pub struct Packets<'a> {
    /// Send packets.
    pub tx: ManagedSlice<'a, PacketBuf>,
    /// Receive packets (the host receive ring).
    pub rx: ManagedSlice<'a, PacketBuf>,
    /// Delivery queue: at least `tx.len() + rx.len()` entries.
    pub queue: ManagedSlice<'a, Delivery>,
    head: usize,
    len: usize,
    /// Receive slots in use.
    rx_used: usize,
    /// Internal deliveries in the queue.
    internal: usize,
    /// A packet send failed (its peer died) and the program has not been told.
    failed: Option<NodeId>,
}

impl Default for Packets<'_> {
    fn default() -> Self {
        Packets::new(
            ManagedSlice::Borrowed(&mut []),
            ManagedSlice::Borrowed(&mut []),
            ManagedSlice::Borrowed(&mut []),
        )
    }
}

impl<'a> Packets<'a> {
    /// Pools from caller storage.
    pub fn new(
        tx: ManagedSlice<'a, PacketBuf>,
        rx: ManagedSlice<'a, PacketBuf>,
        queue: ManagedSlice<'a, Delivery>,
    ) -> Self {
        Packets {
            tx,
            rx,
            queue,
            head: 0,
            len: 0,
            rx_used: 0,
            internal: 0,
            failed: None,
        }
    }

    /// Pools of `tx` send and `rx` receive packets, allocated once here.
    #[cfg(feature = "alloc")]
    pub fn with_capacity(tx: usize, rx: usize) -> Self {
        let mk = |n: usize| {
            let mut v = alloc::vec::Vec::with_capacity(n);
            v.resize(n, PacketBuf::EMPTY);
            ManagedSlice::from(v)
        };
        Packets::new(mk(tx), mk(rx), alloc::vec![Delivery::EMPTY; tx + rx].into())
    }

    pub(super) fn buf(&self, id: PacketId) -> Option<&PacketBuf> {
        if id.is_rx() {
            self.rx.get(id.index())
        } else {
            self.tx.get(id.index())
        }
    }

    /// Send packet `id` carries its first `len` bytes (the frame is built from
    /// them): the length it had before, to put back if the send does not happen.
    pub(super) fn set_len(&mut self, id: PacketId, len: usize) -> Option<u16> {
        let b = self.buf_mut(id)?;
        Some(core::mem::replace(&mut b.len, len as u16))
    }

    /// Send packet `id` went to the network with one operation: the engine's now.
    pub(super) fn launched(&mut self, id: PacketId) {
        if let Some(b) = self.buf_mut(id) {
            b.user = false;
            b.net += 1;
        }
    }

    fn buf_mut(&mut self, id: PacketId) -> Option<&mut PacketBuf> {
        if id.is_rx() {
            self.rx.get_mut(id.index())
        } else {
            self.tx.get_mut(id.index())
        }
    }

    /// The bytes a send of packet `id` reads (`None` for one in a device send slot).
    pub(super) fn payload(&self, id: u16) -> Option<&[u8]> {
        let b = self.buf(PacketId(id)).filter(|b| !b.pooled)?;
        b.data.get(..b.len as usize)
    }

    /// The device send slot that holds packet `id`, if one does.
    pub(super) fn pooled_slot(&self, id: u16) -> Option<usize> {
        let id = PacketId(id);
        if id.is_rx() {
            return None;
        }
        self.tx
            .get(id.index())
            .filter(|b| b.pooled)
            .map(|_| id.index())
    }

    /// A send reading packet `id` finished: one reader less.
    pub(super) fn release_net(&mut self, id: u16) {
        if let Some(b) = self.buf_mut(PacketId(id)) {
            b.net = b.net.saturating_sub(1);
            if b.is_free() && PacketId(id).is_rx() {
                self.rx_used -= 1;
            }
        }
    }

    /// Free receive slots.
    pub(super) fn rx_free(&self) -> usize {
        self.rx.len() - self.rx_used
    }

    /// Whether a received packet can be stored now: a free receive slot and room
    /// in the delivery queue.
    #[inline]
    pub(super) fn can_store(&self) -> bool {
        self.rx_free() != 0 && self.len < self.queue.len()
    }

    fn push(&mut self, d: Delivery) -> bool {
        let cap = self.queue.len();
        if self.len >= cap {
            return false;
        }
        let at = ring_index(self.head + self.len, cap);
        self.queue[at] = d;
        self.len += 1;
        self.internal += usize::from(d.internal);
        if let Some(b) = self.buf_mut(d.packet) {
            b.queued = true;
            b.lent = true;
        }
        true
    }
}

/// Index `i` (below twice `cap`: a head below `cap` plus an offset at most `cap`)
/// of a ring of `cap` entries. A compare, not `%`: the queue's length is known only
/// at run time, and a division costs tens of cycles on every packet.
#[inline]
fn ring_index(i: usize, cap: usize) -> usize {
    if i >= cap {
        i - cap
    } else {
        i
    }
}

impl<'a> Engine<'a> {
    /// Largest payload a packet may carry on this device: [`PACKET_MAX`], or less if
    /// the device's frames are smaller.
    pub fn packet_size(&self) -> usize {
        let tag = if self.cfg.auth_key.is_some() {
            wire::TAG_LEN
        } else {
            0
        };
        self.caps
            .mtu
            .saturating_sub(HEADER_LEN + tag)
            .min(PACKET_MAX)
    }

    /// Takes a free send packet (LFC `lfc_send_alloc`) in engine memory;
    /// `NoResources` while all are in flight (poll and try again).
    pub fn packet_alloc(&mut self) -> Result<PacketId, Error> {
        self.packet_take(false)
    }

    /// [`Engine::packet_alloc`] on device `dev`: where the device has send slots in
    /// its own memory ([`Capabilities::pool_slots`]), the packet is one of them, and
    /// its launch is sent from where the program wrote it, with no copy on the way
    /// (LFC's packets in NIC memory). Read and fill it with [`Engine::packet_in`] and
    /// [`Engine::packet_mut_in`].
    pub fn packet_alloc_on<D: Device>(&mut self, dev: &D) -> Result<PacketId, Error> {
        // Read once, as a poll reads them (`caps_read`): a device's capabilities
        // stay as they were when the engine began to use it.
        if !self.caps_read {
            self.set_capabilities(dev.capabilities());
            self.caps_read = true;
        }
        let id = self.packet_take(true)?;
        let i = id.index();
        let b = &mut self.bufs.pkts.tx[i];
        b.pooled = b.pooled
            && dev
                .send_pool()
                .and_then(|p| p.slot(i))
                .is_some_and(|s| s.len() >= PACKET_MAX);
        Ok(id)
    }

    fn packet_take(&mut self, pool: bool) -> Result<PacketId, Error> {
        let i = self
            .bufs
            .pkts
            .tx
            .iter()
            .position(PacketBuf::is_free)
            .ok_or(Error::NoResources)?;
        // A slot holds a packet of the largest size this device carries.
        let pooled =
            pool && i < usize::from(self.caps.pool_slots) && self.caps.pool_slot_size >= PACKET_MAX;
        let b = &mut self.bufs.pkts.tx[i];
        b.user = true;
        b.lent = false;
        b.len = 0;
        b.pooled = pooled;
        Ok(PacketId::tx(i))
    }

    /// The packet's bytes: a send packet's whole buffer, a delivered one's payload
    /// (`None` for one in a device send slot: see [`Engine::packet_in`]).
    pub fn packet(&self, id: PacketId) -> Option<&[u8]> {
        let b = self
            .bufs
            .pkts
            .buf(id)
            .filter(|b| (b.user || b.queued) && !b.pooled)?;
        let n = if b.lent { b.len as usize } else { PACKET_MAX };
        b.data.get(..n)
    }

    /// The packet's whole buffer, to fill (a send packet) or change (a kept one)
    /// (`None` for one in a device send slot: see [`Engine::packet_mut_in`]).
    pub fn packet_mut(&mut self, id: PacketId) -> Option<&mut [u8]> {
        let b = self.bufs.pkts.buf_mut(id).filter(|b| b.user && !b.pooled)?;
        Some(&mut b.data[..])
    }

    /// [`Engine::packet`] of a packet that may lie in a send slot of `dev`.
    pub fn packet_in<'d, D: Device>(&'d self, dev: &'d D, id: PacketId) -> Option<&'d [u8]> {
        let b = self.bufs.pkts.buf(id).filter(|b| b.user || b.queued)?;
        let n = if b.lent { b.len as usize } else { PACKET_MAX };
        if b.pooled {
            dev.send_pool()?.slot(id.index())?.get(..n)
        } else {
            b.data.get(..n)
        }
    }

    /// [`Engine::packet_mut`] of a packet that may lie in a send slot of `dev`.
    pub fn packet_mut_in<'d, D: Device>(
        &'d mut self,
        dev: &'d mut D,
        id: PacketId,
    ) -> Option<&'d mut [u8]> {
        let b = self.bufs.pkts.buf_mut(id).filter(|b| b.user)?;
        if b.pooled {
            dev.send_pool_mut()?
                .slot_mut(id.index())?
                .get_mut(..PACKET_MAX)
        } else {
            Some(&mut b.data[..])
        }
    }

    /// The packet a pointer into a pool names, for a C facade: `addr` must be the
    /// start of a buffer's data.
    pub(crate) fn packet_at(&self, addr: usize) -> Option<PacketId> {
        let find = |pool: &[PacketBuf]| {
            let base = pool.as_ptr() as usize;
            let size = core::mem::size_of::<PacketBuf>();
            let data_off = core::mem::offset_of!(PacketBuf, data);
            let rel = addr.checked_sub(base + data_off)?;
            (rel % size == 0 && rel / size < pool.len()).then_some(rel / size)
        };
        let p = &self.bufs.pkts;
        find(&p.tx)
            .filter(|&i| !p.tx[i].pooled)
            .map(PacketId::tx)
            .or_else(|| find(&p.rx).map(PacketId::rx))
    }

    /// [`Engine::packet_at`] for packets that may lie in send slots of `dev`.
    pub(crate) fn packet_at_in<D: Device>(&self, dev: &D, addr: usize) -> Option<PacketId> {
        let p = &self.bufs.pkts;
        let pooled = (0..p.tx.len()).find(|&i| {
            p.tx[i].pooled
                && dev
                    .send_pool()
                    .and_then(|p| p.slot(i))
                    .is_some_and(|s| s.as_ptr() as usize == addr)
        });
        pooled.map(PacketId::tx).or_else(|| self.packet_at(addr))
    }

    /// Free send packets.
    pub fn packets_free(&self) -> (usize, usize) {
        let p = &self.bufs.pkts;
        let count = |pool: &[PacketBuf]| pool.iter().filter(|b| b.is_free()).count();
        (count(&p.tx), count(&p.rx))
    }

    pub(super) fn check_launch(&self, id: PacketId, len: usize) -> Result<(), Error> {
        let b = self.bufs.pkts.buf(id).ok_or(Error::InvalidHandle)?;
        if id.is_rx() || !b.user || b.lent || b.net != 0 {
            return Err(Error::InvalidHandle);
        }
        if len > self.packet_size() {
            return Err(Error::LongerThan(self.packet_size()));
        }
        Ok(())
    }

    /// Sends the first `len` bytes of send packet `id` to instance `dest` of this
    /// group (LFC `lfc_ucast_launch`); the packet goes back to the engine. To itself,
    /// the packet is delivered without leaving the process.
    pub fn launch_unicast(&mut self, id: PacketId, dest: NodeId, len: usize) -> Result<(), Error> {
        self.check_launch(id, len)?;
        if dest >= self.size {
            return Err(Error::UnknownNode);
        }
        if dest == self.cfg.node {
            let me = self.cfg.node;
            let p = &mut self.bufs.pkts;
            p.tx[id.index()].len = len as u16;
            p.tx[id.index()].user = false;
            let d = Delivery {
                packet: id,
                src: me,
                len,
                multicast: false,
                internal: false,
            };
            if !p.push(d) {
                p.tx[id.index()].user = true;
                return Err(Error::NoResources);
            }
            return Ok(());
        }
        self.launch_to(id, dest, len, UNICAST)
    }

    /// [`Engine::launch_unicast`] of a packet the receiving personality takes for
    /// itself ([`Delivery::internal`]), e.g. statistics; not to this instance.
    pub fn launch_internal(&mut self, id: PacketId, dest: NodeId, len: usize) -> Result<(), Error> {
        self.check_launch(id, len)?;
        if dest >= self.size || dest == self.cfg.node {
            return Err(Error::UnknownNode);
        }
        self.launch_to(id, dest, len, INTERNAL)
    }

    fn launch_to(
        &mut self,
        id: PacketId,
        dest: NodeId,
        len: usize,
        port: u16,
    ) -> Result<(), Error> {
        self.reserve_sends(&[dest], 0)?;
        let b = &mut self.bufs.pkts.tx[id.index()];
        b.len = len as u16;
        b.user = false;
        let me = self.cfg.node;
        self.start_packet_send(id, dest, port, me, Tree::Binary);
        Ok(())
    }

    /// Sends the first `len` bytes of send packet `id` to every member of multicast
    /// group `gid` but this instance (LFC `lfc_mcast_launch`; [`MCAST_ALL`] is
    /// `lfc_bcast_launch`), down a `tree` that the members forward along.
    pub fn launch_multicast(
        &mut self,
        id: PacketId,
        gid: u16,
        len: usize,
        tree: Tree,
    ) -> Result<(), Error> {
        self.check_launch(id, len)?;
        let me = self.cfg.node;
        let members = self.mcast_members(gid).ok_or(Error::UnknownGroup)?;
        if self.packet_board_fits(len) {
            let anyone = (0..members.len()).any(|i| members.get(i) != me);
            return self.launch_board(id, gid, len, anyone);
        }
        let mut out = [0; MAX_CHILDREN];
        let n = forward_targets(members, me, me, tree, &mut out).unwrap_or(0);
        self.reserve_sends(&out[..n], 0)?;
        self.bcast.packet_tree_used = true;
        let b = &mut self.bufs.pkts.tx[id.index()];
        b.len = len as u16;
        b.user = false;
        for &child in &out[..n] {
            self.start_packet_send(id, child, gid, me, tree);
        }
        Ok(())
    }

    /// [`Engine::launch_multicast`] on device `dev`: a packet that goes through the
    /// board, with no board frame of ours queued before it, is written there in
    /// this call (no operation, no transmit pass) and goes back to the engine.
    /// `Ok(true)`: it was; `Ok(false)`: it was queued as by `launch_multicast`.
    pub(crate) fn launch_multicast_on<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        id: PacketId,
        gid: u16,
        len: usize,
        tree: Tree,
    ) -> Result<bool, Error> {
        self.check_launch(id, len)?;
        let me = self.cfg.node;
        let anyone = self
            .mcast_members(gid)
            .is_some_and(|m| (0..m.len()).any(|i| m.get(i) != me));
        if anyone && self.bcast.board_head == NONE && self.packet_board_fits(len) {
            self.bufs.pkts.tx[id.index()].len = len as u16;
            let op = self.board_packet_op(id, gid, len);
            if self.write_board(now, dev, &op, None, None).is_some() {
                // No reader left: the packet is free again.
                self.bufs.pkts.tx[id.index()].user = false;
                self.stats.board_now += 1;
                return Ok(true);
            }
        }
        self.launch_multicast(id, gid, len, tree).map(|()| false)
    }

    /// Whether [`Engine::launch_multicast`] of a `len`-byte packet to every
    /// instance ([`MCAST_ALL`]) would go through this instance's board (written
    /// once in NIC memory, read there by every other instance; no relays): the
    /// device has one for the whole group and no packet tree was used.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn board_takes_packet(&self, len: usize) -> bool {
        len <= self.packet_size() && self.packet_board_fits(len)
    }

    /// Whether [`Engine::launch_multicast`] of a `len`-byte packet to every
    /// instance goes down a tree of relays, and always will: the device has no
    /// board for the whole group, so no launch takes another path that a later
    /// one could overtake, and the packet fits.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn tree_takes_packet(&self, len: usize) -> bool {
        self.caps.board_nodes != self.size && len <= self.packet_size()
    }

    /// Whether `root`'s packets to every instance ([`MCAST_ALL`]) down `tree`
    /// reach this instance through `via`, a relay above it: once `via` is dead,
    /// what `root` multicasts no longer comes here.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn relayed_through(&self, root: NodeId, via: NodeId, tree: Tree) -> bool {
        let mut x = self.cfg.node;
        // A parent's position is below its child's: at most `size` steps.
        for _ in 0..self.size {
            match super::mcast::tree_parent(self.size, root, x, tree) {
                Some(p) if p == root => return false,
                Some(p) if p == via => return true,
                Some(p) => x = p,
                None => return false,
            }
        }
        false
    }

    /// Whether multicast packets go through the device's board (see `board`): it
    /// reaches every instance of our group and holds the frame, and no multicast of
    /// ours ever went down a tree (one path, so members get them in launch order).
    fn packet_board_fits(&self, len: usize) -> bool {
        let tag = if self.cfg.auth_key.is_some() {
            wire::TAG_LEN
        } else {
            0
        };
        !self.bcast.packet_tree_used
            && self.caps.board_nodes == self.size
            && HEADER_LEN + len + tag <= self.caps.board_mtu
            && (0..self.size).all(|i| {
                self.group(self.cfg.group)
                    .and_then(|g| g.members.addr(i))
                    .is_some_and(|a| a.0 < self.size)
            })
    }

    /// The board frame of packet `id`'s first `len` bytes to multicast group `gid`,
    /// as an operation (`write_board` reads it).
    fn board_packet_op(&self, id: PacketId, gid: u16, len: usize) -> Op<'a> {
        let me = self.cfg.node;
        let mut op = Op::EMPTY;
        op.kind = Kind::Packet;
        op.packet = id.0;
        op.total = len as u32;
        op.src_port = me;
        op.root = me;
        op.dest = Dest {
            group: self.cfg.group,
            node: BROADCAST,
            port: gid,
        };
        op
    }

    /// Queues packet `id` to be written once into the device's board, where each
    /// member of `gid` takes it itself: the device model is the multicast, no member
    /// forwards (LFC's NIC-level multicast on `shm`). `anyone`: a member other than
    /// this instance exists (else the packet just goes back to the pool).
    fn launch_board(
        &mut self,
        id: PacketId,
        gid: u16,
        len: usize,
        anyone: bool,
    ) -> Result<(), Error> {
        let oi = if anyone {
            Some(self.ops.alloc()?)
        } else {
            None
        };
        let b = &mut self.bufs.pkts.tx[id.index()];
        b.len = len as u16;
        b.user = false;
        let Some(oi) = oi else { return Ok(()) };
        b.net += 1;
        let mut op = self.board_packet_op(id, gid, len);
        op.state = OpState::Active;
        op.detached = true;
        op.gen = self.ops.table[oi].gen;
        self.ops.table[oi] = op;
        self.queue_board(oi);
        Ok(())
    }

    /// A packet from the board of `root` (checked by `rx_board`: ours, from the
    /// node it names). Taken and queued for delivery if this instance is one of
    /// `gid`'s members, taken and skipped if not; `false` (left on the board, which
    /// holds back that root's later frames) while no receive slot is free.
    pub(super) fn rx_board_packet(&mut self, repr: &Repr, payload: &[u8]) -> bool {
        let gid = repr.ends.dst_port;
        let root = repr.ends.src_node;
        let me = self.cfg.node;
        let well_formed = repr.flags.contains(Flags::TREE)
            && !repr.flags.contains(Flags::RELIABLE)
            && repr.ends.dst_node == BROADCAST
            && repr.ends.src_port == root
            && repr.offset == u32::from(BOARD)
            && payload.len() <= PACKET_MAX
            && gid != UNICAST
            && gid != INTERNAL;
        let Some(members) = self.mcast_members(gid).filter(|_| well_formed) else {
            // Groups are static and the same everywhere: an unknown one is garbage.
            self.stats.rx_malformed += 1;
            return true;
        };
        if root == me || !members.contains(me) {
            return true;
        }
        if self.bufs.pkts.rx_free() == 0 || self.bufs.pkts.len >= self.bufs.pkts.queue.len() {
            return false;
        }
        self.store_packet(payload, root, gid);
        self.stats.rx_frames += 1;
        self.stats.board_rx += 1;
        true
    }

    /// Stores a received packet into a free receive slot (the caller checked there
    /// is one, and room in the delivery queue) and queues its delivery.
    fn store_packet(&mut self, payload: &[u8], root: NodeId, gid: u16) -> Option<PacketId> {
        let slot = self.bufs.pkts.rx.iter().position(PacketBuf::is_free)?;
        self.progress.stored = true;
        let n = payload.len().min(PACKET_MAX);
        self.bufs.pkts.rx_used += 1;
        let b = &mut self.bufs.pkts.rx[slot];
        b.data[..n].copy_from_slice(&payload[..n]);
        b.len = n as u16;
        let id = PacketId::rx(slot);
        self.bufs.pkts.push(Delivery {
            packet: id,
            src: root,
            len: n,
            multicast: gid != UNICAST && gid != INTERNAL,
            internal: gid == INTERNAL,
        });
        self.stats.delivered += 1;
        Some(id)
    }

    /// Checks that a send to each of `targets` can start now (operation slots, plus
    /// `extra` more for a parent operation, and channels), so a launch or a forward
    /// is all or nothing.
    pub(super) fn reserve_sends(&mut self, targets: &[NodeId], extra: usize) -> Result<(), Error> {
        let n = targets.len() + extra;
        let free = self
            .ops
            .iter()
            .filter(|o| o.state == OpState::Free)
            .take(n)
            .count();
        if free < n {
            return Err(Error::NoResources);
        }
        let group = self.cfg.group;
        for &t in targets {
            let addr = self.addr_of(group, t)?;
            self.channel_for(addr, group, t)?;
        }
        Ok(())
    }

    /// Queues a send of packet `id` to `dest` (room checked by `reserve_sends`).
    fn start_packet_send(
        &mut self,
        id: PacketId,
        dest: NodeId,
        gid: u16,
        root: NodeId,
        tree: Tree,
    ) {
        let group = self.cfg.group;
        let Ok(ci) = self
            .addr_of(group, dest)
            .and_then(|a| self.channel_for(a, group, dest))
        else {
            return;
        };
        let Ok(oi) = self.ops.alloc() else { return };
        let len = self.bufs.pkts.buf(id).map_or(0, |b| b.len);
        if let Some(b) = self.bufs.pkts.buf_mut(id) {
            b.net += 1;
        }
        let mut op = Op::EMPTY;
        op.state = OpState::Active;
        op.reliable = true;
        op.detached = true;
        op.kind = Kind::Packet;
        op.packet = id.0;
        op.aux = tree as u8;
        op.total = len as u32;
        op.src_port = root;
        op.dest = Dest {
            group,
            node: dest,
            port: gid,
        };
        self.enqueue(ci, oi, &op);
    }

    /// A packet frame accepted in sequence from channel `ci`: stored, forwarded and
    /// queued, or refused (false) until a receive slot, an operation slot or the
    /// messages before it are free.
    pub(super) fn rx_packet(&mut self, ci: usize, repr: &Repr, payload: &[u8]) -> bool {
        let ch = &self.chans.table[ci];
        let next = ch.next_reserve;
        if seq_lt(repr.msg_id, next) {
            self.stats.rx_dropped += 1;
            return true;
        }
        // In message order, after every earlier message has been handed over.
        if repr.msg_id != next || ch.next_deliver != next {
            return false;
        }
        if repr.ends.src_group != self.cfg.group {
            // Packets travel inside one group: ranks and trees are numbered in it.
            self.stats.rx_malformed += 1;
            self.consume_message(ci);
            return true;
        }
        let gid = repr.ends.dst_port;
        let root = repr.ends.src_port;
        let mut out = [0; MAX_CHILDREN];
        let mut kids = 0;
        let multicast = gid != UNICAST && gid != INTERNAL;
        if multicast {
            let tree = Tree::from_u32(repr.offset);
            let me = self.cfg.node;
            let from = repr.ends.src_node;
            let mut theirs = [0; MAX_CHILDREN];
            let targets = self
                .mcast_members(gid)
                .zip(tree)
                .and_then(|(members, tree)| {
                    // Only from our parent in `root`'s tree: another member of the
                    // job cannot pass its packets off as `root`'s.
                    let n = forward_targets(members, root, from, tree, &mut theirs)?;
                    theirs[..n].contains(&me).then_some(())?;
                    forward_targets(members, root, me, tree, &mut out)
                });
            match targets {
                Some(n) if root != me => kids = n,
                _ => {
                    // An unknown group or shape, a tree we are not in, or a sender
                    // that is not our parent in it: taken and dropped, so the
                    // channel's order goes on.
                    self.stats.rx_malformed += 1;
                    self.consume_message(ci);
                    return true;
                }
            }
        } else if root != repr.ends.src_node {
            self.stats.rx_malformed += 1;
            self.consume_message(ci);
            return true;
        }
        if !self.bufs.pkts.can_store() || self.reserve_sends(&out[..kids], 0).is_err() {
            return false;
        }
        let Some(id) = self.store_packet(payload, root, gid) else {
            return false;
        };
        // Forwarded before the program sees it: a slow consumer does not hold up the tree.
        let tree = Tree::from_u32(repr.offset).unwrap_or_default();
        for &child in &out[..kids] {
            self.start_packet_send(id, child, gid, root, tree);
        }
        self.stats.forwarded += u64::from(kids > 0);
        self.consume_message(ci);
        // Not `self.progress.delivered`: a poll goes on draining (LFC makes an upcall for
        // each packet that has arrived), bounded by its batch.
        true
    }

    /// What [`Engine::rx_packet`] does for a packet that [`Engine::packet_fits`]:
    /// stored and queued for the program, its message taken. `false` (nothing
    /// changed) only if no receive slot was free after all.
    #[inline]
    pub(super) fn store_predicted_packet(
        &mut self,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
    ) -> bool {
        let (root, gid) = (repr.ends.src_port, repr.ends.dst_port);
        if self.store_packet(payload, root, gid).is_none() {
            return false;
        }
        self.consume_message(ci);
        true
    }

    /// The channel's next message has been taken whole.
    fn consume_message(&mut self, ci: usize) {
        let ch = &mut self.chans.table[ci];
        ch.unbound_msg = None;
        ch.next_reserve = ch.next_reserve.wrapping_add(1);
        ch.next_deliver = ch.next_deliver.wrapping_add(1);
    }

    /// The oldest received packet not yet handed to the program (LFC: the next
    /// `lfc_upcall`). The program then owns it: it reads it with
    /// [`Engine::packet`] and gives it back with [`Engine::packet_free`], at once or
    /// later.
    pub fn next_delivery(&mut self) -> Option<Delivery> {
        let p = &mut self.bufs.pkts;
        if p.len == 0 {
            return None;
        }
        let d = p.queue[p.head];
        p.head = ring_index(p.head + 1, p.queue.len());
        p.len -= 1;
        p.internal -= usize::from(d.internal);
        if let Some(b) = p.buf_mut(d.packet) {
            b.queued = false;
            b.user = true;
        }
        Some(d)
    }

    /// The oldest internal delivery ([`Delivery::internal`]) wherever it waits in the
    /// queue, taken out of it (the others keep their order): a personality's own
    /// packets must not wait behind the program's.
    #[inline]
    pub fn next_internal_delivery(&mut self) -> Option<Delivery> {
        if self.bufs.pkts.internal == 0 {
            return None;
        }
        self.take_internal_delivery()
    }

    fn take_internal_delivery(&mut self) -> Option<Delivery> {
        let p = &mut self.bufs.pkts;
        let cap = p.queue.len();
        let at = |k: usize| ring_index(p.head + k, cap);
        let k = (0..p.len).find(|&k| p.queue[at(k)].internal)?;
        let d = p.queue[at(k)];
        for j in k..p.len - 1 {
            p.queue[at(j)] = p.queue[at(j + 1)];
        }
        p.len -= 1;
        p.internal -= 1;
        if let Some(b) = p.buf_mut(d.packet) {
            b.queued = false;
            b.user = true;
        }
        Some(d)
    }

    /// Received packets waiting for the program.
    pub fn deliveries_pending(&self) -> usize {
        self.bufs.pkts.len
    }

    /// Gives a packet back (LFC `lfc_packet_free`): a delivered packet the program
    /// kept, or a send packet it decided not to launch. A receive slot coming free
    /// lets refused senders in again.
    pub fn packet_free(&mut self, id: PacketId) -> Result<(), Error> {
        let b = self
            .bufs
            .pkts
            .buf_mut(id)
            .filter(|b| b.user)
            .ok_or(Error::InvalidHandle)?;
        b.user = false;
        b.lent = false;
        if id.is_rx() && b.is_free() {
            self.bufs.pkts.rx_used -= 1;
            self.wake_refused();
        }
        Ok(())
    }

    /// A peer found dead, or one a packet send failed to, not yet taken: one a
    /// call, each dead peer once (and again for each later launch to it).
    pub(crate) fn take_packet_failure(&mut self) -> Option<NodeId> {
        if let Some(n) = self.bufs.pkts.failed.take() {
            return Some(n);
        }
        if self.chans.unreported == 0 {
            return None;
        }
        let ch = self.chans.table[..self.chans.hwm]
            .iter_mut()
            .find(|c| c.unreported)?;
        ch.unreported = false;
        self.chans.unreported -= 1;
        Some(ch.peer_node)
    }

    pub(super) fn packet_send_failed(&mut self, dest: NodeId) {
        self.bufs.pkts.failed.get_or_insert(dest);
    }
}

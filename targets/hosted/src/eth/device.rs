//! Receive and transmit tokens over the rings (or the `AF_XDP` socket), and the
//! core's `Device` trait.

use super::*;

/// A received frame, lent from the ring until consumed.
#[derive(Debug)]
pub struct EthRx<'a> {
    pub(super) dev: &'a mut EthDevice,
    pub(super) slot: *mut u8,
    pub(super) off: usize,
    pub(super) len: usize,
    pub(super) src: u16,
    /// The UMEM chunk, for a frame from the `AF_XDP` socket (`slot` points into it).
    pub(super) chunk: Option<u64>,
}

/// A transmit slot for one frame to a peer.
#[derive(Debug)]
pub struct EthTx<'a> {
    pub(super) dev: &'a mut EthDevice,
    pub(super) dst: [u8; 6],
}

/// Writes the Ethernet header (to `dst` from `src`) and the padding around a payload
/// of `len` bytes in frame `b` (`ETH_HEADER + len` bytes at least).
pub(super) fn frame_around(b: &mut [u8], dst: &[u8; 6], src: &[u8; 6], len: usize) {
    b[0..6].copy_from_slice(dst);
    b[6..12].copy_from_slice(src);
    b[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    // Padding up to the 60-byte minimum; none after most Volley frames (a call to
    // `memset` even for nothing).
    if let Some(pad) = b.get_mut(ETH_HEADER + len..).filter(|p| !p.is_empty()) {
        pad.fill(0);
    }
}

impl EthDevice {
    /// The wake-up descriptor ([`crate::wakeup`]), made at the first call: the
    /// packet socket (readable while its ring holds a frame for us) and the
    /// `AF_XDP` socket where there is one.
    pub fn wakeup(&mut self) -> Result<&crate::wakeup::Wakeup, HostError> {
        if self.wakeup.is_none() {
            let mut fds = vec![self.fd.as_raw_fd()];
            fds.extend(self.xsk.as_ref().map(|x| x.raw_fd()));
            self.wakeup = Some(crate::wakeup::Wakeup::new(&fds)?);
        }
        Ok(self.wakeup.as_ref().expect("made above"))
    }

    /// Whether the program may sleep: no frame in the rings (the sockets wake the
    /// sleeper for later ones).
    pub fn arm_rx(&mut self) -> bool {
        !self.rx_pending()
    }

    /// The next frame of a rank from the `AF_XDP` socket, if one waits: its chunk,
    /// where it lies, its length and the rank.
    pub(super) fn next_xsk(&mut self) -> Option<(u64, *const u8, usize, u16)> {
        loop {
            let (chunk, frame, len) = self.xsk.as_mut()?.peek()?;
            // SAFETY: `peek` lent `len` bytes at `frame` until the chunk is released.
            let f = unsafe { std::slice::from_raw_parts(frame, len) };
            // The program checked type and job key; the station is checked here, as on
            // the packet ring (where the kernel filters by destination).
            let rank = (len >= ETH_HEADER && f[0..6] == self.iface.mac)
                .then(|| self.rank_of(&f[6..12]))
                .flatten();
            if let Some(rank) = rank {
                return Some((chunk, frame, len, rank));
            }
            self.stats.rx_foreign += 1;
            if let Some(x) = self.xsk.as_mut() {
                x.release(chunk);
            }
        }
    }

    /// The rank at MAC address `src`.
    pub(super) fn rank_of(&self, src: &[u8]) -> Option<u16> {
        // A few ranks: a scan of their addresses beats hashing one.
        if self.macs.len() <= 16 {
            self.macs
                .iter()
                .position(|m| m[..] == *src)
                .map(|r| r as u16)
        } else {
            let mut m = [0u8; 6];
            m.copy_from_slice(src);
            self.ranks.get(&m).copied()
        }
    }
}

impl RxToken for EthRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        // SAFETY: the kernel handed this slot to us (TP_STATUS_USER, read with acquire
        // ordering) and will not touch it until its status is written back below;
        // `off + len` was checked to lie inside the slot. A frame from the `AF_XDP`
        // socket: `peek` lent these bytes until the chunk goes back below.
        let frame = unsafe { std::slice::from_raw_parts(self.slot.add(self.off), self.len) };
        let r = f(&frame[ETH_HEADER..]);
        match (self.chunk, self.dev.xsk.as_mut()) {
            (Some(c), Some(x)) => x.release(c),
            _ => self
                .dev
                .rings
                .status(self.slot)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release),
        }
        self.dev.stats.rx += 1;
        r
    }

    fn source(&self) -> Option<NodeAddr> {
        Some(NodeAddr(self.src))
    }
}

impl TxToken for EthTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let d = self.dev;
        let len = len.min(d.mtu);
        let total = (ETH_HEADER + len).max(ETH_MIN);
        let mac = d.iface.mac;
        if d.xsk.is_some() && total <= crate::xdp::MAX_FRAME {
            // Frames queued on the packet ring leave first.
            d.kick_ring();
        }
        if let Some(x) = d.xsk.as_mut().filter(|_| total <= crate::xdp::MAX_FRAME) {
            // `transmit` made sure of a chunk and a ring entry.
            let r = x.send(total, |b| {
                let r = f(&mut b[ETH_HEADER..ETH_HEADER + len]);
                frame_around(b, &self.dst, &mac, len);
                r
            });
            let queued = x.pending();
            d.stats.tx += 1;
            if queued as usize >= TX_BATCH {
                d.kick();
            }
            return r;
        }
        // Longer frames go by the packet ring, after those queued on the socket.
        if let Some(x) = d.xsk.as_mut() {
            x.kick();
        }
        let slot = d.rings.tx_slot(d.tx_next);
        // SAFETY: the slot's status was TP_STATUS_AVAILABLE (checked in `transmit`), so
        // the kernel does not read it until the status written below; the frame fits
        // the slot (`frame` was sized for the MTU).
        let b = unsafe { std::slice::from_raw_parts_mut(slot.add(TX_DATA), total) };
        let r = f(&mut b[ETH_HEADER..ETH_HEADER + len]);
        frame_around(b, &self.dst, &mac, len);
        // SAFETY: `tp_len` is the second word of the slot's tpacket2_hdr.
        unsafe { (slot.add(4) as *mut u32).write_volatile(total as u32) };
        d.rings
            .status(slot)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        d.tx_next = (d.tx_next + 1) % d.rings.tx_frames;
        d.tx_pending += 1;
        d.stats.tx += 1;
        if d.tx_pending >= TX_BATCH {
            d.kick();
        }
        r
    }
}

impl Device for EthDevice {
    type RxToken<'a> = EthRx<'a>;
    type TxToken<'a> = EthTx<'a>;

    fn receive(&mut self, now: Instant) -> Option<EthRx<'_>> {
        // The program polls: the beacon helper keeps quiet.
        self.polled
            .store(now.total_nanos(), std::sync::atomic::Ordering::Relaxed);
        if self.hellos.is_some() && now >= self.hello_at {
            self.hello_at = now + HELLO_CHECK;
            self.answer_hellos();
        }
        if let Some((chunk, frame, len, src)) = self.next_xsk() {
            return Some(EthRx {
                dev: self,
                slot: frame as *mut u8,
                off: 0,
                len,
                src,
                chunk: Some(chunk),
            });
        }
        loop {
            let slot = self.rings.rx_slot(self.rx_next);
            let status = self.rings.status(slot).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                return None;
            }
            self.rx_next = (self.rx_next + 1) % self.rings.rx_frames;
            if status & libc::TP_STATUS_LOSING != 0 {
                self.stats.rx_ring_full += 1;
            }
            // SAFETY: the slot is ours (TP_STATUS_USER); its tpacket2_hdr and
            // sockaddr_ll are plain bytes the kernel wrote before the status.
            let (len, snap, mac_off, pkttype) = unsafe {
                (
                    // tp_len, tp_snaplen, tp_mac (struct tpacket2_hdr).
                    (slot.add(4) as *const u32).read_volatile() as usize,
                    (slot.add(8) as *const u32).read_volatile() as usize,
                    (slot.add(12) as *const u16).read_volatile() as usize,
                    slot.add(RX_LL + LL_PKTTYPE).read_volatile(),
                )
            };
            let fits = mac_off
                .checked_add(snap)
                .is_some_and(|end| end <= self.rings.frame);
            // A frame longer than the slot arrives cut short (snaplen < len): dropped.
            if fits && snap == len && snap >= ETH_HEADER && pkttype != libc::PACKET_OTHERHOST {
                // SAFETY: inside the slot (checked above).
                let h = unsafe { std::slice::from_raw_parts(slot.add(mac_off), ETH_HEADER) };
                if let Some(rank) = self.rank_of(&h[6..12]) {
                    return Some(EthRx {
                        dev: self,
                        slot,
                        off: mac_off,
                        len: snap,
                        src: rank,
                        chunk: None,
                    });
                }
            }
            self.stats.rx_foreign += 1;
            self.rings
                .status(slot)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
    }

    /// A look at the status word of the packet ring's next slot (and at the
    /// `AF_XDP` receive ring's producer index): memory the kernel writes, no system
    /// call. A frame from no rank of the job also says yes; `receive` drops it.
    fn rx_pending(&self) -> bool {
        if self.xsk.as_ref().is_some_and(|x| x.rx_waiting()) {
            return true;
        }
        let slot = self.rings.rx_slot(self.rx_next);
        self.rings.status(slot).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    #[inline]
    fn transmit(&mut self, _now: Instant, dst: NodeAddr) -> Option<EthTx<'_>> {
        let to = *self.macs.get(dst.0 as usize)?;
        let slot = self.rings.tx_slot(self.tx_next);
        let mut status = self.rings.status(slot).load(Ordering::Acquire);
        if status != libc::TP_STATUS_AVAILABLE && self.tx_pending > 0 {
            // The ring is full of frames not yet handed over.
            self.kick();
            status = self.rings.status(slot).load(Ordering::Acquire);
        }
        if status & libc::TP_STATUS_WRONG_FORMAT != 0 {
            self.stats.tx_errors += 1;
            self.rings
                .status(slot)
                .store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
        } else if status != libc::TP_STATUS_AVAILABLE {
            return None;
        }
        // Room on both paths: the frame's length, which picks one, comes later.
        if let Some(x) = self.xsk.as_mut() {
            if !x.can_send() {
                return None;
            }
        }
        Some(EthTx { dev: self, dst: to })
    }

    fn flush(&mut self, _now: Instant) {
        self.kick();
    }

    fn transmit_parts(&mut self, _now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        let Some(&to) = self.macs.get(dst.0 as usize) else {
            return false;
        };
        // Frames already queued go first.
        self.kick();
        if self.tx_pending > 0 || self.xsk.as_ref().is_some_and(|x| x.pending() > 0) {
            return false;
        }
        let mut head = [0u8; ETH_HEADER];
        head[0..6].copy_from_slice(&to);
        head[6..12].copy_from_slice(&self.iface.mac);
        head[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.mtu {
            // Never from the engine (it keeps to the MTU): dropped, counted.
            self.stats.tx_errors += 1;
            return true;
        }
        let pad = [0u8; ETH_MIN];
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 8];
        let pieces = std::iter::once(&head[..])
            .chain(parts.iter().copied())
            .chain(std::iter::once(
                &pad[..ETH_MIN.saturating_sub(ETH_HEADER + len)],
            ))
            .filter(|p| !p.is_empty());
        let mut n = 0;
        for p in pieces {
            if n == iov.len() {
                self.stats.tx_errors += 1;
                return true;
            }
            iov[n] = libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            };
            n += 1;
        }
        // SAFETY: a zeroed msghdr is valid (no address, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        // SAFETY: a valid socket; `msg` points at `n` iovecs over live slices that
        // the kernel only reads during the call.
        let r = unsafe { crate::sys::sendmsg(self.gather.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
        if let Err(e) = r {
            if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                return false;
            }
            // Lost like a dropped frame: the engine sends it again.
            self.stats.tx_errors += 1;
            return true;
        }
        self.stats.tx += 1;
        self.stats.tx_gathered += 1;
        true
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(self.mtu, false, false)
    }

    fn transmit_reads_time(&self) -> bool {
        false
    }

    fn gather_from(&self) -> usize {
        GATHER_FROM
    }
}

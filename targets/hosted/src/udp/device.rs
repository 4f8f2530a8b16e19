//! Receive and transmit tokens, and the core's `Device` trait.

use super::*;

/// A received datagram and the rank it came from.
#[derive(Debug)]
pub struct UdpRx<'a>(&'a [u8], Option<u16>);

/// Room for a datagram to one peer, at the end of the batch.
#[derive(Debug)]
pub struct UdpTx<'a> {
    pub(super) dev: &'a mut UdpDevice,
    /// The rank it goes to.
    pub(super) to: u16,
}

impl<'a> UdpRx<'a> {
    /// A token lending `frame`, from rank `source` if known (a capture's copy of
    /// a frame, whatever the fabric).
    pub(crate) fn lent(frame: &'a [u8], source: Option<u16>) -> Self {
        UdpRx(frame, source)
    }
}

impl RxToken for UdpRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }

    fn source(&self) -> Option<NodeAddr> {
        self.1.map(NodeAddr)
    }
}

impl TxToken for UdpTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let d = self.dev;
        let len = len.min(d.shape.mtu);
        if !d.batch.fits(self.to, len) {
            d.send_batch();
        }
        let b = &mut d.batch;
        if b.count == 0 {
            b.to = self.to;
            b.seg = len;
        }
        let r = f(&mut b.buf[b.len..b.len + len]);
        b.len += len;
        b.count += 1;
        if !d.gso {
            d.send_batch();
        }
        r
    }
}

impl UdpDevice {
    /// The wake-up descriptor ([`crate::wakeup`]), made at the first call: the
    /// socket, readable while a datagram (or an ICMP report) waits.
    pub fn wakeup(&mut self) -> Result<&crate::wakeup::Wakeup, HostError> {
        if self.wakeup.is_none() {
            self.wakeup = Some(crate::wakeup::Wakeup::new(&[self.sock.as_raw_fd()])?);
        }
        Ok(self.wakeup.as_ref().expect("made above"))
    }

    /// Whether the program may sleep: no datagram left unread in our buffer (the
    /// socket itself wakes the sleeper for those in the kernel).
    pub fn arm_rx(&mut self) -> bool {
        self.rx_at >= self.rx_len
    }

    /// One read: with `UDP_GRO`'s control message while it is on, a plain
    /// `recvfrom` otherwise (cheaper, empty or not). Turns `UDP_GRO` on after
    /// [`GRO_AFTER`] datagrams in a row and off after [`GRO_IDLE`] empty reads.
    pub(super) fn read(&mut self) -> std::io::Result<(usize, SocketAddr, usize)> {
        let r = if self.gro.on {
            recv_coalesced(&self.sock, &mut self.rx)
        } else {
            recv_plain(&self.sock, &mut self.rx)
        };
        let (empty, got) = (
            matches!(&r, Err(e) if e.kind() == ErrorKind::WouldBlock),
            r.is_ok(),
        );
        let g = &mut self.gro;
        // Off: datagrams in a row; on: empty reads in a row.
        if (g.on && empty) || (!g.on && got) {
            g.run += 1;
        } else if empty || got {
            g.run = 0;
        }
        let due = if g.on { GRO_IDLE } else { GRO_AFTER };
        if g.allowed && g.run >= due {
            g.run = 0;
            let on = !g.on;
            if set_gro(&self.sock, on) {
                g.on = on;
                self.stats.gro_switches += 1;
            } else {
                // This kernel has no `UDP_GRO`: reads stay one datagram each.
                g.allowed = false;
            }
        }
        r
    }

    /// Hands the batch to the kernel: one datagram, or one segmented send.
    pub(super) fn send_batch(&mut self) {
        let b = &mut self.batch;
        if b.count == 0 {
            return;
        }
        let n = u64::from(b.count);
        let frames = &b.buf[..b.len];
        let to = &self.peer_addrs[usize::from(b.to)];
        let fd = self.sock.as_raw_fd();
        let sent = if b.count == 1 {
            again_after_report(|| crate::sys::send_to(fd, frames, to))
        } else {
            match again_after_report(|| send_segmented(&self.sock, to, frames, b.seg as u16)) {
                Ok(r) => {
                    self.stats.tx_segmented += 1;
                    Ok(r)
                }
                // No segmentation offload here: datagram by datagram from now on.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::ENOPROTOOPT | libc::EIO)
                    ) =>
                {
                    self.gso = false;
                    for f in frames.chunks(b.seg) {
                        let sent = again_after_report(|| crate::sys::send_to(fd, f, to));
                        count_send(sent, 1, &self.sock, &mut self.life, &mut self.stats);
                    }
                    b.count = 0;
                    b.len = 0;
                    return;
                }
                Err(e) => Err(e),
            }
        };
        count_send(sent, n, &self.sock, &mut self.life, &mut self.stats);
        b.count = 0;
        b.len = 0;
    }
}

impl Device for UdpDevice {
    type RxToken<'a> = UdpRx<'a>;
    type TxToken<'a> = UdpTx<'a>;

    fn receive(&mut self, now: Instant) -> Option<UdpRx<'_>> {
        // The program polls: the beacon helper keeps quiet.
        self.polled
            .store(now.total_nanos(), std::sync::atomic::Ordering::Relaxed);
        // Nothing written stays behind a poll (the engine flushes after each pass).
        self.send_batch();
        let mut reports = 0;
        loop {
            if self.rx_at < self.rx_len {
                // The next datagram of the last read.
                let (at, end) = (self.rx_at, (self.rx_at + self.rx_seg).min(self.rx_len));
                self.rx_at = end;
                self.stats.rx += 1;
                let src = self.rx_from.flatten();
                return Some(UdpRx(&self.rx[at..end], src));
            }
            self.rx_len = 0;
            self.rx_at = 0;
            match self.read() {
                Ok((n, from, seg)) => {
                    let Some(rank) = self.life.rank_of(&from) else {
                        if self.any_source {
                            // Behind NAT: the engine authenticates it and names the rank.
                            self.stats.rx_unlisted += 1;
                            (self.rx_len, self.rx_seg, self.rx_from) = (n, seg.max(1), Some(None));
                            continue;
                        }
                        // Not a rank of this job: not even parsed.
                        self.stats.rx_foreign += 1;
                        continue;
                    };
                    self.life.heard_from(rank as usize);
                    self.stats.rx_coalesced += u64::from(seg < n);
                    let src = self.strict_sources.then_some(rank);
                    (self.rx_len, self.rx_seg, self.rx_from) = (n, seg.max(1), Some(src));
                    if n == 0 {
                        // An empty datagram: the engine refuses it as it always did.
                        self.stats.rx += 1;
                        return Some(UdpRx(&self.rx[..0], src));
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == ErrorKind::InvalidData => {
                    self.stats.rx_truncated += 1;
                    continue;
                }
                // An ICMP error (IP_RECVERR): see which peer it was about, then read
                // on (the call reported the error instead of a datagram; a stream
                // of forged reports must not starve this rank of its peers' frames).
                Err(_) => {
                    self.life.read_errors(&self.sock, &mut self.stats);
                    reports += 1;
                    if reports > 4 {
                        return None;
                    }
                }
            }
        }
    }

    fn transmit(&mut self, _now: Instant, dst: NodeAddr) -> Option<UdpTx<'_>> {
        if usize::from(dst.0) >= self.peer_addrs.len() {
            return None;
        }
        Some(UdpTx {
            dev: self,
            to: dst.0,
        })
    }

    fn flush(&mut self, _now: Instant) {
        self.send_batch();
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(self.shape.mtu, false, false)
    }

    fn transmit_reads_time(&self) -> bool {
        false
    }

    fn gather_from(&self) -> usize {
        GATHER_FROM
    }

    fn liveness(&mut self) -> Option<&mut dyn volley_core::phy::Liveness> {
        Some(self)
    }

    fn transmit_parts(&mut self, _now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        if usize::from(dst.0) >= self.peer_addrs.len() {
            return false;
        }
        // Frames already written go first.
        self.send_batch();
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.shape.mtu || parts.len() > 8 {
            // Never from the engine (it keeps to the MTU, four parts): dropped, counted.
            self.stats.tx_errors += 1;
            return true;
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 8];
        for (v, p) in iov.iter_mut().zip(parts) {
            *v = libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            };
        }
        let to = &self.peer_addrs[usize::from(dst.0)];
        // SAFETY: a zeroed msghdr is valid (no address, no control data yet).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = to.as_ptr() as *mut libc::c_void;
        msg.msg_namelen = to.len();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = parts.len() as _;
        // SAFETY: a valid socket; `msg` points at the address and `parts.len()`
        // iovecs over live slices, which the kernel only reads during the call.
        let sent = again_after_report(|| unsafe {
            crate::sys::sendmsg(self.sock.as_raw_fd(), &msg, libc::MSG_DONTWAIT)
        });
        match sent {
            // The send buffer is full: the engine offers the frame again next pass
            // instead of losing it to a retransmission timeout.
            Err(e)
                if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) =>
            {
                if e.raw_os_error() == Some(libc::ENOBUFS) {
                    super::io::no_buffers(&mut self.stats, 1);
                }
                false
            }
            sent => {
                self.stats.tx_gathered += u64::from(sent.is_ok());
                count_send(sent, 1, &self.sock, &mut self.life, &mut self.stats);
                true
            }
        }
    }
}

/// ICMP reports as a hint (see `liveness.rs`).
impl volley_core::phy::Liveness for UdpDevice {
    fn peer_alive(&mut self, _now: Instant, peer: NodeAddr) -> bool {
        self.life.read_errors(&self.sock, &mut self.stats);
        let now = std::time::Instant::now();
        !self.life.gone_at(peer.0 as usize, now, &mut self.stats)
    }
}

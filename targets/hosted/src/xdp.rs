//! `AF_XDP` for the `eth` fabric: this job's frames straight from the driver into
//! memory the process reads, and out again, without the kernel's packet layers.
//!
//! An XDP program on the interface (loaded here, a few instructions, no compiler or
//! library needed) sends each frame of type [`ETHERTYPE`](crate::eth::ETHERTYPE) that
//! carries this job's key and fits a chunk to the `AF_XDP` socket bound to its receive
//! queue, through an `XSKMAP`. Everything else goes on to the kernel as before: other
//! jobs' frames, hellos, frames too long for a chunk, frames on queues without a
//! socket. The packet socket's rings stay open beside this one and take those, so a
//! peer on the plain path, a jumbo frame or a NIC that spreads frames over several
//! queues loses nothing. The program is attached through a BPF link owned by this
//! process: it goes away when the process does, however it ends.
//!
//! Modes, best first, as the kernel and driver allow: the driver's own XDP hook with
//! zero copy, the driver's hook with copies, and the generic hook every interface has
//! (`XDP_FLAGS_SKB_MODE`: frames are copied once each way, as with the packet rings,
//! but pass fewer layers).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::HostError;

/// Bytes of a UMEM chunk: one frame each. The largest aligned chunk (a page).
pub const CHUNK: usize = 4096;
/// Headroom the kernel keeps in front of a received frame (`XDP_PACKET_HEADROOM`).
const XDP_HEADROOM: usize = 256;
/// Longest frame a chunk takes (Ethernet header included): the kernel's
/// `chunk_size - XDP_PACKET_HEADROOM`. Longer ones the program passes to the kernel.
pub const MAX_FRAME: usize = CHUNK - XDP_HEADROOM;
/// Chunks lent to the kernel for receiving, and the receive and fill rings' size.
const RX_CHUNKS: usize = 2048;
/// Chunks for sending, and the transmit and completion rings' size.
const TX_CHUNKS: usize = 512;

// From <linux/bpf.h> and <linux/if_link.h>.
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

/// How the program is attached and the socket bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The driver's hook, frames in place in the UMEM.
    ZeroCopy,
    /// The driver's hook, frames copied.
    Driver,
    /// The generic hook, frames copied.
    Generic,
}

impl Mode {
    /// How the mode reads in messages.
    pub fn text(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "AF_XDP zero-copy",
            Mode::Driver => "AF_XDP in the driver, copying",
            Mode::Generic => "AF_XDP generic",
        }
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Frames taken from the `AF_XDP` receive ring.
    pub rx: u64,
    /// Frames put in the `AF_XDP` transmit ring.
    pub tx: u64,
    /// System calls that started transmission or woke the driver.
    pub kicks: u64,
    /// Receive descriptors outside the receive chunks, dropped.
    pub rx_invalid: u64,
    /// Kicks the kernel refused for another reason than a full queue.
    pub tx_errors: u64,
}

/// The XDP program: `ETHERTYPE` frames with job key `key` (the four bytes as they are
/// on the wire) and at most [`MAX_FRAME`] bytes go to the socket in `map` at the
/// frame's receive queue (or on to the kernel when that queue has none), everything
/// else straight on to the kernel.
fn program(map_fd: i32, key: [u8; 4]) -> [u64; 20] {
    // One instruction: opcode, destination and source registers, offset, immediate, as
    // a little-endian machine lays out `struct bpf_insn` (`open` refuses others).
    fn op(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
        code as u64
            | ((dst as u64 | (src as u64) << 4) << 8)
            | (off as u16 as u64) << 16
            | (imm as u32 as u64) << 32
    }
    const LDXW: u8 = 0x61; // dst = *(u32 *)(src + off)
    const LDXH: u8 = 0x69; // dst = *(u16 *)(src + off)
    const MOV: u8 = 0xbf; // dst = src (64-bit)
    const MOVK: u8 = 0xb7; // dst = imm
    const ADDK: u8 = 0x07; // dst += imm
    const SUB: u8 = 0x1f; // dst -= src
    const JGT: u8 = 0x2d; // if dst > src goto +off
    const JGTK: u8 = 0x25; // if dst > imm goto +off
    const JNEK: u8 = 0x55; // if dst != imm goto +off (64-bit)
    const JNEK32: u8 = 0x56; // if (u32)dst != (u32)imm goto +off
    const LDDW: u8 = 0x18; // dst = imm64 (two slots); src 1: a map's descriptor
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const REDIRECT_MAP: i32 = 51; // bpf_redirect_map
    const XDP_PASS: i32 = 2;
    // Offsets in the frame: Ethernet type, the Volley header's job key (WIRE.md), both
    // as the program's loads read the wire's bytes.
    let ethertype = u16::from_le_bytes(crate::eth::ETHERTYPE.to_be_bytes()) as i32;
    let job = i32::from_le_bytes(key);
    // Jumps to the two instructions that pass the frame on, from instruction `at`.
    const PASS: i16 = 18;
    let to_pass = |at: i16| PASS - at - 1;
    [
        op(LDXW, 2, 1, 0, 0),                         // 0: r2 = ctx->data
        op(LDXW, 3, 1, 4, 0),                         // 1: r3 = ctx->data_end
        op(MOV, 4, 2, 0, 0),                          // 2: r4 = data
        op(ADDK, 4, 0, 0, 22),                        // 3: r4 += 14 + 8
        op(JGT, 4, 3, to_pass(4), 0),                 // 4: header beyond the end: pass
        op(MOV, 5, 3, 0, 0),                          // 5: r5 = data_end
        op(SUB, 5, 2, 0, 0),                          // 6: r5 = length
        op(JGTK, 5, 0, to_pass(7), MAX_FRAME as i32), // 7: longer than a chunk: pass
        op(LDXH, 4, 2, 12, 0),                        // 8: r4 = Ethernet type
        op(JNEK, 4, 0, to_pass(9), ethertype),        // 9: not Volley: pass
        op(LDXW, 4, 2, 18, 0),                        // 10: r4 = job key
        op(JNEK32, 4, 0, to_pass(11), job),           // 11: another job: pass
        op(LDXW, 2, 1, 16, 0),                        // 12: r2 = ctx->rx_queue_index
        op(LDDW, 1, 1, 0, map_fd),                    // 13: r1 = the map
        0,                                            // 14: (upper half of the map's address)
        op(MOVK, 3, 0, 0, XDP_PASS),                  // 15: no socket on the queue: pass
        op(CALL, 0, 0, 0, REDIRECT_MAP),              // 16
        op(EXIT, 0, 0, 0, 0),                         // 17
        op(MOVK, 0, 0, 0, XDP_PASS),                  // 18: pass
        op(EXIT, 0, 0, 0, 0),                         // 19
    ]
}

/// `bpf(2)` with an attribute block of 16 words (zero where not set): its result.
fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> Result<i64, std::io::Error> {
    // SAFETY: bpf(2) reads (and for some commands writes) the attribute block, which is
    // as large as the size passed; every pointer in it is live for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

/// [`bpf`] for a command that makes a descriptor.
fn bpf_fd(cmd: libc::c_long, attr: &mut [u64; 16]) -> Result<OwnedFd, std::io::Error> {
    let fd = bpf(cmd, attr)?;
    // SAFETY: a descriptor the call just made, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A shared or anonymous mapping, unmapped when dropped.
#[derive(Debug)]
struct Mapping {
    base: *mut u8,
    len: usize,
}

impl Mapping {
    /// `mmap(2)` of `len` bytes: of `fd` at `offset`, or anonymous when `fd` is `None`.
    fn new(
        len: usize,
        fd: Option<&OwnedFd>,
        offset: libc::off_t,
    ) -> Result<Mapping, std::io::Error> {
        let (flags, raw) = match fd {
            Some(fd) => (libc::MAP_SHARED, fd.as_raw_fd()),
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
        };
        // SAFETY: a fresh mapping the kernel places; nothing else refers to it yet.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_POPULATE,
                raw,
                offset,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping {
            base: base as *mut u8,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Mapping::new`, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Two 32-bit fields of a `bpf_attr`, the first at the lower address, as one word.
fn pair(lo: u32, hi: u32) -> u64 {
    lo as u64 | (hi as u64) << 32
}

/// One of the four rings, mapped: a producer index, a consumer index, flags and the
/// entries (`u64` chunk addresses, or 16-byte `xdp_desc`s).
#[derive(Debug)]
struct Ring {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut u8,
    mask: u32,
    /// Our own index (the producer's for fill and transmit, the consumer's for
    /// receive and completion), published with release ordering.
    head: u32,
}

impl Ring {
    fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        size: usize,
        entry: usize,
        pgoff: libc::off_t,
    ) -> Result<Ring, HostError> {
        let len = off.desc as usize + size * entry;
        let map = Mapping::new(len, Some(fd), pgoff).map_err(|e| xdp_error("mapping a ring", e))?;
        let base = map.base;
        // SAFETY: the kernel's offsets lie inside the mapping and are 4-byte aligned.
        let at = |o: u64| unsafe { base.add(o as usize) };
        Ok(Ring {
            producer: at(off.producer) as *const AtomicU32,
            consumer: at(off.consumer) as *const AtomicU32,
            flags: at(off.flags) as *const AtomicU32,
            entries: at(off.desc),
            _map: map,
            mask: size as u32 - 1,
            head: 0,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: inside the mapping, which lives as long as `self`; shared with the
        // kernel only through atomic accesses.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { &*self.consumer }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: as `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Entries the kernel has produced and we have not consumed (receive, completion).
    fn ready(&self) -> u32 {
        self.producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }

    /// Room for entries we produce (fill, transmit).
    fn room(&self) -> u32 {
        (self.mask + 1).wrapping_sub(
            self.head
                .wrapping_sub(self.consumer().load(Ordering::Acquire)),
        )
    }

    fn addr_at(&self, i: u32) -> *mut u64 {
        // SAFETY: `i & mask` is below the ring's size; entries are 8-byte aligned.
        unsafe { (self.entries as *mut u64).add((i & self.mask) as usize) }
    }

    fn desc_at(&self, i: u32) -> *mut libc::xdp_desc {
        // SAFETY: as `addr_at`, for 16-byte descriptors.
        unsafe { (self.entries as *mut libc::xdp_desc).add((i & self.mask) as usize) }
    }
}

/// A socket bound to one receive queue, its UMEM and rings, and the program.
#[derive(Debug)]
pub struct Xsk {
    // Dropped first: the rings and the socket, then the link (detaching the
    // program), then the program and the map; the UMEM last.
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    fd: OwnedFd,
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    umem: Mapping,
    /// Transmit chunks not in the kernel's hands.
    free: Vec<u64>,
    /// Descriptors put in the transmit ring since the last kick.
    tx_pending: u32,
    mode: Mode,
    stats: XskStats,
}

// SAFETY: the mappings belong to this socket and move with it; the kernel is the only
// other party, synchronised through the rings' indices.
unsafe impl Send for Xsk {}

/// What opening failed on: the first error, with the capability hint when it is one.
fn xdp_error(what: &str, e: std::io::Error) -> HostError {
    if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) {
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "PROGRAM".into());
        return HostError::Fabric(format!(
            "eth: AF_XDP needs CAP_NET_ADMIN and CAP_BPF ({what}: {e}): run as root, or `sudo setcap cap_net_raw,cap_net_admin,cap_bpf+ep {exe}`, or set VOLLEY_ETH_XDP=off"
        ));
    }
    HostError::Fabric(format!("eth: AF_XDP: {what}: {e}"))
}

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, v: &T) -> Result<(), std::io::Error> {
    // SAFETY: a valid socket and a value of the option's type and size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Xsk {
    /// The socket: readable while its receive ring holds a frame.
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Opens a socket on queue 0 of interface `ifindex`, loads and attaches the program
    /// for job key `key`.
    pub fn open(ifindex: i32, key: [u8; 4]) -> Result<Xsk, HostError> {
        if cfg!(target_endian = "big") {
            return Err(HostError::Fabric(
                "eth: AF_XDP: the XDP program is written for little-endian machines".into(),
            ));
        }
        // SAFETY: plain socket(2); the descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(xdp_error(
                "no AF_XDP sockets here",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: just opened, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let umem = Mapping::new((RX_CHUNKS + TX_CHUNKS) * CHUNK, None, 0)
            .map_err(|e| xdp_error("UMEM", e))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.base as u64,
            len: umem.len as u64,
            chunk_size: CHUNK as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg)
            .map_err(|e| xdp_error("registering the UMEM", e))?;
        for (opt, n) in [
            (libc::XDP_UMEM_FILL_RING, RX_CHUNKS),
            (libc::XDP_UMEM_COMPLETION_RING, TX_CHUNKS),
            (libc::XDP_RX_RING, RX_CHUNKS),
            (libc::XDP_TX_RING, TX_CHUNKS),
        ] {
            setsockopt(&fd, opt, &(n as u32)).map_err(|e| xdp_error("ring sizes", e))?;
        }
        // SAFETY: a zeroed xdp_mmap_offsets is valid; the kernel fills it.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut olen = std::mem::size_of_val(&off) as libc::socklen_t;
        // SAFETY: a valid socket and a buffer of `olen` bytes.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                &mut off as *mut libc::xdp_mmap_offsets as *mut libc::c_void,
                &mut olen,
            )
        };
        if r != 0 || olen as usize != std::mem::size_of_val(&off) {
            return Err(xdp_error("ring offsets", std::io::Error::last_os_error()));
        }
        let desc = std::mem::size_of::<libc::xdp_desc>();
        let rx = Ring::map(&fd, &off.rx, RX_CHUNKS, desc, XDP_PGOFF_RX_RING)?;
        let tx = Ring::map(&fd, &off.tx, TX_CHUNKS, desc, XDP_PGOFF_TX_RING)?;
        let mut fill = Ring::map(&fd, &off.fr, RX_CHUNKS, 8, XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::map(&fd, &off.cr, TX_CHUNKS, 8, XDP_UMEM_PGOFF_COMPLETION_RING)?;
        // Every receive chunk to the kernel before binding.
        for i in 0..RX_CHUNKS as u32 {
            // SAFETY: the fill ring has RX_CHUNKS entries, all ours before the bind.
            unsafe { fill.addr_at(i).write((i as usize * CHUNK) as u64) };
        }
        fill.head = RX_CHUNKS as u32;
        fill.producer().store(fill.head, Ordering::Release);
        let (link, prog, map, mode) = attach(&fd, ifindex, key)?;
        Ok(Xsk {
            rx,
            tx,
            fill,
            comp,
            fd,
            _link: link,
            _prog: prog,
            _map: map,
            umem,
            free: (0..TX_CHUNKS)
                .rev()
                .map(|i| ((RX_CHUNKS + i) * CHUNK) as u64)
                .collect(),
            tx_pending: 0,
            mode,
            stats: XskStats::default(),
        })
    }

    /// How the socket runs.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Counters.
    pub fn stats(&self) -> XskStats {
        self.stats
    }

    /// The next received frame (Ethernet header first), if one is waiting: its chunk
    /// address, where it lies and its length. The bytes are the caller's until it gives
    /// the chunk back with [`Xsk::release`].
    /// Whether the receive ring holds a frame not yet taken: one load of the
    /// kernel's producer index, no wake-up (`peek` asks a sleeping driver).
    pub fn rx_waiting(&self) -> bool {
        self.rx.ready() > 0
    }

    pub fn peek(&mut self) -> Option<(u64, *const u8, usize)> {
        loop {
            if self.rx.ready() == 0 {
                // A driver that sleeps until asked (zero copy) is asked.
                if self.mode == Mode::ZeroCopy && self.fill.needs_wakeup() {
                    self.wake_rx();
                }
                return None;
            }
            // SAFETY: an entry the kernel produced (acquire load in `ready`), ours
            // until the consumer index passes it.
            let d = unsafe { self.rx.desc_at(self.rx.head).read() };
            self.rx.head = self.rx.head.wrapping_add(1);
            self.rx.consumer().store(self.rx.head, Ordering::Release);
            let (addr, len) = (d.addr as usize, d.len as usize);
            // The kernel's descriptor is trusted no further than one receive chunk.
            let inside = addr.checked_add(len).is_some_and(|end| {
                end <= RX_CHUNKS * CHUNK && len > 0 && addr / CHUNK == (end - 1) / CHUNK
            });
            if inside {
                self.stats.rx += 1;
                // SAFETY: inside the UMEM (checked), which outlives the borrow the caller
                // keeps until `release`.
                return Some((d.addr, unsafe { self.umem.base.add(addr) }, len));
            }
            self.stats.rx_invalid += 1;
            self.release(d.addr);
        }
    }

    /// Gives a received frame's chunk back to the kernel.
    pub fn release(&mut self, addr: u64) {
        // One entry went out of the rx ring for each chunk; the fill ring, as large
        // as there are chunks, always has room for it.
        if self.fill.room() == 0 {
            return;
        }
        // SAFETY: a free entry of the fill ring (room checked).
        unsafe {
            self.fill
                .addr_at(self.fill.head)
                .write(addr & !(CHUNK as u64 - 1))
        };
        self.fill.head = self.fill.head.wrapping_add(1);
        self.fill
            .producer()
            .store(self.fill.head, Ordering::Release);
    }

    fn wake_rx(&mut self) {
        // SAFETY: a valid socket; a zero-length receive only wakes the driver.
        let _ = unsafe {
            crate::sys::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        self.stats.kicks += 1;
    }

    /// Takes back the chunks the kernel has sent.
    fn reclaim(&mut self) {
        let n = self.comp.ready();
        for _ in 0..n {
            // SAFETY: an entry the kernel produced (acquire load in `ready`).
            let a = unsafe { self.comp.addr_at(self.comp.head).read() };
            self.comp.head = self.comp.head.wrapping_add(1);
            let a = a & !(CHUNK as u64 - 1);
            let tx = (RX_CHUNKS * CHUNK) as u64..((RX_CHUNKS + TX_CHUNKS) * CHUNK) as u64;
            if tx.contains(&a) && self.free.len() < TX_CHUNKS {
                self.free.push(a);
            }
        }
        if n > 0 {
            self.comp
                .consumer()
                .store(self.comp.head, Ordering::Release);
        }
    }

    /// Whether a frame can be sent now.
    pub fn can_send(&mut self) -> bool {
        if self.free.is_empty() || self.tx.room() == 0 {
            self.reclaim();
            if self.free.is_empty() && self.tx_pending > 0 {
                self.kick();
                self.reclaim();
            }
        }
        !self.free.is_empty() && self.tx.room() > 0
    }

    /// Fills a free chunk with a frame of `len` bytes (`f` writes them) and queues it.
    /// Only after [`Xsk::can_send`] said yes; `len` at most [`MAX_FRAME`].
    pub fn send<R>(&mut self, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let len = len.min(MAX_FRAME);
        // `can_send` keeps one; should it not, the frame is written and dropped, as a
        // lost one (the engine sends it again).
        let Some(addr) = self.free.pop() else {
            return dropped(len, f);
        };
        // SAFETY: a transmit chunk that is ours (on the free list), inside the UMEM.
        let b = unsafe { std::slice::from_raw_parts_mut(self.umem.base.add(addr as usize), len) };
        let r = f(b);
        let d = libc::xdp_desc {
            addr,
            len: len as u32,
            options: 0,
        };
        // SAFETY: a free entry of the transmit ring (`can_send` checked the room).
        unsafe { self.tx.desc_at(self.tx.head).write(d) };
        self.tx.head = self.tx.head.wrapping_add(1);
        self.tx.producer().store(self.tx.head, Ordering::Release);
        self.tx_pending += 1;
        self.stats.tx += 1;
        r
    }

    /// Frames queued and not yet handed over.
    pub fn pending(&self) -> u32 {
        self.tx_pending
    }

    /// Hands the queued frames to the kernel (which sends them in the call when it
    /// copies them).
    pub fn kick(&mut self) {
        if self.tx_pending == 0 {
            return;
        }
        if self.mode == Mode::ZeroCopy && !self.tx.needs_wakeup() {
            self.tx_pending = 0;
            return;
        }
        let r = crate::sys::kick(self.fd.as_raw_fd());
        self.stats.kicks += 1;
        if let Err(e) = r {
            if !matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
            ) {
                self.stats.tx_errors += 1;
            }
        }
        // The kernel takes at most a batch a call: the rest goes at the next kick.
        self.tx_pending = self
            .tx
            .head
            .wrapping_sub(self.tx.consumer().load(Ordering::Acquire));
    }
}

/// Makes the map and the program, attaches it (driver hook first, then generic) and
/// binds `fd` to queue 0 (zero copy first, then copying); puts the socket in the map.
fn attach(
    fd: &OwnedFd,
    ifindex: i32,
    key: [u8; 4],
) -> Result<(OwnedFd, OwnedFd, OwnedFd, Mode), HostError> {
    let mut a = [0u64; 16];
    a[0] = pair(BPF_MAP_TYPE_XSKMAP, 4);
    a[1] = pair(4, 64);
    let map = bpf_fd(BPF_MAP_CREATE, &mut a).map_err(|e| xdp_error("XSKMAP", e))?;
    let insns = program(map.as_raw_fd(), key);
    let license = c"Dual MIT/Apache-2.0";
    let mut log = vec![0u8; 4096];
    let load = |log: &mut Vec<u8>, level: u32| {
        let mut a = [0u64; 16];
        a[0] = pair(BPF_PROG_TYPE_XDP, insns.len() as u32);
        a[1] = insns.as_ptr() as u64;
        a[2] = license.as_ptr() as u64;
        // A log buffer only with a log level: the kernel refuses one without.
        if level > 0 {
            a[3] = pair(level, log.len() as u32);
            a[4] = log.as_mut_ptr() as u64;
        }
        // prog_name "volley" at bytes 48..64, expected_attach_type at 68.
        a[6] = u64::from_le_bytes(*b"volley\0\0");
        a[8] = pair(0, BPF_XDP);
        bpf_fd(BPF_PROG_LOAD, &mut a)
    };
    let prog = match load(&mut log, 0) {
        Ok(p) => p,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) => {
            return Err(xdp_error("loading the XDP program", e));
        }
        Err(e) => {
            // Once more with the verifier's log, for the message.
            let _ = load(&mut log, 1);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            // The verifier's complaint is the line before its closing summary.
            let why = text
                .lines()
                .rfind(|l| !l.trim().is_empty() && !l.starts_with("processed "))
                .unwrap_or("");
            return Err(HostError::Fabric(format!(
                "eth: AF_XDP: the kernel refused the XDP program: {e} ({why})"
            )));
        }
    };
    let link = |flags: u32| {
        let mut a = [0u64; 16];
        a[0] = pair(prog.as_raw_fd() as u32, ifindex as u32);
        a[1] = pair(BPF_XDP, flags);
        bpf_fd(BPF_LINK_CREATE, &mut a)
    };
    let (link, generic) = match link(XDP_FLAGS_DRV_MODE) {
        Ok(l) => (l, false),
        Err(_) => match link(XDP_FLAGS_SKB_MODE) {
            Ok(l) => (l, true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EEXIST)) => {
                return Err(HostError::Fabric(format!(
                    "eth: AF_XDP: the interface already has an XDP program (another job on it, or `ip link set dev IF xdp off`): {e}"
                )))
            }
            Err(e) => return Err(xdp_error("attaching the XDP program", e)),
        },
    };
    let bind = |flags: u16| {
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex as u32,
            sxdp_queue_id: 0,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: a valid socket and a sockaddr_xdp with its true length.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let mode = if generic {
        bind(libc::XDP_COPY).map_err(|e| xdp_error("binding the socket", e))?;
        Mode::Generic
    } else if bind(libc::XDP_ZEROCOPY).is_ok() {
        Mode::ZeroCopy
    } else {
        bind(libc::XDP_COPY).map_err(|e| xdp_error("binding the socket", e))?;
        Mode::Driver
    };
    let k = 0u32;
    let v = fd.as_raw_fd() as u32;
    let mut a = [0u64; 16];
    a[0] = map.as_raw_fd() as u64;
    a[1] = &k as *const u32 as u64;
    a[2] = &v as *const u32 as u64;
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map_err(|e| xdp_error("XSKMAP entry", e))?;
    Ok((link, prog, map, mode))
}

/// A frame [`Xsk::send`] has no chunk for: written into scratch space and dropped
/// (as a lost one: the engine sends it again). Out of line, so that the scratch
/// space (a whole chunk) is not in the frame of every caller that sends: it was in
/// the engine's transmit path on every fabric, 4 KiB of stack and a probe a call.
#[cold]
#[inline(never)]
fn dropped<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut scratch = [0u8; MAX_FRAME];
    f(&mut scratch[..len.min(MAX_FRAME)])
}

#[cfg(test)]
mod tests {
    use super::*;

    const XDP_REDIRECT: u64 = 4;
    const PASS: u64 = 2;

    /// Runs `program` on `frame` arriving on receive queue `queue`, as the kernel would
    /// (the few instructions it uses), with a socket in the map at queue 0 only:
    /// `XDP_REDIRECT` or `XDP_PASS`.
    fn run(prog: &[u64], frame: &[u8], queue: u64) -> u64 {
        const DATA: u64 = 0x1000;
        let end = DATA + frame.len() as u64;
        let mut r = [0u64; 11];
        r[1] = 0xC7C7; // the context
        let mut pc = 0usize;
        let load = |addr: u64, n: usize| -> u64 {
            let at = (addr - DATA) as usize;
            assert!(
                addr >= DATA && at + n <= frame.len(),
                "load beyond the frame"
            );
            frame[at..at + n]
                .iter()
                .rev()
                .fold(0, |v, &b| v << 8 | b as u64)
        };
        loop {
            let i = prog[pc];
            let (code, dst, src) = (i as u8, (i >> 8) as usize & 15, (i >> 12) as usize & 15);
            let (off, imm) = ((i >> 16) as u16 as i16, (i >> 32) as u32 as i32);
            let jump = |c: bool| if c { off as isize + 1 } else { 1 };
            let step = match code {
                0x61 | 0x69 if r[src] == 0xC7C7 => {
                    r[dst] = match off {
                        0 => DATA,
                        4 => end,
                        16 => queue,
                        _ => panic!("context field {off}"),
                    };
                    1
                }
                0x61 => {
                    r[dst] = load(r[src].wrapping_add(off as u64), 4);
                    1
                }
                0x69 => {
                    r[dst] = load(r[src].wrapping_add(off as u64), 2);
                    1
                }
                0xbf => {
                    r[dst] = r[src];
                    1
                }
                0xb7 => {
                    r[dst] = imm as i64 as u64;
                    1
                }
                0x07 => {
                    r[dst] = r[dst].wrapping_add(imm as i64 as u64);
                    1
                }
                0x1f => {
                    r[dst] = r[dst].wrapping_sub(r[src]);
                    1
                }
                0x2d => jump(r[dst] > r[src]),
                0x25 => jump(r[dst] > imm as i64 as u64),
                0x55 => jump(r[dst] != imm as i64 as u64),
                0x56 => jump(r[dst] as u32 != imm as u32),
                0x18 => {
                    assert_eq!(src, 1, "a map's descriptor");
                    r[dst] = 0xAA;
                    2
                }
                0x85 => {
                    assert_eq!((imm, r[1]), (51, 0xAA), "bpf_redirect_map on the map");
                    r[0] = if r[2] == 0 { XDP_REDIRECT } else { r[3] & 3 };
                    1
                }
                0x95 => return r[0],
                _ => panic!("opcode {code:#x}"),
            };
            pc = (pc as isize + step) as usize;
        }
    }

    /// A frame of `len` bytes: Ethernet type `ty`, job key `key` in the Volley header.
    fn frame(len: usize, ty: u16, key: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[12..14].copy_from_slice(&ty.to_be_bytes());
        f[14] = 1;
        f[18..22].copy_from_slice(&key);
        f
    }

    #[test]
    fn the_program_takes_this_jobs_frames_that_fit_a_chunk_and_passes_the_rest() {
        // A key with its top bit set: compared as 32 bits, not sign-extended.
        for key in [[0x12, 0x34, 0x56, 0x78], [0xF0, 0x0D, 0xBE, 0xEF]] {
            let p = program(7, key);
            let ours = crate::eth::ETHERTYPE;
            assert_eq!(run(&p, &frame(60, ours, key), 0), XDP_REDIRECT);
            assert_eq!(run(&p, &frame(MAX_FRAME, ours, key), 0), XDP_REDIRECT);
            // No socket on queue 1: on to the kernel (and the packet ring).
            assert_eq!(run(&p, &frame(60, ours, key), 1), PASS);
            assert_eq!(run(&p, &frame(MAX_FRAME + 1, ours, key), 0), PASS);
            let mut other = key;
            other[3] ^= 1;
            assert_eq!(run(&p, &frame(60, ours, other), 0), PASS);
            assert_eq!(run(&p, &frame(60, 0x88B6, key), 0), PASS, "a hello");
            assert_eq!(run(&p, &frame(60, 0x0800, key), 0), PASS, "IPv4");
            // Too short to hold the key: never read beyond the end.
            let whole = frame(22, ours, key);
            for len in 0..22 {
                assert_eq!(run(&p, &whole[..len], 0), PASS, "{len} bytes");
            }
            assert_eq!(run(&p, &frame(22, ours, key), 0), XDP_REDIRECT);
        }
    }
}

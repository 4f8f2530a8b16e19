//! The `udp` fabric: one non-blocking UDP socket per rank, busy-polled.
//!
//! Peers' addresses: `VOLLEY_UDP_PEERS` (an explicit `ip:port` list), else the hosts
//! list with port `base + rank`, else `127.0.0.1:base + rank`. The base port is
//! `VOLLEY_PORT`, or derived from the job id so concurrent jobs do not collide.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, SocketAddrV4, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};
use volley_core::phy::{Capabilities, Device, RxToken, TxToken};
use volley_core::time::Instant;
use volley_core::NodeAddr;

use crate::bootstrap::Boot;
use crate::HostError;

mod device;
mod io;
pub use io::no_buffers_hint;
mod liveness;

pub use device::{UdpRx, UdpTx};
use io::*;
use liveness::*;

/// Largest frame when the path's MTU cannot be learnt: an Ethernet MTU's worth of
/// UDP payload, so no IP fragmentation across real networks.
pub const DEFAULT_MTU: usize = 1472;

/// The largest UDP payload IPv4 carries (65535 minus IP and UDP headers).
pub const MAX_DATAGRAM: usize = 65_507;

/// Socket buffer size asked for, each way: a window of 64 KiB frames from a few
/// peers at once.
pub const SOCKET_BUFFER: usize = 8 << 20;

/// Payload bytes from which a frame goes out with one `sendmsg` gathering header,
/// payload (where it lies in the program's memory) and tag: the kernel copies the
/// datagram anyway, so this spares the copy into the transmit buffer.
const GATHER_FROM: usize = 2048;

/// `<linux/udp.h>`: the `SOL_UDP` options for segmentation offload (`UDP_SEGMENT`,
/// Linux 4.18: one `sendmsg` carries many datagrams of one size) and receive
/// coalescing (`UDP_GRO`, Linux 5.0: one `recvmsg` returns consecutive datagrams of
/// one sender, with their size in a control message).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// The kernel's limit on segments in one send (`UDP_MAX_SEGMENTS` of older kernels).
const GSO_SEGMENTS: u16 = 64;
/// Datagrams read in a row (no empty read between them) that turn `UDP_GRO` on: a
/// bulk transfer is coming in. Small messages then read one datagram per `recvfrom`
/// without it: a socket with `UDP_GRO` on costs every read a `recvmsg` and its
/// control message (about 0.2 µs a read measured here, empty or not).
const GRO_AFTER: u32 = 32;
/// Empty reads in a row that turn `UDP_GRO` off again: the transfer has ended.
const GRO_IDLE: u32 = 256;

/// The largest datagram that reaches every peer without IP fragmentation: the
/// smallest route MTU to any of them (the kernel's `IP_MTU` of a socket connected
/// to it; loopback's is 64 KiB) less 28 bytes of IP and UDP header. `None` when a
/// route cannot be asked.
pub fn path_mtu(peers: &[SocketAddr]) -> Option<usize> {
    let mut best = MAX_DATAGRAM;
    // One route per host, not per rank.
    let mut hosts: Vec<std::net::IpAddr> = peers.iter().map(SocketAddr::ip).collect();
    hosts.sort();
    hosts.dedup();
    for ip in hosts {
        let p = SocketAddr::new(ip, 9);
        let s = UdpSocket::bind(("0.0.0.0", 0)).ok()?;
        // Connecting a UDP socket sends nothing: it picks the route.
        s.connect(p).ok()?;
        let mut mtu: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket, and an int with its length for the kernel to fill.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_MTU,
                &mut mtu as *mut libc::c_int as *mut libc::c_void,
                &mut len,
            )
        };
        if r != 0 || mtu < 576 {
            return None;
        }
        best = best.min(mtu as usize - 28);
    }
    Some(best)
}

/// Sets a socket buffer to `want` bytes, past `net.core.[rw]mem_max` where this
/// process may (`SO_*BUFFORCE`, CAP_NET_ADMIN); returns what the kernel granted, in
/// bytes of datagrams (the kernel reports twice that, for its bookkeeping).
fn size_buffer(fd: libc::c_int, force: libc::c_int, plain: libc::c_int, want: usize) -> usize {
    let v = want as libc::c_int;
    let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let p = &v as *const libc::c_int as *const libc::c_void;
    // SAFETY: a valid socket and an int option of the right size.
    if unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, force, p, size) } != 0 {
        // SAFETY: as above.
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, plain, p, size) };
    }
    let mut got: libc::c_int = 0;
    let mut len = size;
    // SAFETY: a valid socket, and an int with its length for the kernel to fill.
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            plain,
            &mut got as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    got.max(0) as usize / 2
}

/// The base port of a job: `VOLLEY_PORT`, or one derived from the job id; ranks use
/// `base..base + size`.
pub fn base_port(job: u64, size: u16) -> Result<u16, HostError> {
    let max = 65_536 - size as u64;
    match crate::settings::env_integer("VOLLEY_PORT", 1024, max)? {
        Some(p) => Ok(p as u16),
        None => Ok(20_000 + (job % 10_000) as u16),
    }
}

/// Every rank's address, in rank order.
pub fn peer_addrs(boot: &Boot) -> Result<Vec<SocketAddr>, HostError> {
    if let Ok(list) = std::env::var("VOLLEY_UDP_PEERS") {
        let addrs: Result<Vec<SocketAddr>, _> = list.split(',').map(|a| a.trim().parse()).collect();
        let addrs = addrs.map_err(|e| HostError::Setting(format!("VOLLEY_UDP_PEERS: {e}")))?;
        if addrs.len() != boot.size as usize {
            return Err(HostError::Setting(format!(
                "VOLLEY_UDP_PEERS has {} addresses for {} ranks",
                addrs.len(),
                boot.size
            )));
        }
        return Ok(addrs);
    }
    let base = base_port(boot.job, boot.size)?;
    (0..boot.size)
        .map(|i| {
            let host = boot
                .hosts
                .get(i as usize)
                .map_or("127.0.0.1", |h| crate::bootstrap::host_name(h));
            let port = base
                .checked_add(i)
                .ok_or_else(|| HostError::Fabric(format!("port {base} + rank {i} overflows")))?;
            (host, port)
                .to_socket_addrs()
                .map_err(|e| HostError::Fabric(format!("cannot resolve {host}: {e}")))?
                .find(SocketAddr::is_ipv4)
                .ok_or_else(|| HostError::Fabric(format!("{host} has no IPv4 address")))
        })
        .collect()
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams sent.
    pub tx: u64,
    /// Datagrams sent with `sendmsg` from where their payload lies (long ones).
    pub tx_gathered: u64,
    /// Sends that carried several datagrams (`UDP_SEGMENT`).
    pub tx_segmented: u64,
    /// Reads that returned several datagrams at once (`UDP_GRO`).
    pub rx_coalesced: u64,
    /// Times `UDP_GRO` was turned on (a bulk transfer) or off (small messages).
    pub gro_switches: u64,
    /// Datagrams longer than the receive buffer: dropped.
    pub rx_truncated: u64,
    /// Datagrams received.
    pub rx: u64,
    /// Sends that failed (buffer full, unreachable): the engine's retransmission covers them.
    pub tx_errors: u64,
    /// Of those, sends refused for want of buffers (`ENOBUFS`), counted whether
    /// the frame was dropped or offered again: see [`no_buffers_hint`].
    pub tx_no_buffers: u64,
    /// Datagrams from addresses that are no rank of this job: dropped unread.
    pub rx_foreign: u64,
    /// Reads from unlisted addresses passed on (`VOLLEY_UDP_ANY_SOURCE=1`).
    pub rx_unlisted: u64,
    /// Peers found gone: ICMP said their port was closed, and they stayed silent
    /// for `SUSPECT_FOR` after (they died).
    pub unreachable: u64,
    /// ICMP reports about start-up HELLOs, which make no peer suspect.
    pub hello_refusals: u64,
    /// Peers made suspect by ICMP "port unreachable" reports (forged ones included:
    /// a live peer clears itself by answering).
    pub suspected: u64,
}

/// What the socket was given: frame size and buffer sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpShape {
    /// Largest datagram sent.
    pub mtu: usize,
    /// Where `mtu` came from.
    pub mtu_from: &'static str,
    /// Receive buffer granted, bytes of datagrams.
    pub rcvbuf: usize,
    /// Send buffer granted.
    pub sndbuf: usize,
}

impl UdpShape {
    /// The receive window to advertise, in frames: what half the receive buffer
    /// holds, so that two peers sending at full window do not overflow it; 4 to 64.
    pub fn window(&self) -> u16 {
        (self.rcvbuf / 2 / self.mtu.max(1)).clamp(4, 64) as u16
    }

    /// One line on what the kernel granted, with a hint where it granted less than
    /// asked.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "udp: {}-byte datagrams ({}), socket buffers {} KiB receive / {} KiB send, window {} frames",
            self.mtu,
            self.mtu_from,
            self.rcvbuf >> 10,
            self.sndbuf >> 10,
            self.window()
        );
        if self.rcvbuf < SOCKET_BUFFER || self.sndbuf < SOCKET_BUFFER {
            s.push_str(&format!(
                "; the kernel capped the {} KiB asked for: raise net.core.rmem_max and net.core.wmem_max",
                SOCKET_BUFFER >> 10
            ));
        }
        s
    }
}

/// A rank's UDP socket.
#[derive(Debug)]
pub struct UdpDevice {
    /// The wake-up descriptor ([`crate::wakeup`]), made at the first call for it.
    wakeup: Option<crate::wakeup::Wakeup>,
    /// This run's frame key and what answers late HELLOs, once the start-up
    /// exchange is through ([`crate::node::start_session`]).
    pub(crate) session: Option<(
        volley_core::wire::AuthKey,
        volley_core::session::HelloConfig,
    )>,
    sock: UdpSocket,
    /// Each rank's address as the kernel takes it, converted once rather than per
    /// datagram.
    peer_addrs: Vec<socket2::SockAddr>,
    /// Tell the engine which rank a datagram came from (off behind relays, where
    /// every datagram to a rank comes from one relay address).
    strict_sources: bool,
    /// Accept datagrams from addresses no rank is listed at (`VOLLEY_UDP_ANY_SOURCE=1`:
    /// peers behind NAT, such as unikernel nodes on QEMU's user-mode network, whose
    /// datagrams come from a port that is not theirs). The engine still authenticates
    /// every frame and names its sender.
    any_source: bool,
    life: Liveness,
    rx: Vec<u8>,
    /// What `rx` holds: `rx_len` bytes from one sender (`rx_from`), read up to
    /// `rx_at`, in datagrams of `rx_seg` bytes (the last may be shorter).
    rx_len: usize,
    rx_at: usize,
    rx_seg: usize,
    rx_from: Option<Option<u16>>,
    batch: Batch,
    /// Frames to one peer go out together (`UDP_SEGMENT`); off after the kernel
    /// refuses it, or with `VOLLEY_UDP_GSO=0`.
    gso: bool,
    gro: Gro,
    shape: UdpShape,
    stats: UdpStats,
    /// Moved at every receive poll, for the beacon helper ([`crate::beacon`]).
    polled: std::sync::Arc<std::sync::atomic::AtomicU64>,
    beacon: Option<crate::beacon::Helper>,
}

/// Receive coalescing (`UDP_GRO`), on only while a bulk transfer comes in.
#[derive(Debug, Default)]
struct Gro {
    /// Allowed (`VOLLEY_UDP_GSO` not 0, and the kernel has it).
    allowed: bool,
    on: bool,
    /// Datagrams read in a row while off; empty reads in a row while on.
    run: u32,
}

/// Frames written for one peer and not yet handed to the kernel: all of `seg`
/// bytes but perhaps the last (what one segmented send can carry).
#[derive(Debug)]
struct Batch {
    buf: Vec<u8>,
    len: usize,
    seg: usize,
    count: u16,
    /// The rank the batch goes to.
    to: u16,
}

impl Batch {
    /// Whether a frame of `len` bytes to `to` can join the batch.
    fn fits(&self, to: u16, len: usize) -> bool {
        self.count > 0
            && self.count < GSO_SEGMENTS
            && to == self.to
            && len <= self.seg
            // Only the last segment may be short.
            && self.len == self.count as usize * self.seg
            && self.len + len <= MAX_DATAGRAM
    }
}

impl UdpDevice {
    /// Binds this rank's socket.
    pub fn open(boot: &Boot) -> Result<UdpDevice, HostError> {
        let peers = peer_addrs(boot)?;
        let any_source = crate::settings::env_integer("VOLLEY_UDP_ANY_SOURCE", 0, 1)? == Some(1);
        // VOLLEY_UDP_BIND: this rank's own address, or a list indexed by rank (for a
        // relay in between, whose addresses VOLLEY_UDP_PEERS then lists).
        let bind: SocketAddr = match std::env::var("VOLLEY_UDP_BIND") {
            Ok(list) => list
                .split(',')
                .nth(if list.contains(',') {
                    boot.rank as usize
                } else {
                    0
                })
                .ok_or_else(|| {
                    HostError::Setting(format!(
                        "VOLLEY_UDP_BIND has no address for rank {}",
                        boot.rank
                    ))
                })?
                .trim()
                .parse()
                .map_err(|e| HostError::Setting(format!("VOLLEY_UDP_BIND: {e}")))?,
            Err(_) => {
                let mut a = peers[boot.rank as usize];
                if boot.hosts.is_empty() {
                    a.set_ip([127, 0, 0, 1].into());
                } else {
                    a.set_ip([0, 0, 0, 0].into());
                }
                a
            }
        };
        let (mtu, mtu_from) =
            match crate::settings::env_integer("VOLLEY_UDP_MTU", 256, MAX_DATAGRAM as u64)? {
                Some(m) => (m as usize, "VOLLEY_UDP_MTU"),
                None => match path_mtu(&peers) {
                    Some(m) => (m, "path MTU"),
                    None => (DEFAULT_MTU, "default"),
                },
            };
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| HostError::Fabric(format!("udp socket: {e}")))?;
        // Deep buffers absorb a window of frames from a few peers at once.
        let fd = s.as_raw_fd();
        let rcvbuf = size_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUFFER);
        let sndbuf = size_buffer(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SOCKET_BUFFER);
        s.bind(&bind.into())
            .map_err(|e| HostError::Fabric(format!("cannot bind udp {bind}: {e}")))?;
        s.set_nonblocking(true)
            .map_err(|e| HostError::Fabric(format!("udp nonblocking: {e}")))?;
        let sock: UdpSocket = s.into();
        // ICMP errors (a peer's port closed: the process died) reach us in the
        // socket's error queue.
        crate::set_int(&sock, libc::IPPROTO_IP, libc::IP_RECVERR, 1);
        // Consecutive datagrams from one peer come up in one read where the kernel
        // can coalesce them (`receive` takes them apart), while a bulk transfer
        // comes in: see `GRO_AFTER`.
        let gso = crate::settings::env_integer("VOLLEY_UDP_GSO", 0, 1)? != Some(0);
        let ranks = peers
            .iter()
            .enumerate()
            .map(|(i, a)| (*a, i as u16))
            .collect();
        let n = peers.len();
        let peer_addrs = peers.iter().map(|&a| a.into()).collect();
        Ok(UdpDevice {
            wakeup: None,
            sock,
            peer_addrs,
            strict_sources: std::env::var_os("VOLLEY_UDP_PEERS").is_none(),
            any_source,
            life: Liveness {
                ranks,
                last: None,
                opened: std::time::Instant::now(),
                heard: vec![false; n],
                strikes: vec![0; n],
                suspect: vec![None; n],
                gone: vec![false; n],
            },
            rx: vec![0; 65_536],
            rx_len: 0,
            rx_at: 0,
            rx_seg: 0,
            rx_from: None,
            batch: Batch {
                buf: vec![0; MAX_DATAGRAM],
                len: 0,
                seg: 0,
                count: 0,
                to: 0,
            },
            gso,
            gro: Gro {
                allowed: gso,
                ..Gro::default()
            },
            shape: UdpShape {
                mtu,
                mtu_from,
                rcvbuf,
                sndbuf,
            },
            stats: UdpStats::default(),
            polled: Default::default(),
            beacon: None,
            session: None,
        })
    }

    /// Starts the beacon helper ([`crate::beacon`]): beacons to `ranks` (by
    /// rank), the `i`-th built by `build(i, count, buf)`, sent every `every` while
    /// the program does not poll. False if no thread could be made.
    pub fn start_beacon(
        &mut self,
        ranks: &[usize],
        build: crate::beacon::BuildFrame,
        every: std::time::Duration,
    ) -> bool {
        let sock = match self.sock.try_clone() {
            Ok(x) => x,
            Err(e) => {
                crate::beacon::without(&e.to_string());
                return false;
            }
        };
        let addrs: Vec<socket2::SockAddr> = ranks
            .iter()
            .filter_map(|&r| self.peer_addrs.get(r).cloned())
            .collect();
        let targets = addrs.len();
        let send = move |i: usize, f: &[u8]| {
            if let Some(a) = addrs.get(i) {
                let _ = socket2::SockRef::from(&sock).send_to(f, a);
            }
        };
        self.beacon = crate::beacon::send_frames(send, build, targets, &self.polled, every);
        self.beacon.is_some()
    }

    /// Beacon frames sent while the program computed.
    pub fn beacons_sent(&self) -> u64 {
        self.beacon.as_ref().map_or(0, |b| b.sent())
    }

    /// Whether the beacon helper runs.
    pub fn has_beacon(&self) -> bool {
        self.beacon.is_some()
    }

    /// Counters.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// Frame and buffer sizes.
    pub fn shape(&self) -> UdpShape {
        self.shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn liveness(opened: std::time::Instant) -> Liveness {
        Liveness {
            ranks: HashMap::new(),
            last: None,
            opened,
            heard: vec![false; 2],
            strikes: vec![0; 2],
            suspect: vec![None; 2],
            gone: vec![false; 2],
        }
    }

    /// A tagged frame of `len` payload bytes, all `fill`, numbered `i` (in `msg_id`).
    fn frame(i: u32, len: usize, fill: u8) -> Vec<u8> {
        use volley_core::wire::{Endpoints, Flags, Kind, Repr, HEADER_LEN, TAG_LEN};
        let r = Repr {
            kind: Kind::Data,
            flags: Flags::LAST,
            job_key: 1,
            ends: Endpoints::default(),
            seq: i,
            ack: None,
            msg_id: i,
            offset: 0,
            total_len: len as u32,
            payload_len: len as u16,
        };
        let mut f = vec![0; HEADER_LEN + len + TAG_LEN];
        let n = r
            .emit_frame(&mut f, &[&vec![fill; len]], false, Some(&[3; 16]))
            .unwrap();
        f.truncate(n);
        f
    }

    /// Every datagram waiting at `d` (the numbers of the frames, checked whole).
    fn drain(d: &mut UdpDevice, len: usize, fill: u8) -> Vec<u32> {
        use volley_core::wire::Packet;
        let mut got = Vec::new();
        let t0 = std::time::Instant::now();
        let mut empty = 0;
        while empty < 1000 && t0.elapsed() < std::time::Duration::from_secs(5) {
            let Some(tok) = d.receive(Instant::ZERO) else {
                empty += 1;
                continue;
            };
            empty = 0;
            tok.consume(|f| {
                let p = Packet::new_checked(f).unwrap();
                let i = u32::from_be_bytes(f[40..44].try_into().unwrap());
                assert!(f == &frame(i, len, fill)[..], "frame {i} not whole");
                assert_eq!(p.payload().len(), len);
                got.push(i);
            });
        }
        got
    }

    /// `UDP_GRO` stays off for one frame at a time, comes on in a bulk transfer
    /// (whose datagrams then come up coalesced), and goes off once reads find
    /// nothing; a coalesced read left from before it went off is taken apart by its
    /// frames' headers. Every frame arrives whole, once, in order.
    #[test]
    fn gro_is_on_only_while_a_bulk_transfer_comes_in() {
        let open = |rank, job| {
            UdpDevice::open(&Boot {
                rank,
                size: 2,
                job,
                source: crate::bootstrap::Source::Hosts,
                hosts: Vec::new(),
                secret: None,
                said: None,
            })
        };
        // A base port no other test holds.
        let (mut a, mut b) = (1..50)
            .map(|k| 7_000 + std::process::id() as u64 % 2_000 + k * 41)
            .find_map(|job| Some((open(0, job).ok()?, open(1, job).ok()?)))
            .expect("two free udp ports");
        let send = |a: &mut UdpDevice, ids: std::ops::Range<u32>, len, fill| {
            for i in ids {
                let f = frame(i, len, fill);
                a.transmit(Instant::ZERO, NodeAddr(1))
                    .unwrap()
                    .consume(f.len(), |b| b.copy_from_slice(&f));
            }
            a.flush(Instant::ZERO);
        };
        // One at a time: never on.
        for i in 0..100 {
            send(&mut a, i..i + 1, 8, 1);
            assert_eq!(drain(&mut b, 8, 1), [i]);
        }
        assert_eq!((b.gro.on, b.stats.gro_switches), (false, 0));
        if !b.gro.allowed {
            eprintln!("VOLLEY_UDP_GSO=0: no UDP_GRO to turn on");
            return;
        }
        // A burst: on after GRO_AFTER datagrams in a row.
        send(&mut a, 0..200, 1000, 2);
        assert_eq!(drain(&mut b, 1000, 2), (0..200).collect::<Vec<_>>());
        if !b.gro.allowed {
            eprintln!("this kernel has no UDP_GRO");
            return;
        }
        // On after GRO_AFTER datagrams in a row, and off again after GRO_IDLE empty
        // reads (`drain` ends after 1000).
        assert_eq!((b.gro.on, b.stats.gro_switches), (false, 2));
        // On, a burst sent segmented comes up coalesced.
        assert!(set_gro(&b.sock, true));
        (b.gro.on, b.gro.run) = (true, 0);
        let coalesced = b.stats.rx_coalesced;
        send(&mut a, 200..264, 1000, 3);
        // Turned off with the burst still queued: reads without the control
        // message, split by the frames' headers.
        assert!(set_gro(&b.sock, false));
        b.gro.on = false;
        assert_eq!(drain(&mut b, 1000, 3), (200..264).collect::<Vec<_>>());
        assert!(
            b.stats.rx_coalesced > coalesced,
            "a segmented send came up as one read ({:?})",
            b.stats
        );
    }

    #[test]
    fn a_frame_is_told_apart_from_what_follows_it_by_its_header() {
        let f = frame(5, 100, 9);
        assert_eq!(first_frame_len(&f), f.len());
        let two = [f.clone(), frame(6, 100, 9)].concat();
        assert_eq!(first_frame_len(&two), f.len());
        // Not a frame, or one longer than the read: taken whole.
        assert_eq!(first_frame_len(&[0u8; 30]), 30);
        let hello = [volley_core::session::HELLO_MAGIC; volley_core::session::HELLO_LEN];
        assert_eq!(first_frame_len(&hello), hello.len());
        assert_eq!(first_frame_len(&f[..f.len() - 1]), f.len() - 1);
        assert_eq!(first_frame_len(&[]), 0);
    }

    /// ICMP is not authenticated: two refusals with nothing heard between make a
    /// peer suspect, gone only if it stays silent for `SUSPECT_FOR`; a word from it
    /// clears it.
    #[test]
    fn a_heard_peer_refused_twice_is_gone_only_if_it_stays_silent() {
        let t0 = std::time::Instant::now();
        let mut stats = UdpStats::default();
        let mut l = liveness(t0);
        l.heard_from(1);
        assert!(!l.refused_by(1, t0));
        assert!(l.refused_by(1, t0));
        assert!(!l.gone_at(1, t0, &mut stats), "only suspect");
        // Already suspect: not counted twice.
        assert!(!l.refused_by(1, t0));
        // It speaks: no longer suspect, and two more reports start again.
        l.heard_from(1);
        assert!(!l.gone_at(1, t0 + SUSPECT_FOR * 2, &mut stats));
        assert!(!l.refused_by(1, t0));
        assert!(l.refused_by(1, t0));
        assert!(!l.gone_at(1, t0 + SUSPECT_FOR / 2, &mut stats));
        assert!(l.gone_at(1, t0 + SUSPECT_FOR, &mut stats));
        assert_eq!(stats.unreachable, 1);
        assert!(l.gone_at(1, t0 + SUSPECT_FOR * 2, &mut stats));
        assert_eq!(stats.unreachable, 1, "counted once");
    }

    /// Real reports from the kernel: datagrams to a closed loopback port come back
    /// as "port unreachable" in the error queue. Those about start-up HELLOs make
    /// no peer suspect, however many; two about other frames do. One read takes
    /// every report queued, more than the 64 it once stopped at.
    #[test]
    fn refused_hellos_make_no_peer_suspect_and_the_error_queue_is_read_to_its_end() {
        use volley_core::session::{HELLO_LEN, HELLO_MAGIC};
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        crate::set_int(&sock, libc::IPPROTO_IP, libc::IP_RECVERR, 1);
        // A port nobody holds: bound, then closed.
        let closed = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let t0 = std::time::Instant::now() - UNHEARD_GRACE * 2;
        let mut l = liveness(t0);
        l.ranks.insert(closed, 1);
        l.heard_from(1);
        let mut stats = UdpStats::default();
        let mut hello = [0u8; HELLO_LEN];
        hello[0] = HELLO_MAGIC;
        // Sent one at a time, each report waited for: the kernel sends at most
        // about one report a millisecond (`icmp_msgs_per_sec`).
        let reported = |sock: &UdpSocket, f: &[u8]| {
            // A send may report an earlier refusal instead of going: once more.
            let _ = again_after_report(|| sock.send_to(f, closed));
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        for _ in 0..300 {
            reported(&sock, &hello);
        }
        l.read_errors(&sock, &mut stats);
        assert!(
            stats.hello_refusals > 64,
            "{} reports read",
            stats.hello_refusals
        );
        // Nothing left behind.
        let mut buf = [0u8; 64];
        let mut control = [0u64; 64];
        let flags = libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT;
        let left = io::recv_msg(&sock, &mut buf, &mut control, flags, |_, _, _| {});
        assert_eq!(
            left.map_err(|e| e.kind()).err(),
            Some(std::io::ErrorKind::WouldBlock)
        );
        assert_eq!((l.strikes[1], stats.suspected), (0, 0));
        let frame = frame(1, 8, 7);
        // The kernel's budget of reports refilled.
        std::thread::sleep(std::time::Duration::from_millis(100));
        reported(&sock, &frame);
        reported(&sock, &frame);
        l.read_errors(&sock, &mut stats);
        assert_eq!(stats.suspected, 1, "{stats:?}");
    }

    #[test]
    fn an_unheard_peer_counts_only_after_the_grace() {
        let t0 = std::time::Instant::now();
        let mut l = liveness(t0);
        // Still starting, perhaps: any number of refusals within the grace.
        for _ in 0..10 {
            assert!(!l.refused_by(1, t0 + UNHEARD_GRACE / 2));
        }
        assert_eq!(l.strikes[1], 0);
        // Unbound long after we opened: it sent before we bound, then died.
        let late = t0 + UNHEARD_GRACE;
        assert!(!l.refused_by(1, late));
        assert!(l.refused_by(1, late));
        let mut stats = UdpStats::default();
        assert!(l.gone_at(1, late + SUSPECT_FOR, &mut stats));
    }
}

//! The `eth` fabric: raw Ethernet frames between processes, no IP, as GAMMA did.
//!
//! Volley frames travel as the payload of Ethernet frames of type [`ETHERTYPE`], byte
//! for byte as the unikernel's e1000 driver sends them, so a process and a unikernel
//! node on one LAN are peers. Each rank has an `AF_PACKET` socket bound to its
//! interface with memory-mapped `TPACKET_V2` rings: frames are read from the receive
//! ring and written into the transmit ring without a system call; one `send` hands a
//! batch of transmit slots to the kernel (at the engine's flush), past the queueing
//! discipline (`PACKET_QDISC_BYPASS`).
//!
//! Settings:
//! - `VOLLEY_ETH_IF`: the interface (or a comma list indexed by rank, for ranks that
//!   share a host, each with its own interface). Checked: it exists, is Ethernet, is
//!   up with a carrier, and its MTU carries a frame.
//! - Peers' MAC addresses, in this order: `VOLLEY_ETH_MACS` (a list in rank order);
//!   a hosts list whose every entry is `host=MAC`; else discovered at start-up by
//!   broadcast hellos of type [`HELLO_ETHERTYPE`], authenticated under a key derived
//!   from the job secret and bound to the sender's MAC. A rank not heard from within
//!   `VOLLEY_STARTUP_TIMEOUT` (30 s) is an error that names it.
//! - `VOLLEY_ETH_MTU`: frames smaller than the interface's MTU (a jumbo-frame LAN that
//!   also holds e1000 unikernel nodes, whose frames stop at 1500 bytes).
//! - `VOLLEY_ETH_XDP`: `off` (the default), `on` or `auto`: this job's frames through
//!   an `AF_XDP` socket ([`crate::xdp`]) beside the packet rings, which still take
//!   whatever the XDP program passes on. `on` fails with one line where the kernel,
//!   the driver or the process's capabilities do not allow it; `auto` then uses the
//!   packet rings alone. Frames that fit a UMEM chunk ([`crate::xdp::MAX_FRAME`]) go
//!   through the socket, longer ones through the packet ring.
//!
//! Opening a packet socket takes `CAP_NET_RAW`: without it, one line says how to grant it.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use volley_core::phy::{Capabilities, Device, RxToken, TxToken};
use volley_core::time::{Duration, Instant};
use volley_core::NodeAddr;

use crate::bootstrap::Boot;
use crate::xdp::Xsk;
use crate::{set_int, HostError};

mod device;
mod discover;
mod interface;
mod rings;

pub use device::{EthRx, EthTx};
use discover::*;
pub use discover::{Hello, HELLO_LEN};
use interface::*;
pub use interface::{check_interface, given_macs, interface_name, mac_text, parse_mac, Interface};
use rings::*;

/// Ethernet type of Volley frames (IEEE 802 "local experimental" 1), as the e1000
/// driver's.
pub const ETHERTYPE: u16 = 0x88B5;
/// Ethernet type of the start-up hellos that discover peers' MAC addresses ("local
/// experimental" 2): kept off the data ring and out of the engines' way.
pub const HELLO_ETHERTYPE: u16 = 0x88B6;
/// Ethernet header: destination, source, type.
pub const ETH_HEADER: usize = 14;
/// Shortest Ethernet frame without its CRC: shorter ones are padded with zeros.
const ETH_MIN: usize = 60;
/// Smallest MTU the engine works with.
const MIN_MTU: usize = 256;
/// Bytes of receive ring and transmit ring.
const RX_RING_BYTES: usize = 8 << 20;
const TX_RING_BYTES: usize = 2 << 20;
/// Ring block size: a multiple of the page size that holds whole frames (one frame
/// when frames are larger: jumbo MTUs).
const BLOCK: usize = 64 << 10;
/// Fewest slots in each ring, whatever the frame size.
const MIN_SLOTS: usize = 32;
/// Transmit slots filled before the kernel is told even without a flush.
const TX_BATCH: usize = 32;
/// Payload bytes from which a frame goes out with one `sendmsg` straight from the
/// program's memory instead of through the transmit ring: the kernel copies it
/// either way, so this spares the copy into the ring, while one system call a frame
/// costs less than that copy from about this size on.
const GATHER_FROM: usize = 8192;
/// How often a running rank looks for hellos to answer (late ranks still asking).
const HELLO_CHECK: Duration = Duration::from_millis(1);
/// How often a rank that still misses peers broadcasts its hello.
const HELLO_EVERY: StdDuration = StdDuration::from_millis(20);
/// Offset of frame data in a transmit slot: `TPACKET_ALIGN(sizeof(tpacket2_hdr))`
/// (packet(7): the kernel reads from `tp_hdrlen - sizeof(sockaddr_ll)`).
const TX_DATA: usize = 32;
/// Offset of the `sockaddr_ll` in a receive slot, and of its `sll_pkttype`.
const RX_LL: usize = 32;
const LL_PKTTYPE: usize = 10;

/// Whether to use `AF_XDP` (`VOLLEY_ETH_XDP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpSetting {
    /// Packet rings only.
    Off,
    /// `AF_XDP`, or an error.
    On,
    /// `AF_XDP` where it works, else packet rings only.
    Auto,
}

/// Reads `VOLLEY_ETH_XDP`.
pub fn xdp_setting() -> Result<XdpSetting, HostError> {
    match std::env::var("VOLLEY_ETH_XDP") {
        Err(_) => Ok(XdpSetting::Off),
        Ok(v) => match v.trim() {
            "off" | "0" | "" => Ok(XdpSetting::Off),
            "on" | "1" => Ok(XdpSetting::On),
            "auto" => Ok(XdpSetting::Auto),
            _ => Err(HostError::Setting(format!(
                "VOLLEY_ETH_XDP={v:?}: expected off, on or auto"
            ))),
        },
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EthStats {
    /// Frames sent.
    pub tx: u64,
    /// `send` calls that handed a batch of frames to the kernel.
    pub tx_kicks: u64,
    /// Frames sent with `sendmsg` from where their payload lies (long ones).
    pub tx_gathered: u64,
    /// Frames the kernel refused (`TP_STATUS_WRONG_FORMAT`) or kicks that failed.
    pub tx_errors: u64,
    /// Frames received and handed to the engine.
    pub rx: u64,
    /// Frames from MAC addresses that are no rank of this job, or addressed to
    /// another station: dropped unread.
    pub rx_foreign: u64,
    /// Times the kernel found the receive ring full and dropped frames.
    pub rx_ring_full: u64,
    /// Hellos answered after start-up.
    pub hellos_answered: u64,
    /// Hellos dropped: bad tag, another job, malformed.
    pub hellos_rejected: u64,
}

// SAFETY: the mapping belongs to the device that owns these rings and moves with it;
// the kernel is the only other party, synchronised through the status words.
unsafe impl Send for Rings {}

/// A rank's packet socket and rings.
#[derive(Debug)]
pub struct EthDevice {
    /// The wake-up descriptor ([`crate::wakeup`]), made at the first call for it.
    wakeup: Option<crate::wakeup::Wakeup>,
    /// This run's frame key and what answers late HELLOs, once the start-up
    /// exchange is through ([`crate::node::start_session`]).
    pub(crate) session: Option<(
        volley_core::wire::AuthKey,
        volley_core::session::HelloConfig,
    )>,
    // Dropped in this order: the mapping, then the socket.
    rings: Rings,
    fd: OwnedFd,
    /// A socket that receives nothing, for frames sent as parts: with a transmit
    /// ring, `sendmsg` on `fd` would send the ring instead.
    gather: OwnedFd,
    iface: Interface,
    mtu: usize,
    macs: Vec<[u8; 6]>,
    ranks: HashMap<[u8; 6], u16>,
    rx_next: usize,
    tx_next: usize,
    tx_pending: usize,
    hellos: Option<Hellos>,
    hello_at: Instant,
    stats: EthStats,
    /// The `AF_XDP` socket, when in use: it sends the frames that fit a chunk and
    /// receives this job's frames the XDP program hands it.
    xsk: Option<Box<Xsk>>,
    /// Why `VOLLEY_ETH_XDP=auto` went without it.
    xdp_refused: Option<String>,
    /// Moved at every receive poll, for the beacon helper ([`crate::beacon`]).
    polled: std::sync::Arc<std::sync::atomic::AtomicU64>,
    beacon: Option<crate::beacon::Helper>,
}

impl EthDevice {
    /// Opens this rank's socket on `VOLLEY_ETH_IF` and learns the peers' MAC
    /// addresses (given, or by hellos under a key derived from the job secret).
    pub fn open(boot: &Boot, secret: &crate::secret::Secret) -> Result<EthDevice, HostError> {
        EthDevice::open_with(boot, secret, xdp_setting()?)
    }

    /// As [`EthDevice::open`], with `AF_XDP` as `xdp` says whatever `VOLLEY_ETH_XDP`
    /// says (the benchmark's references measure both paths).
    pub fn open_with(
        boot: &Boot,
        secret: &crate::secret::Secret,
        xdp: XdpSetting,
    ) -> Result<EthDevice, HostError> {
        EthDevice::open_on(boot, secret, xdp, &interface_name(boot.rank)?)
    }

    /// As [`EthDevice::open_with`], on interface `name`.
    fn open_on(
        boot: &Boot,
        secret: &crate::secret::Secret,
        xdp: XdpSetting,
        name: &str,
    ) -> Result<EthDevice, HostError> {
        let job_key = secret.job_key(boot.job);
        let hello_key = volley_core::wire::derive_key(&secret.0, b"volley eth hello", boot.job);
        let fd = packet_socket(0)?;
        let iface = check_interface(&fd, name)?;
        drop(fd);
        let given = given_macs(boot)?;
        let mtu =
            match crate::settings::env_integer("VOLLEY_ETH_MTU", MIN_MTU as u64, iface.mtu as u64)?
            {
                Some(m) => m as usize,
                None => iface.mtu,
            };
        let fd = packet_socket(ETHERTYPE)?;
        let v2 = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        if !set_int(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, v2) {
            return Err(HostError::Fabric(format!(
                "eth: TPACKET_V2 rings are not available: {}",
                std::io::Error::last_os_error()
            )));
        }
        // Straight to the driver, past the queueing discipline (kernels from 3.14).
        set_int(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1);
        // A slot holds the header, the link-level address, alignment and the frame.
        let frame = (TX_DATA + 64 + ETH_HEADER + mtu)
            .next_power_of_two()
            .max(2048);
        let rx_frames = setup_ring(&fd, libc::PACKET_RX_RING, frame, RX_RING_BYTES)?;
        let tx_frames = setup_ring(&fd, libc::PACKET_TX_RING, frame, TX_RING_BYTES)?;
        let len = (rx_frames + tx_frames) * frame;
        // SAFETY: mapping the rings just set up on this socket, shared with the kernel.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(HostError::Fabric(format!(
                "eth: cannot map the packet rings: {}",
                std::io::Error::last_os_error()
            )));
        }
        let rings = Rings {
            base: base as *mut u8,
            len,
            frame,
            rx_frames,
            tx_frames,
        };
        // Bound after the rings exist, so that no frame is queued outside them.
        bind(&fd, &iface, ETHERTYPE)?;
        // Protocol 0: sends only (packet(7)).
        let gather = packet_socket(0)?;
        set_int(&gather, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1);
        bind(&gather, &iface, 0)?;
        let me = Hello {
            ask: true,
            rank: boot.rank,
            size: boot.size,
            job_key,
            mac: iface.mac,
        };
        let (macs, hellos) = match given {
            Some(macs) => {
                if macs[boot.rank as usize] != iface.mac {
                    return Err(HostError::Fabric(format!(
                        "eth: rank {} is listed at MAC {} but {} is {}",
                        boot.rank,
                        mac_text(&macs[boot.rank as usize]),
                        iface.name,
                        mac_text(&iface.mac)
                    )));
                }
                (macs, None)
            }
            None => {
                let hfd = packet_socket(HELLO_ETHERTYPE)?;
                bind(&hfd, &iface, HELLO_ETHERTYPE)?;
                let mut h = Hellos {
                    fd: hfd,
                    key: hello_key,
                    me,
                    buf: vec![0; 2048],
                };
                let timeout =
                    crate::settings::env_seconds("VOLLEY_STARTUP_TIMEOUT", 0.001, 86_400.0)?
                        .unwrap_or(StdDuration::from_secs(30));
                (discover(&iface, &mut h, timeout)?, Some(h))
            }
        };
        let ranks = macs
            .iter()
            .enumerate()
            .map(|(i, m)| (*m, i as u16))
            .collect();
        // After discovery: the program takes this job's frames from the packet socket.
        let (xsk, xdp_refused) = match xdp {
            XdpSetting::Off => (None, None),
            XdpSetting::On => (
                Some(Box::new(Xsk::open(iface.index, job_key.to_be_bytes())?)),
                None,
            ),
            XdpSetting::Auto => match Xsk::open(iface.index, job_key.to_be_bytes()) {
                Ok(x) => (Some(Box::new(x)), None),
                Err(e) => {
                    eprintln!("volley: VOLLEY_ETH_XDP=auto: packet rings only ({})", e);
                    (None, Some(e.to_string()))
                }
            },
        };
        Ok(EthDevice {
            wakeup: None,
            rings,
            fd,
            gather,
            iface,
            mtu,
            macs,
            ranks,
            rx_next: 0,
            tx_next: 0,
            tx_pending: 0,
            hellos,
            hello_at: Instant::from_nanos(0),
            stats: EthStats::default(),
            xsk,
            xdp_refused,
            polled: Default::default(),
            beacon: None,
            session: None,
        })
    }

    /// Starts the beacon helper ([`crate::beacon`]): beacons to `ranks` (by
    /// rank), the Volley frame of the `i`-th built by `build(i, count, buf)` and
    /// sent in an Ethernet frame to its MAC, every `every` while the program does
    /// not poll. False if no thread could be made.
    pub fn start_beacon(
        &mut self,
        ranks: &[usize],
        build: crate::beacon::BuildFrame,
        every: std::time::Duration,
    ) -> bool {
        let fd = match self.gather.try_clone() {
            Ok(x) => x,
            Err(e) => {
                crate::beacon::without(&e.to_string());
                return false;
            }
        };
        let macs: Vec<[u8; 6]> = ranks
            .iter()
            .filter_map(|&r| self.macs.get(r).copied())
            .collect();
        let (targets, me) = (macs.len(), self.iface.mac);
        let mut e = Vec::new();
        let send = move |i: usize, f: &[u8]| {
            let Some(to) = macs.get(i) else { return };
            e.clear();
            e.extend_from_slice(to);
            e.extend_from_slice(&me);
            e.extend_from_slice(&ETHERTYPE.to_be_bytes());
            e.extend_from_slice(f);
            e.resize(e.len().max(ETH_MIN), 0);
            // SAFETY: a valid packet socket bound to the interface; `e` is a live
            // Ethernet frame the kernel only reads during the call.
            let _ = unsafe {
                libc::send(
                    fd.as_raw_fd(),
                    e.as_ptr() as *const libc::c_void,
                    e.len(),
                    libc::MSG_DONTWAIT,
                )
            };
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
    pub fn stats(&self) -> EthStats {
        self.stats
    }

    /// The interface.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Every rank's MAC address.
    pub fn macs(&self) -> &[[u8; 6]] {
        &self.macs
    }

    /// How the `AF_XDP` socket runs and its counters, when there is one.
    pub fn xdp(&self) -> Option<(crate::xdp::Mode, crate::xdp::XskStats)> {
        self.xsk.as_ref().map(|x| (x.mode(), x.stats()))
    }

    /// One line on the path frames take, for programs to print.
    pub fn path(&self) -> String {
        match (&self.xsk, &self.xdp_refused) {
            (Some(x), _) => format!(
                "{} on {} ({} frames in, {} out by AF_XDP; {} in, {} out by the packet ring)",
                x.mode().text(),
                self.iface.name,
                x.stats().rx,
                x.stats().tx,
                self.stats.rx - x.stats().rx,
                self.stats.tx - x.stats().tx
            ),
            (None, Some(why)) => format!("packet rings on {} (no AF_XDP: {why})", self.iface.name),
            (None, None) => format!("packet rings on {}", self.iface.name),
        }
    }

    /// Slots in the receive ring.
    pub fn rx_frames(&self) -> usize {
        self.rings.rx_frames
    }

    /// The receive window to advertise, in frames: half the receive ring, 4 to 64.
    pub fn window(&self) -> u16 {
        (self.rings.rx_frames / 2).clamp(4, 64) as u16
    }

    /// Hands the frames queued on either path to the kernel. At most one path has
    /// frames queued (each consume kicks the other first), so their order holds.
    fn kick(&mut self) {
        if let Some(x) = self.xsk.as_mut() {
            x.kick();
        }
        self.kick_ring();
    }

    /// Hands the filled transmit slots of the packet ring to the kernel.
    fn kick_ring(&mut self) {
        if self.tx_pending == 0 {
            return;
        }
        if let Err(e) = crate::sys::kick(self.fd.as_raw_fd()) {
            // ENOBUFS/EAGAIN: the frames stay queued and go with the next kick.
            if !matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                self.stats.tx_errors += 1;
            }
            return;
        }
        self.stats.tx_kicks += 1;
        self.tx_pending = 0;
    }

    /// Answers hellos of ranks still starting (their asks arrive after this rank has
    /// finished its own discovery).
    fn answer_hellos(&mut self) {
        let Some(h) = self.hellos.as_mut() else {
            return;
        };
        for _ in 0..16 {
            match h.next() {
                None => break,
                Some(Err(())) => self.stats.hellos_rejected += 1,
                Some(Ok(hello)) => {
                    if hello.ask && self.macs.get(hello.rank as usize) == Some(&hello.mac) {
                        h.send(&self.iface, hello.mac, false);
                        self.stats.hellos_answered += 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_print() {
        let m = parse_mac("02:00:5e:10:ab:FF").unwrap();
        assert_eq!(m, [2, 0, 0x5e, 0x10, 0xab, 0xff]);
        assert_eq!(mac_text(&m), "02:00:5e:10:ab:ff");
        assert_eq!(parse_mac("02-00-5e-10-ab-ff"), Some(m));
        for bad in [
            "",
            "02:00:5e:10:ab",
            "02:00:5e:10:ab:ff:00",
            "2:00:5e:10:ab:ff",
            "zz:00:5e:10:ab:ff",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }

    #[test]
    fn hellos_round_trip_and_forgeries_are_refused() {
        let key = [7u8; 16];
        let h = Hello {
            ask: true,
            rank: 3,
            size: 4,
            job_key: 0xDEAD_BEEF,
            mac: [2, 0, 0, 0, 0, 3],
        };
        let b = h.emit(&key);
        assert_eq!(Hello::parse(&b, &key), Some(h));
        assert_eq!(Hello::parse(&b, &[8u8; 16]), None, "another job's key");
        for i in 0..HELLO_LEN {
            let mut m = b;
            m[i] ^= 1;
            assert_eq!(Hello::parse(&m, &key), None, "byte {i} flipped");
        }
        assert_eq!(Hello::parse(&b[..HELLO_LEN - 1], &key), None);
        // Garbage of every length never panics.
        for n in 0..64 {
            assert_eq!(Hello::parse(&vec![0xA5; n], &key), None);
        }
    }

    /// The look a waiting call takes between polls (`rx_pending`) sees a frame in the
    /// packet ring before `receive` takes it, and none once it is taken. Root only (a
    /// veth pair is made and removed; CI runs as root); elsewhere it says so and passes.
    #[test]
    fn a_look_at_the_ring_sees_a_frame_before_it_is_received() {
        use std::process::Command;
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            eprintln!("not root: no veth pair can be made here (CI runs as root)");
            return;
        }
        struct Veth(String);
        impl Drop for Veth {
            fn drop(&mut self) {
                let _ = Command::new("ip").args(["link", "del", &self.0]).output();
            }
        }
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("ip runs");
            assert!(o.status.success(), "ip {args:?}: {o:?}");
        };
        let id = std::process::id();
        let (a, b) = (format!("vlyl{id}a"), format!("vlyl{id}b"));
        let macs = ["02:00:00:00:00:01", "02:00:00:00:00:02"];
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        let _pair = Veth(a.clone());
        for (end, mac) in [(&a, macs[0]), (&b, macs[1])] {
            ip(&["link", "set", end, "address", mac]);
            ip(&["link", "set", end, "up"]);
        }
        let boot = |rank| Boot {
            rank,
            size: 2,
            job: 1,
            source: crate::bootstrap::Source::Hosts,
            hosts: vec![format!("a={}", macs[0]), format!("b={}", macs[1])],
            secret: None,
            said: None,
        };
        let secret = crate::secret::Secret([9; 16]);
        // Carrier comes up a moment after both ends are up.
        let open = |rank, name: &str| {
            let t0 = std::time::Instant::now();
            loop {
                match EthDevice::open_on(&boot(rank), &secret, XdpSetting::Off, name) {
                    Ok(d) => return d,
                    Err(e) if t0.elapsed() > StdDuration::from_secs(5) => panic!("{}", e),
                    Err(_) => std::thread::sleep(StdDuration::from_millis(10)),
                }
            }
        };
        let (mut tx, mut rx) = (open(0, &a), open(1, &b));
        let now = Instant::ZERO;
        assert!(!rx.rx_pending(), "an empty ring looks empty");
        let tok = tx.transmit(now, NodeAddr(1)).expect("room to send");
        tok.consume(64, |f| f.fill(0x5a));
        tx.flush(now);
        let t0 = std::time::Instant::now();
        while !rx.rx_pending() {
            assert!(
                t0.elapsed() < StdDuration::from_secs(5),
                "the frame sent never showed in the look"
            );
        }
        // Only looked at: still there for `receive`.
        assert!(rx.rx_pending());
        let tok = rx.receive(now).expect("the frame the look saw");
        assert_eq!(tok.source(), Some(NodeAddr(0)));
        tok.consume(|f| assert!(f.len() >= 64 && f[..64].iter().all(|&x| x == 0x5a)));
        assert!(!rx.rx_pending(), "a taken frame is not seen again");
        assert!(rx.receive(now).is_none());
    }

    #[test]
    fn given_macs_are_checked() {
        let boot = |hosts: &[&str]| Boot {
            rank: 0,
            size: 2,
            job: 1,
            source: crate::bootstrap::Source::Hosts,
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            secret: None,
            said: None,
        };
        assert_eq!(given_macs(&boot(&["a", "b"])).unwrap(), None);
        let m = given_macs(&boot(&["a=02:00:00:00:00:01", "b=02:00:00:00:00:02"]))
            .unwrap()
            .unwrap();
        assert_eq!(m[1], [2, 0, 0, 0, 0, 2]);
        let e = given_macs(&boot(&["a=02:00:00:00:00:01", "b"])).unwrap_err();
        assert!(e.to_string().contains("1 of 2 ranks"), "{e}");
        let e = given_macs(&boot(&["a=02:00:00:00:00:01", "b=02:00:00:00:00:01"])).unwrap_err();
        assert!(e.to_string().contains("ranks 0 and 1 both have MAC"), "{e}");
        let e = given_macs(&boot(&["a=02:00:00:00:00:01", "b=nonsense"])).unwrap_err();
        assert!(
            e.to_string().contains("\"nonsense\" is not a MAC address"),
            "{e}"
        );
    }
}

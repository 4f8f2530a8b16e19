//! The `udp` fabric: Volley frames as UDP/IPv4 datagrams, one frame a datagram, the
//! same datagrams as the hosted `udp` fabric sends, so unikernel nodes and Linux
//! processes are ranks of one job. ARP, IPv4 and UDP are smoltcp's, over either
//! Ethernet card seen as a plain interface ([`EthernetNic`]); the address is static.
//!
//! Datagrams are accepted from any port of the peers' hosts: behind QEMU's user-mode
//! network (NAT) a peer's datagrams come from a port that is not its own. Every frame
//! is authenticated under the job key by the engine, which names the sender.

use alloc::vec;
use alloc::vec::Vec;

use smoltcp::iface::{Config as IfConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::socket::udp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint, Ipv4Address};
use volley_core::phy::{Capabilities, Device, RxToken, TxToken};
use volley_core::time::Instant;
use volley_core::NodeAddr;
use volley_hal::{ether, EthernetNic};

/// Largest datagram: an Ethernet MTU less the IPv4 and UDP headers (no fragments). Hosted
/// ranks in a job with unikernel nodes use the same (`VOLLEY_UDP_MTU=1472`).
pub const MTU: usize = ether::MTU - 28;
/// Datagrams each way the socket holds.
const QUEUE: usize = 64;

/// The addresses of a `udp` node, from the kernel command line.
#[derive(Debug, Clone)]
pub struct UdpArgs {
    /// This node's address and prefix length.
    pub ip: Ipv4Address,
    /// Prefix length of the node's subnet.
    pub prefix: u8,
    /// The default gateway, if any.
    pub gateway: Option<Ipv4Address>,
    /// Every rank's address and port, in rank order (ours included: our port).
    pub peers: Vec<(Ipv4Address, u16)>,
}

/// Parses `a.b.c.d`.
pub fn parse_ipv4(s: &str) -> Option<Ipv4Address> {
    let mut o = [0u8; 4];
    let mut parts = s.split('.');
    for b in o.iter_mut() {
        *b = parts.next()?.parse().ok()?;
    }
    parts
        .next()
        .is_none()
        .then(|| Ipv4Address::new(o[0], o[1], o[2], o[3]))
}

/// Parses `a.b.c.d:port`.
pub fn parse_endpoint(s: &str) -> Option<(Ipv4Address, u16)> {
    let (ip, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    (port != 0).then_some((parse_ipv4(ip)?, port))
}

/// An Ethernet card as smoltcp's device. A received frame is copied out of the ring:
/// the token pair smoltcp asks for would otherwise borrow the card twice.
struct SmolNic<N> {
    nic: N,
    rx: [u8; ether::MAX_FRAME],
    tx_dropped: u64,
}

struct SmolRx<'a>(&'a [u8]);

struct SmolTx<'a, N> {
    nic: &'a mut N,
    dropped: &'a mut u64,
}

impl<N: EthernetNic> phy::Device for SmolNic<N> {
    type RxToken<'a>
        = SmolRx<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = SmolTx<'a, N>
    where
        Self: 'a;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(SmolRx<'_>, SmolTx<'_, N>)> {
        // A reply (ARP) may follow at once: take a frame only when one can go out.
        if !self.nic.can_send() {
            return None;
        }
        let rx = &mut self.rx;
        let len = self.nic.recv_frame(|f| {
            rx[..f.len()].copy_from_slice(f);
            f.len()
        })?;
        Some((
            SmolRx(&self.rx[..len]),
            SmolTx {
                nic: &mut self.nic,
                dropped: &mut self.tx_dropped,
            },
        ))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<SmolTx<'_, N>> {
        self.nic.can_send().then_some(SmolTx {
            nic: &mut self.nic,
            dropped: &mut self.tx_dropped,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        // For an Ethernet medium smoltcp counts the Ethernet header in.
        c.max_transmission_unit = ether::MAX_FRAME;
        c
    }
}

impl phy::RxToken for SmolRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }
}

impl<N: EthernetNic> phy::TxToken for SmolTx<'_, N> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        // The descriptor was free when the token was made and nothing sent since; if
        // the card still refuses, the frame is dropped (and counted), never a panic:
        // the protocol above resends.
        let mut f = Some(f);
        if let Some(r) = self
            .nic
            .send_frame(len, |b| (f.take().expect("called once"))(b))
        {
            return r;
        }
        *self.dropped += 1;
        let mut scratch = [0u8; ether::MAX_FRAME];
        (f.take().expect("not called yet"))(&mut scratch[..len.min(ether::MAX_FRAME)])
    }
}

/// Counters of the UDP fabric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams handed to the engine.
    pub rx: u64,
    /// Datagrams queued for sending.
    pub tx: u64,
    /// Datagrams from a host that is no peer's: dropped unread.
    pub rx_foreign: u64,
    /// Datagrams the socket had no room for (the engine resends).
    pub tx_full: u64,
    /// Frames the card had no descriptor for.
    pub tx_dropped: u64,
}

/// Volley's device over UDP/IPv4 through smoltcp.
pub struct UdpFabric<N: EthernetNic> {
    iface: Interface,
    dev: SmolNic<N>,
    sockets: SocketSet<'static>,
    udp: SocketHandle,
    peers: Vec<IpEndpoint>,
    stats: UdpStats,
}

fn stamp(now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(now.total_micros() as i64)
}

impl<N: EthernetNic> UdpFabric<N> {
    /// Brings up IPv4 on `nic` as `args` say, bound to rank `rank`'s port.
    pub fn new(nic: N, args: &UdpArgs, rank: u16, now: Instant) -> Option<Self> {
        let (_, port) = *args.peers.get(rank as usize)?;
        let mut dev = SmolNic {
            nic,
            rx: [0; ether::MAX_FRAME],
            tx_dropped: 0,
        };
        let mac = EthernetAddress(dev.nic.mac());
        let mut iface = Interface::new(
            IfConfig::new(HardwareAddress::Ethernet(mac)),
            &mut dev,
            stamp(now),
        );
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::Ipv4(args.ip), args.prefix));
        });
        if let Some(gw) = args.gateway {
            iface.routes_mut().add_default_ipv4_route(gw).ok()?;
        }
        let buffer = || {
            udp::PacketBuffer::new(
                vec![udp::PacketMetadata::EMPTY; QUEUE],
                vec![0u8; QUEUE * MTU],
            )
        };
        let mut socket = udp::Socket::new(buffer(), buffer());
        socket.bind(port).ok()?;
        let mut sockets = SocketSet::new(Vec::new());
        let udp = sockets.add(socket);
        let peers = args
            .peers
            .iter()
            .map(|&(ip, port)| IpEndpoint::new(IpAddress::Ipv4(ip), port))
            .collect();
        Some(UdpFabric {
            iface,
            dev,
            sockets,
            udp,
            peers,
            stats: UdpStats::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> UdpStats {
        UdpStats {
            tx_dropped: self.dev.tx_dropped,
            ..self.stats
        }
    }

    /// The card underneath.
    pub fn nic_mut(&mut self) -> &mut N {
        &mut self.dev.nic
    }
}

/// A datagram for the engine, read from the socket when consumed.
pub struct UdpRx<'a> {
    socket: &'a mut udp::Socket<'static>,
}

/// Room for a datagram to rank `to`.
pub struct UdpTx<'a, N: EthernetNic> {
    fabric: &'a mut UdpFabric<N>,
    to: IpEndpoint,
    now: Instant,
}

impl RxToken for UdpRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self.socket.recv() {
            Ok((data, _)) => f(data),
            // Checked by `receive`; an empty frame is refused by the engine.
            Err(_) => f(&[]),
        }
    }
}

impl<N: EthernetNic> TxToken for UdpTx<'_, N> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let len = len.min(MTU);
        let fab = self.fabric;
        let socket = fab.sockets.get_mut::<udp::Socket>(fab.udp);
        let r = match socket.send(len, self.to) {
            Ok(buf) => {
                fab.stats.tx += 1;
                f(buf)
            }
            Err(_) => {
                fab.stats.tx_full += 1;
                let mut scratch = [0u8; MTU];
                f(&mut scratch[..len])
            }
        };
        // Out on the wire now, not at the next receive.
        fab.iface
            .poll(stamp(self.now), &mut fab.dev, &mut fab.sockets);
        r
    }
}

impl<N: EthernetNic> Device for UdpFabric<N> {
    type RxToken<'a>
        = UdpRx<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = UdpTx<'a, N>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<UdpRx<'_>> {
        self.iface
            .poll(stamp(now), &mut self.dev, &mut self.sockets);
        loop {
            let socket = self.sockets.get_mut::<udp::Socket>(self.udp);
            let from = socket.peek().ok()?.1.endpoint.addr;
            if self.peers.iter().any(|p| p.addr == from) {
                break;
            }
            self.stats.rx_foreign += 1;
            let _ = socket.recv();
        }
        self.stats.rx += 1;
        Some(UdpRx {
            socket: self.sockets.get_mut::<udp::Socket>(self.udp),
        })
    }

    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<UdpTx<'_, N>> {
        let to = *self.peers.get(dst.0 as usize)?;
        if !self.sockets.get_mut::<udp::Socket>(self.udp).can_send() {
            self.iface
                .poll(stamp(now), &mut self.dev, &mut self.sockets);
            self.stats.tx_full += 1;
            return None;
        }
        Some(UdpTx {
            fabric: self,
            to,
            now,
        })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(MTU, false, false)
    }
}

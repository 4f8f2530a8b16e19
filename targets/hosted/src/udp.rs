//! The `udp` fabric: one non-blocking UDP socket per rank, busy-polled.
//!
//! Peers' addresses: `VOLLEY_UDP_PEERS` (an explicit `ip:port` list), else the hosts
//! list with port `base + rank`, else `127.0.0.1:base + rank`. The base port is
//! `VOLLEY_PORT`, or derived from the job id so concurrent jobs do not collide.

use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};
use volley_core::phy::{Capabilities, Device, RxToken, TxToken};
use volley_core::time::Instant;
use volley_core::NodeAddr;

use crate::bootstrap::Boot;
use crate::HostError;

/// Largest frame by default: an Ethernet MTU's worth of UDP payload, so no IP
/// fragmentation across real networks. `VOLLEY_UDP_MTU` raises it (e.g. on loopback).
pub const DEFAULT_MTU: usize = 1472;

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
        let addrs = addrs.map_err(|e| HostError(format!("VOLLEY_UDP_PEERS: {e}")))?;
        if addrs.len() != boot.size as usize {
            return Err(HostError(format!(
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
                .map_or("127.0.0.1", String::as_str);
            let port = base
                .checked_add(i)
                .ok_or_else(|| HostError(format!("port {base} + rank {i} overflows")))?;
            (host, port)
                .to_socket_addrs()
                .map_err(|e| HostError(format!("cannot resolve {host}: {e}")))?
                .find(SocketAddr::is_ipv4)
                .ok_or_else(|| HostError(format!("{host} has no IPv4 address")))
        })
        .collect()
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams sent.
    pub tx: u64,
    /// Datagrams received.
    pub rx: u64,
    /// Sends that failed (buffer full, unreachable): the engine's retransmission covers them.
    pub tx_errors: u64,
}

/// A rank's UDP socket.
#[derive(Debug)]
pub struct UdpDevice {
    sock: UdpSocket,
    peers: Vec<SocketAddr>,
    rx: Vec<u8>,
    tx: Vec<u8>,
    mtu: usize,
    stats: UdpStats,
}

impl UdpDevice {
    /// Binds this rank's socket.
    pub fn open(boot: &Boot) -> Result<UdpDevice, HostError> {
        let peers = peer_addrs(boot)?;
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
                    HostError(format!(
                        "VOLLEY_UDP_BIND has no address for rank {}",
                        boot.rank
                    ))
                })?
                .trim()
                .parse()
                .map_err(|e| HostError(format!("VOLLEY_UDP_BIND: {e}")))?,
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
        let mtu = crate::settings::env_integer("VOLLEY_UDP_MTU", 256, 65_000)?
            .map_or(DEFAULT_MTU, |m| m as usize);
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| HostError(format!("udp socket: {e}")))?;
        // Deep buffers absorb a window of frames from every peer at once.
        let _ = s.set_recv_buffer_size(8 << 20);
        let _ = s.set_send_buffer_size(8 << 20);
        s.bind(&bind.into())
            .map_err(|e| HostError(format!("cannot bind udp {bind}: {e}")))?;
        s.set_nonblocking(true)
            .map_err(|e| HostError(format!("udp nonblocking: {e}")))?;
        Ok(UdpDevice {
            sock: s.into(),
            peers,
            rx: vec![0; 65_536],
            tx: vec![0; 65_536],
            mtu,
            stats: UdpStats::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }
}

/// A received datagram.
#[derive(Debug)]
pub struct UdpRx<'a>(&'a [u8]);

/// Room for a datagram to one peer.
#[derive(Debug)]
pub struct UdpTx<'a> {
    sock: &'a UdpSocket,
    buf: &'a mut [u8],
    to: SocketAddr,
    stats: &'a mut UdpStats,
}

impl RxToken for UdpRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }
}

impl TxToken for UdpTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let len = len.min(self.buf.len());
        let r = f(&mut self.buf[..len]);
        match self.sock.send_to(&self.buf[..len], self.to) {
            Ok(_) => self.stats.tx += 1,
            Err(_) => self.stats.tx_errors += 1,
        }
        r
    }
}

impl Device for UdpDevice {
    type RxToken<'a> = UdpRx<'a>;
    type TxToken<'a> = UdpTx<'a>;

    fn receive(&mut self, _now: Instant) -> Option<UdpRx<'_>> {
        loop {
            match self.sock.recv_from(&mut self.rx) {
                Ok((n, _)) => {
                    self.stats.rx += 1;
                    return Some(UdpRx(&self.rx[..n]));
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // WouldBlock: nothing there; ConnectionRefused: an ICMP from a peer
                // that is gone, which the engine's retries will notice.
                Err(_) => return None,
            }
        }
    }

    fn transmit(&mut self, _now: Instant, dst: NodeAddr) -> Option<UdpTx<'_>> {
        let to = *self.peers.get(dst.0 as usize)?;
        Some(UdpTx {
            sock: &self.sock,
            buf: &mut self.tx[..self.mtu],
            to,
            stats: &mut self.stats,
        })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            mtu: self.mtu,
            reliable: false,
            integrity: false,
        }
    }
}

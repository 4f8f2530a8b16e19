//! A UDP relay between ranks that drops, duplicates and reorders datagrams, for the
//! tests of recovery over a lossy network (shared by the test binaries).

#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A relay that drops, duplicates and reorders datagrams between two ranks.
pub struct Relay {
    stop: Arc<AtomicBool>,
    pub dropped: Arc<AtomicU64>,
    pub duplicated: Arc<AtomicU64>,
    pub reordered: Arc<AtomicU64>,
    /// The largest datagram that passed through.
    pub largest: Arc<AtomicU64>,
    threads: Vec<thread::JoinHandle<()>>,
    pub relay_addrs: Vec<SocketAddr>,
    /// With [`Faults::Record`]: what passed towards each target, in order.
    pub recorded: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
}

/// How the relay misbehaves: random faults, or bursts of consecutive drops towards
/// one rank.
#[derive(Clone, Copy)]
pub enum Faults {
    /// 10% dropped, 5% duplicated, 5% reordered.
    Random,
    /// Towards rank `to`: every `every` datagrams, the next `burst` are all dropped.
    Bursts { to: usize, every: u32, burst: u32 },
    /// Nothing lost: every datagram passes, and is recorded (an eavesdropper).
    Record,
    /// Nothing lost, nothing recorded: the same path as the faulty modes, for a
    /// reference run.
    Clean,
    /// Both ways: every `every` datagrams towards each rank, the next `burst` are
    /// all dropped.
    BurstsBoth { every: u32, burst: u32 },
}

impl Relay {
    pub fn start(targets: Vec<SocketAddr>, seed: u64) -> Relay {
        Relay::with(targets, seed, Faults::Random)
    }

    pub fn with(targets: Vec<SocketAddr>, seed: u64, faults: Faults) -> Relay {
        let stop = Arc::new(AtomicBool::new(false));
        let (dropped, duplicated, reordered, largest) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let mut threads = Vec::new();
        let mut relay_addrs = Vec::new();
        let recorded = Arc::new(Mutex::new(vec![Vec::new(); targets.len()]));
        for (i, target) in targets.into_iter().enumerate() {
            let recorded = recorded.clone();
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            relay_addrs.push(sock.local_addr().unwrap());
            let (stop, dropped, duplicated, reordered, largest) = (
                stop.clone(),
                dropped.clone(),
                duplicated.clone(),
                reordered.clone(),
                largest.clone(),
            );
            threads.push(thread::spawn(move || {
                let mut x = seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut rnd = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 1000) as u32
                };
                let mut buf = vec![0u8; 65_536];
                let mut held: Option<Vec<u8>> = None;
                let mut count = 0u32;
                // Bounded: stops when told, or after two minutes whatever happens.
                let end = Instant::now() + Duration::from_secs(120);
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    let Ok((n, _)) = sock.recv_from(&mut buf) else {
                        if let Some(h) = held.take() {
                            let _ = sock.send_to(&h, target);
                        }
                        continue;
                    };
                    let frame = &buf[..n];
                    largest.fetch_max(n as u64, Ordering::Relaxed);
                    if let Faults::Record = faults {
                        recorded.lock().unwrap()[i].push(frame.to_vec());
                        let _ = sock.send_to(frame, target);
                        continue;
                    }
                    if let Faults::Clean = faults {
                        let _ = sock.send_to(frame, target);
                        continue;
                    }
                    if let Faults::BurstsBoth { every, burst } = faults {
                        let k = count;
                        count += 1;
                        if k % every < burst {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        } else {
                            let _ = sock.send_to(frame, target);
                        }
                        continue;
                    }
                    if let Faults::Bursts { to, every, burst } = faults {
                        // Counted from 0, so that the first burst is whole too.
                        let k = count;
                        count += 1;
                        if to == i && k % every < burst {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        } else {
                            let _ = sock.send_to(frame, target);
                        }
                        continue;
                    }
                    match rnd() {
                        0..=99 => {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        100..=149 => {
                            duplicated.fetch_add(1, Ordering::Relaxed);
                            let _ = sock.send_to(frame, target);
                            let _ = sock.send_to(frame, target);
                        }
                        150..=199 if held.is_none() => {
                            reordered.fetch_add(1, Ordering::Relaxed);
                            held = Some(frame.to_vec());
                        }
                        _ => {
                            let _ = sock.send_to(frame, target);
                            if let Some(h) = held.take() {
                                let _ = sock.send_to(&h, target);
                            }
                        }
                    }
                }
            }));
        }
        Relay {
            stop,
            dropped,
            duplicated,
            reordered,
            largest,
            threads,
            relay_addrs,
            recorded,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A UDP port on loopback, free now, for a rank to bind later. It lies below the
/// kernel's ephemeral range, which sockets bound to port 0 (the relay's own, other
/// programs') are given ports from: a port taken from that range and let go could
/// be handed to one of them before the rank binds it. Each call starts its search
/// elsewhere (by process and call), so that calls in a row do not return the port
/// just let go. Where the range starts too low to leave room, the kernel chooses.
pub fn free_port() -> SocketAddr {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    const SPAN: u64 = 10_000;
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32_768);
    if low > SPAN + 1024 {
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let start = (u64::from(std::process::id()) * 7_919 + call * 613) % SPAN;
        for i in 0..SPAN {
            let port = (low - SPAN + (start + i) % SPAN) as u16;
            if let Ok(s) = UdpSocket::bind(("127.0.0.1", port)) {
                return s.local_addr().unwrap();
            }
        }
    }
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

//! The `udp` fabric's cost per message in user space, without a second core: two
//! GAMMA ranks of one job, each with its own socket on loopback, in one thread take
//! turns (a datagram sent on loopback is in its receiver's socket when `sendto`
//! returns, so every poll finds its frame). The reference row is the same exchange
//! bare: one 8-byte `sendto` and one `recvfrom` per message, on the same loopback.
//!
//! `cargo bench -p volley-hosted --bench udp_cost [-- ITERS]` prints the median of 9
//! rounds, nanoseconds per one-way message (system calls included; the receiver's
//! empty poll before each message, as a waiting receiver makes, is not timed). Under callgrind,
//! which counts user space only, `--collect-atstart=no
//! --toggle-collect='*udp_cost::hop*'` with `ITERS flowctl` (or `send`, or `bare`
//! with `'*udp_cost::bare_hop*'`) as arguments: the instruction count divided by
//! `18 * ITERS` is what a message costs from the send call to the end of its
//! handler, the engine with its frame tags and the device's glue, both ends.

use std::hint::black_box;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant as WallInstant;

use volley_core::gamma::{Upcall, GO_BACK};
use volley_hosted::bootstrap::{Boot, Source};
use volley_hosted::node::{self, HostGamma};
use volley_hosted::secret::Secret;
use volley_hosted::Fabric;

type G = HostGamma<u64>;

fn on_msg(u: &mut Upcall<'_, '_, u64>) {
    *u.state() += 1;
}

/// Ranks 0 and 1 of one job on loopback, port 1 of each bound to the other's.
fn ranks() -> (G, G) {
    // Every read here finds a datagram, which would turn receive coalescing on
    // (`UDP_GRO`, and a `recvmsg` per read); a ping-pong's waiting reads find
    // nothing between messages and keep it off, reading with `recvfrom`.
    std::env::set_var("VOLLEY_UDP_GSO", "0");
    let secret = Secret([7; 16]);
    // A job whose two ports are free (each job has its own base port).
    let open = |job: u64| -> Option<(G, G)> {
        let boot = |rank| Boot {
            rank,
            size: 2,
            job,
            source: Source::Hosts,
            hosts: Vec::new(),
            secret: Some(secret),
        };
        let a = node::gamma(&boot(0), Fabric::Udp, 0u64).ok()?;
        let b = node::gamma(&boot(1), Fabric::Udp, 0u64).ok()?;
        Some((a, b))
    };
    let (mut a, mut b) = (1..200)
        .map(|k| 0x5eed_0000 + u64::from(std::process::id()) * 7 + k * 131)
        .find_map(open)
        .expect("two free udp ports");
    for (g, peer) in [(&mut a, 1u16), (&mut b, 0)] {
        let pid = g.my_par_pid();
        g.set_active_port(
            1,
            peer,
            pid,
            1,
            Some(on_msg),
            None,
            1,
            GO_BACK,
            Some(Vec::leak(vec![0u8; 4096])),
        )
        .unwrap();
    }
    (a, b)
}

/// One message from `from` to `to`: sent, then polled until its handler ran.
#[inline(never)]
fn hop(from: &mut G, to: &mut G, data: &[u8], reliable: bool) {
    if reliable {
        from.send_flowctl(1, data).unwrap();
    } else {
        from.send(1, data).unwrap();
    }
    to.wait(1, 1).unwrap();
}

/// Nanoseconds of `2 * iters` hops. Before each, its receiver polls once and finds
/// nothing, as one that waits for the message does: what the poll before left for
/// later (the ack of its own last message) is done there, off the message's path.
/// Those polls are not timed (each is a read that finds nothing).
#[inline(never)]
fn measured(a: &mut G, b: &mut G, iters: usize, reliable: bool) -> f64 {
    let data = [7u8; 8];
    let mut ns = 0;
    for _ in 0..iters {
        black_box(b.test(1).unwrap());
        let t = WallInstant::now();
        hop(a, b, &data, reliable);
        ns += t.elapsed().as_nanos();
        black_box(a.test(1).unwrap());
        let t = WallInstant::now();
        hop(b, a, &data, reliable);
        ns += t.elapsed().as_nanos();
    }
    ns as f64
}

/// The bare exchange: 8 bytes sent, then read where they landed.
#[inline(never)]
fn bare_hop(from: &UdpSocket, to: &UdpSocket, to_addr: SocketAddr, buf: &mut [u8]) {
    from.send_to(&[7u8; 8], to_addr).unwrap();
    while to.recv_from(buf).is_err() {}
    black_box(&buf[..8]);
}

/// Nanoseconds of `2 * iters` bare hops, each timed as [`measured`] times a hop.
#[inline(never)]
fn measured_bare(a: &UdpSocket, b: &UdpSocket, buf: &mut [u8], iters: usize) -> f64 {
    let (at_a, at_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let mut ns = 0;
    for _ in 0..iters {
        let t = WallInstant::now();
        bare_hop(a, b, at_b, buf);
        ns += t.elapsed().as_nanos();
        let t = WallInstant::now();
        bare_hop(b, a, at_a, buf);
        ns += t.elapsed().as_nanos();
    }
    ns as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    // `send`, `flowctl` or `bare` measures only that row (for callgrind); cargo's
    // `--bench` flag is ignored.
    let only = args
        .iter()
        .find(|a| ["send", "flowctl", "bare"].contains(&a.as_str()));
    let rounds = 9;
    let per_msg = |ns: f64| ns / (2 * iters) as f64;

    let bare = if only.is_none_or(|o| o == "bare") {
        let sock = || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            s
        };
        let (a, b) = (sock(), sock());
        let mut buf = vec![0u8; 65_536];
        let ns = median(
            (0..rounds)
                .map(|_| per_msg(measured_bare(&a, &b, &mut buf, iters)))
                .collect(),
        );
        println!(
            "{:<44} {:>9.1} ns  1.00x",
            "reference: bare sendto + recvfrom, 8 B", ns
        );
        Some(ns)
    } else {
        None
    };
    for (reliable, row, name) in [
        (false, "send", "GAMMA send, 8 B, udp"),
        (true, "flowctl", "GAMMA send_flowctl, 8 B, udp"),
    ] {
        if only.is_some_and(|o| o != row) {
            continue;
        }
        let (mut a, mut b) = ranks();
        let ns = median(
            (0..rounds)
                .map(|_| per_msg(measured(&mut a, &mut b, iters, reliable)))
                .collect(),
        );
        assert_eq!(*a.state() + *b.state(), (2 * rounds * iters) as u64);
        match bare {
            Some(r) => println!("{:<44} {:>9.1} ns  {:.2}x", name, ns, ns / r),
            None => println!("{:<44} {:>9.1} ns", name, ns),
        }
    }
}

//! The `udp` fabric's cost per message in user space, without a second core: two
//! GAMMA ranks of one job, each with its own socket on loopback, in one thread take
//! turns (a datagram sent on loopback is in its receiver's socket when `sendto`
//! returns, so every poll finds its frame). The reference row is the same exchange
//! bare: one 8-byte `sendto` and one `recvfrom` per message, on the same loopback.
//!
//! `cargo bench -p volley-hosted --bench udp_cost [-- ITERS]` prints the median of 9
//! rounds, nanoseconds per one-way message (system calls included; the receiver's
//! empty poll before each message, as a waiting receiver makes, is not timed). Under callgrind,
//! which counts user space only (see `cost/mod.rs`): what a message costs from the
//! send call to the end of its handler, the engine with its frame tags and the
//! device's glue, both ends.

// The device-level reference (`measured_bare`, `pair`) is not udp's: its reference
// is the bare socket's.
#[allow(dead_code)]
mod cost;

use std::hint::black_box;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant as WallInstant;

use volley_hosted::node;
use volley_hosted::Fabric;

/// Ranks 0 and 1 of one job on loopback, each with its own socket.
fn ranks() -> (cost::G, cost::G) {
    // Every read here finds a datagram, which would turn receive coalescing on
    // (`UDP_GRO`, and a `recvmsg` per read); a ping-pong's waiting reads find
    // nothing between messages and keep it off, reading with `recvfrom`.
    std::env::set_var("VOLLEY_UDP_GSO", "0");
    // A job whose two ports are free (each job has its own base port).
    // Each opened in a thread of its own: a rank's start-up exchange waits for the
    // other's.
    let open = |job: u64| -> Option<(cost::G, cost::G)> {
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| node::gamma(&cost::boot(job, 0), Fabric::Udp, 0u64));
            let b = s.spawn(|| node::gamma(&cost::boot(job, 1), Fabric::Udp, 0u64));
            (a.join(), b.join())
        });
        match (a, b) {
            (Ok(Ok(a)), Ok(Ok(b))) => Some((a, b)),
            _ => None,
        }
    };
    (1..200)
        .map(|k| 0x5eed_0000 + u64::from(std::process::id()) * 7 + k * 131)
        .find_map(open)
        .expect("two free udp ports")
}

/// The bare exchange: 8 bytes sent, then read where they landed.
#[inline(never)]
fn bare_hop(from: &UdpSocket, to: &UdpSocket, to_addr: SocketAddr, buf: &mut [u8]) {
    from.send_to(&[7u8; 8], to_addr).unwrap();
    while to.recv_from(buf).is_err() {}
    black_box(&buf[..8]);
}

/// Nanoseconds of `2 * iters` bare hops, each timed as a message is.
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

fn main() {
    let args = cost::Args::parse();
    cost::run(
        &args,
        "udp",
        "reference: bare sendto + recvfrom, 8 B",
        |iters| {
            let sock = || {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_nonblocking(true).unwrap();
                s
            };
            let (a, b) = (sock(), sock());
            let mut buf = vec![0u8; 65_536];
            Box::new(move || measured_bare(&a, &b, &mut buf, iters))
        },
        |_| ranks(),
    );
}

//! The `eth` fabric's cost per message in user space, without a second core: two
//! GAMMA ranks of one job on the two ends of a veth pair this bench makes (root and
//! `ip(8)` needed; the pair, named after the process, is removed at the end). A
//! frame sent into one end is in the other end's packet ring when the send returns,
//! so every poll finds its frame (`udp_cost` does the same on loopback). The
//! reference row is the fabric's device alone: an 8-byte frame through the packet
//! rings, no engine.
//!
//! `cargo bench -p volley-hosted --bench eth_cost [-- ITERS]` prints the median of 9
//! rounds, nanoseconds per one-way message (system calls included; the receiver's
//! empty poll before each message is not timed); under callgrind (user space only:
//! job key, frame tags, the rings' glue), see `cost/mod.rs`.

mod cost;

use volley_hosted::eth::EthDevice;
use volley_hosted::node;
use volley_hosted::secret::Secret;
use volley_hosted::Fabric;

/// A veth pair of this process's own (its ends named after its pid, so that no
/// interface the bench did not make is touched), removed when the bench ends
/// however it ends.
struct Veth(String, String);

impl Veth {
    /// Makes the pair and names its ends and their addresses to the fabric; a
    /// failure is one line and exit 2.
    fn make() -> Veth {
        let id = std::process::id();
        let (a, b) = (format!("vcost{id}a"), format!("vcost{id}b"));
        let ip = |args: &[&str]| {
            let out = std::process::Command::new("ip").args(args).output();
            if !out.is_ok_and(|o| o.status.success()) {
                eprintln!(
                    "eth_cost: `ip {}` failed: the bench needs root and ip(8)",
                    args.join(" ")
                );
                std::process::exit(2);
            }
        };
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        let veth = Veth(a, b);
        ip(&["link", "set", &veth.0, "up"]);
        ip(&["link", "set", &veth.1, "up"]);
        let mac = |i: &str| {
            std::fs::read_to_string(format!("/sys/class/net/{i}/address"))
                .map(|m| m.trim().to_owned())
                .unwrap_or_default()
        };
        std::env::set_var("VOLLEY_ETH_IF", format!("{},{}", veth.0, veth.1));
        std::env::set_var(
            "VOLLEY_ETH_MACS",
            format!("{},{}", mac(&veth.0), mac(&veth.1)),
        );
        veth
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting one end deletes both.
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.0])
            .output();
    }
}

/// A job id of this process, `k` telling its jobs apart.
fn job(k: u64) -> u64 {
    0x6_0000_0000 + u64::from(std::process::id()) * 8 + k
}

fn main() {
    let args = cost::Args::parse();
    let _veth = Veth::make();
    cost::run(
        &args,
        "eth",
        "reference: the eth device alone, 8 B",
        |iters| {
            let open = |b: &_| EthDevice::open(b, &Secret([9; 16]));
            let (mut a, mut b) = cost::pair("eth_cost", job(0), open);
            Box::new(move || cost::measured_bare(&mut a, &mut b, iters))
        },
        |k| cost::pair("eth_cost", job(k), |b| node::gamma(b, Fabric::Eth, 0u64)),
    );
}

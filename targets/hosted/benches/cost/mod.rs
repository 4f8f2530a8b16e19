//! What the hosted fabrics' cost benches share (`udp_cost`, `shm_cost`,
//! `eth_cost`): two GAMMA ranks of one job taking turns in one thread, so that
//! every poll finds its frame; each message timed from the send call to the end of
//! its handler, beside a reference row measured in the same run (the fabric's path
//! without the engine). Under callgrind, `--collect-atstart=no
//! --toggle-collect='*cost::hop*'` with `ITERS send|flowctl` as arguments counts a
//! message's path (`'*cost::bare_hop*'` with `ITERS bare`, the reference's): the
//! count divided by `18 * ITERS`, both ends.

use std::hint::black_box;
use std::time::Instant as WallInstant;

use volley_core::gamma::{Upcall, GO_BACK};
use volley_core::phy::{Device, RxToken, TxToken};
use volley_core::time::Instant;
use volley_core::NodeAddr;
use volley_hosted::bootstrap::{Boot, Source};
use volley_hosted::node::HostGamma;
use volley_hosted::secret::Secret;
use volley_hosted::HostError;

pub type G = HostGamma<u64>;

/// Rounds of each row; the median is printed.
const ROUNDS: usize = 9;

fn on_msg(u: &mut Upcall<'_, '_, u64>) {
    *u.state() += 1;
}

/// Rank `rank` of the 2-rank job `job`, under a fixed secret.
pub fn boot(job: u64, rank: u16) -> Boot {
    Boot {
        rank,
        size: 2,
        job,
        source: Source::Hosts,
        hosts: Vec::new(),
        secret: Some(Secret([9; 16])),
        said: None,
    }
}

/// Both ranks' `open` of job `job`, each in a thread of its own (a fabric's rank 0
/// may wait for rank 1 while it opens); a failure is one line, naming `bench`, and
/// exit status 2.
pub fn pair<T: Send>(
    bench: &str,
    job: u64,
    open: impl Fn(&Boot) -> Result<T, HostError> + Sync,
) -> (T, T) {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| open(&boot(job, 0)));
        let b = s.spawn(|| open(&boot(job, 1)));
        (a.join(), b.join())
    });
    match (a, b) {
        (Ok(Ok(a)), Ok(Ok(b))) => (a, b),
        (Ok(Err(e)), _) | (_, Ok(Err(e))) => {
            eprintln!("{bench}: {e}");
            std::process::exit(2);
        }
        _ => {
            eprintln!("{bench}: opening the fabric panicked");
            std::process::exit(2);
        }
    }
}

/// Port 1 of each rank bound to the other's, counted by its handler.
pub fn bind(a: &mut G, b: &mut G) {
    for (g, peer) in [(a, 1u16), (b, 0)] {
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
/// Those polls are not timed.
#[inline(never)]
fn measured(a: &mut G, b: &mut G, iters: usize, reliable: bool) -> f64 {
    let data = [7u8; 8];
    // Its length unknown to the compiler, as a program's messages are.
    let data: &[u8] = black_box(&data);
    let mut ns = 0;
    for _ in 0..iters {
        black_box(b.test(1).unwrap());
        let t = WallInstant::now();
        hop(a, b, data, reliable);
        ns += t.elapsed().as_nanos();
        black_box(a.test(1).unwrap());
        let t = WallInstant::now();
        hop(b, a, data, reliable);
        ns += t.elapsed().as_nanos();
    }
    ns as f64
}

/// The bare exchange on a fabric's device: 8 bytes sent from `from` to `to`, then
/// read where they landed.
#[inline(never)]
fn bare_hop<D: Device>(from: &mut D, to: &mut D, to_rank: u16, i: u64) {
    let now = Instant::ZERO;
    if let Some(tok) = from.transmit(now, NodeAddr(to_rank)) {
        tok.consume(8, |f| f.copy_from_slice(&i.to_le_bytes()));
    }
    from.flush(now);
    loop {
        if let Some(tok) = to.receive(now) {
            black_box(tok.consume(|f| f.first().copied()));
            return;
        }
    }
}

/// Nanoseconds of `2 * iters` bare hops between ranks 0 (`a`) and 1 (`b`), each
/// timed as [`measured`] times a hop.
#[inline(never)]
pub fn measured_bare<D: Device>(a: &mut D, b: &mut D, iters: usize) -> f64 {
    let mut ns = 0;
    for i in 0..iters as u64 {
        let t = WallInstant::now();
        bare_hop(a, b, 1, i);
        ns += t.elapsed().as_nanos();
        let t = WallInstant::now();
        bare_hop(b, a, 0, i);
        ns += t.elapsed().as_nanos();
    }
    ns as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The bench's command line: `[ITERS] [send|flowctl|bare]` (one row only, for
/// callgrind; cargo's `--bench` flag is ignored).
pub struct Args {
    pub iters: usize,
    only: Option<String>,
}

impl Args {
    pub fn parse() -> Args {
        let args: Vec<String> = std::env::args().skip(1).collect();
        Args {
            iters: args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000),
            only: args
                .into_iter()
                .find(|a| ["send", "flowctl", "bare"].contains(&a.as_str())),
        }
    }

    /// Whether row `row` is measured.
    pub fn wants(&self, row: &str) -> bool {
        self.only.as_deref().is_none_or(|o| o == row)
    }
}

/// Prints the rows, one-way nanoseconds per message (the median of the rounds):
/// the reference `bare` (nanoseconds of `2 * iters` exchanges) named `reference`,
/// then GAMMA `send` and `send_flowctl` between the ranks `ranks` opens for each
/// (told which row, 1 or 2), with their ratios to the reference.
pub fn run(
    args: &Args,
    fabric: &str,
    reference: &str,
    bare: impl FnOnce(usize) -> Box<dyn FnMut() -> f64>,
    mut ranks: impl FnMut(u64) -> (G, G),
) {
    let iters = args.iters;
    let per_msg = |ns: f64| ns / (2 * iters) as f64;
    let bare = args.wants("bare").then(|| {
        let mut round = bare(iters);
        let ns = median((0..ROUNDS).map(|_| per_msg(round())).collect());
        println!("{:<44} {:>9.1} ns  1.00x", reference, ns);
        ns
    });
    for (k, reliable, row) in [(1, false, "send"), (2, true, "flowctl")] {
        if !args.wants(row) {
            continue;
        }
        let name = if reliable {
            format!("GAMMA send_flowctl, 8 B, {fabric}")
        } else {
            format!("GAMMA send, 8 B, {fabric}")
        };
        let (mut a, mut b) = ranks(k);
        bind(&mut a, &mut b);
        let ns = median(
            (0..ROUNDS)
                .map(|_| per_msg(measured(&mut a, &mut b, iters, reliable)))
                .collect(),
        );
        assert_eq!(*a.state() + *b.state(), (2 * ROUNDS * iters) as u64);
        match bare {
            Some(r) => println!("{:<44} {:>9.1} ns  {:.2}x", name, ns, ns / r),
            None => println!("{:<44} {:>9.1} ns", name, ns),
        }
    }
}

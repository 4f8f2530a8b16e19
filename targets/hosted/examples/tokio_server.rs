//! A GAMMA server in a tokio runtime: rank 0 answers requests from every other
//! rank while a task of its own ticks beside it; each rank awaits its messages
//! (`Async::until`), so the runtime's thread sleeps in the reactor on Volley's
//! wake-up descriptor instead of spinning.
//!
//! ```sh
//! cargo build --release -p volley-hosted --features tokio --example tokio_server
//! volley run -n 4 -- target/release/examples/tokio_server
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use volley_hosted::gamma::GO_BACK;
use volley_hosted::wakeup::tokio::Async;
use volley_hosted::{HostError, Upcall};

const REQUESTS: u64 = 1000;

/// What handlers leave for the tasks: (port, value) of each message.
#[derive(Default)]
struct State {
    got: VecDeque<(u16, u64)>,
}

fn on_message(up: &mut Upcall<State>) {
    let port = up.active_port();
    let mut v = [0u8; 8];
    let n = up.len().min(8);
    v[..n].copy_from_slice(&up.data()[..n]);
    up.state().got.push_back((port, u64::from_le_bytes(v)));
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("tokio_server: {e}");
    std::process::exit(1)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run().await {
        fail(e);
    }
}

async fn run() -> Result<(), HostError> {
    let mut g = volley_hosted::init(State::default())?;
    let (me, n, pid) = (g.my_node(), g.how_many_nodes(), g.my_par_pid());
    if n < 2 {
        fail("needs 2 ranks or more");
    }
    // Rank 0's port p talks to rank p's port 1. The 8-byte buffers live as long as
    // the program.
    let peers: Vec<(u16, u16, u16)> = if me == 0 {
        (1..n).map(|p| (p, p, 1)).collect()
    } else {
        vec![(1, 0, me)]
    };
    for (port, node, their_port) in peers {
        let buf = Vec::leak(vec![0u8; 8]);
        g.set_active_port(
            port,
            node,
            pid,
            their_port,
            Some(on_message),
            None,
            1,
            GO_BACK,
            Some(buf),
        )?;
    }
    // The engine's errors keep their type (`HostError::Engine`).
    g.sync()?;
    let mut ep = Async::new(g)?;
    // The next message a handler left, after a poll that runs the handlers.
    let next = |g: &mut volley_hosted::HostGamma<State>| {
        let _ = g.test(1);
        g.state_mut().got.pop_front()
    };

    if me == 0 {
        // Another task in the same runtime: it runs while the server sleeps.
        let ticks = Arc::new(AtomicU64::new(0));
        let t = ticks.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(10));
            loop {
                every.tick().await;
                t.fetch_add(1, Ordering::Relaxed);
            }
        });
        let total = REQUESTS * u64::from(n - 1);
        for _ in 0..total {
            let (port, v) = ep.until(next).await?;
            ep.get_mut()
                .send_flowctl(port, &(v * 2 + 1).to_le_bytes())?;
        }
        println!(
            "tokio_server ok: {total} requests from {} ranks, ticker ran {} times",
            n - 1,
            ticks.load(Ordering::Relaxed)
        );
    } else {
        for i in 0..REQUESTS {
            let request = u64::from(me) * 1_000_000 + i;
            ep.get_mut().send_flowctl(1, &request.to_le_bytes())?;
            let (_, answer) = ep.until(next).await?;
            if answer != request * 2 + 1 {
                fail(format!("rank {me}: answer {answer} to {request}"));
            }
        }
        println!("rank {me} ok: {REQUESTS} answers");
    }
    // Everybody done before anybody leaves: the last answers' acks still travel.
    let mut g = ep.into_inner();
    g.sync()?;
    Ok(())
}

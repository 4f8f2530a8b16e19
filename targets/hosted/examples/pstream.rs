//! The Pstream pattern in Rust: each peer's messages land on their own active port
//! (GO_BACK) in one of two buffers; the handler records the length, moves the full
//! buffer to the program and re-posts a free one, while the program reads the other.
//!
//! Buffers are ordinary `Vec<u8>`s that move by value between the program's state and
//! the port (`post_recv` gives the previous one back): nothing is leaked, and the
//! handler is a plain `fn(&mut Upcall<State>)`.
//!
//! ```sh
//! cargo build --release --example pstream
//! volley run -n 4 -- target/release/examples/pstream
//! ```

use std::collections::VecDeque;

use volley_hosted::gamma::GO_BACK;
use volley_hosted::Upcall;

const BUF_LEN: usize = 8192;
const ROUNDS: usize = 60;

/// What the handler and the program share: per peer, free buffers and received ones.
struct State {
    free: Vec<Vec<Vec<u8>>>,
    full: Vec<VecDeque<(Vec<u8>, usize)>>,
}

/// Runs when a message from peer `p` has landed on port `p`.
fn on_message(up: &mut Upcall<State>) {
    let p = up.active_port() as usize;
    let len = up.len();
    let Some(next) = up.state().free[p].pop() else {
        // Both buffers hold unread messages: the communication pattern is unbalanced.
        eprintln!("pstream: no free buffer for peer {p}");
        std::process::exit(3);
    };
    let full = up
        .post_recv(p as u16, next)
        .expect("re-post on the handler's port");
    let full = full
        .and_then(|b| b.into_owned())
        .expect("an owned buffer")
        .into_vec();
    up.state().full[p].push_back((full, len));
}

fn byte(from: usize, round: usize, i: usize) -> u8 {
    (from * 37 + round * 11 + i) as u8
}

fn main() {
    let mut g = volley_hosted::init(State {
        free: Vec::new(),
        full: Vec::new(),
    })
    .unwrap_or_else(|e| {
        eprintln!("pstream: {e}");
        std::process::exit(1)
    });
    let (me, n, pid) = (
        g.my_node() as usize,
        g.how_many_nodes() as usize,
        g.my_par_pid(),
    );
    // Two buffers per peer: one posted on the port, one spare.
    g.state_mut().free = (0..n).map(|_| vec![vec![0; BUF_LEN]]).collect();
    g.state_mut().full = (0..n).map(|_| VecDeque::new()).collect();
    for p in (0..n).filter(|&p| p != me) {
        g.set_active_port(
            p as u16,
            p as u16,
            pid,
            me as u16,
            Some(on_message),
            None,
            p as u16,
            GO_BACK,
            None,
        )
        .expect("port set up");
        g.post_recv(p as u16, vec![0u8; BUF_LEN])
            .expect("first buffer");
    }
    g.sync().expect("everybody's ports are set up");

    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    for round in 0..ROUNDS {
        let len = 16 + round * 997 % (BUF_LEN - 16);
        let msg: Vec<u8> = (0..len).map(|i| byte(me, round, i)).collect();
        g.send_flowctl(right as u16, &msg).expect("send");
        g.wait(left as u16, 1).expect("a message from the left");
        let (buf, got) = g.state_mut().full[left]
            .pop_front()
            .expect("the handler kept it");
        assert_eq!(got, len, "round {round}: length");
        assert!(
            buf[..got]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == byte(left, round, i)),
            "round {round}: contents"
        );
        // Done reading: the buffer goes back to the pool the handler draws from.
        g.state_mut().free[left].push(buf);
        g.sync().expect("barrier");
    }

    // Reduce to instance 0 and send the sum back.
    let value = 1.5 * (me + 1) as f64;
    let sum = if me == 0 {
        let mut sum = value;
        for p in 1..n {
            g.wait(p as u16, 1).expect("a value");
            let (buf, len) = g.state_mut().full[p].pop_front().unwrap();
            sum += f64::from_le_bytes(buf[..len].try_into().expect("8 bytes"));
            g.state_mut().free[p].push(buf);
        }
        for p in 1..n {
            g.send_flowctl(p as u16, &sum.to_le_bytes())
                .expect("send the sum");
        }
        sum
    } else {
        g.send_flowctl(0, &value.to_le_bytes())
            .expect("send a value");
        g.wait(0, 1).expect("the sum");
        let (buf, len) = g.state_mut().full[0].pop_front().unwrap();
        f64::from_le_bytes(buf[..len].try_into().expect("8 bytes"))
    };
    assert_eq!(sum, 1.5 * (n * (n + 1) / 2) as f64);
    g.sync().expect("barrier");
    println!("pstream ok: instance {me} of {n}, {ROUNDS} rounds, sum {sum}");
    g.exit();
}

//! LFC in Rust: every process broadcasts a numbered stream of packets (down the
//! configured tree, `-lfc-tree` or `LFC_TREE`; on `shm` through the device's board,
//! which needs no tree); the upcall checks order and keeps
//! every tenth packet, which the program frees later. Then, with interrupts enabled,
//! process 0 sends one packet per peer while the others compute and never poll: the
//! interrupt thread delivers them. Last, every process takes fetch-and-add values
//! from process 0's variable.
//!
//! ```sh
//! cargo build --release --example lfc_tree
//! volley run -n 4 -- target/release/examples/lfc_tree -lfc-tree binomial
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use volley_hosted::lfc::{self, HostLfc, Interrupts};
use volley_hosted::lfc::{Keep, PacketId, Received, UPCALL_MCAST};
use volley_hosted::Fabric;

const ROUNDS: u32 = 500;

#[derive(Default)]
struct State {
    /// Next sequence number expected from each source.
    next: Vec<u32>,
    /// Packets kept by the upcall.
    kept: Vec<PacketId>,
    /// Unicasts received (read by the computing program while interrupts deliver).
    unicasts: Arc<AtomicU32>,
}

fn upcall(l: &mut HostLfc<State>, r: Received) -> Keep {
    let b = l.packet(r.packet).expect("delivered packet");
    let seq = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
    if r.flags & UPCALL_MCAST == 0 {
        l.state().unicasts.fetch_add(1, Ordering::Release);
        return Keep::No;
    }
    let st = l.state_mut();
    let want = &mut st.next[r.src as usize];
    assert_eq!(seq, *want, "broadcast from {} out of order", r.src);
    *want += 1;
    if seq % 10 == 0 {
        st.kept.push(r.packet);
        Keep::Yes
    } else {
        Keep::No
    }
}

fn take(l: &mut HostLfc<State>) -> bool {
    l.interrupt();
    l.intr_status()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().collect();
    let env = |k: &str| std::env::var(k).ok();
    let settings = lfc::parse_args(&mut args, &env)?;
    let boot = lfc::boot(&settings)?;
    let fabric = Fabric::from_env()?;
    let mut l = lfc::lfc(&boot, fabric, settings.options, upcall, State::default())?;
    let n = l.nr_procs();
    l.state_mut().next = vec![0; n as usize];
    l.start()?;
    let me = l.my_proc();

    for seq in 0..ROUNDS {
        let p = l.send_alloc(true)?;
        l.packet_mut(p).expect("send packet")[..4].copy_from_slice(&seq.to_le_bytes());
        l.bcast_launch(p, 4, true)?;
        if seq % 50 == 0 {
            for k in std::mem::take(&mut l.state_mut().kept) {
                l.packet_free(k)?;
            }
        }
    }
    while l
        .state()
        .next
        .iter()
        .enumerate()
        .any(|(s, &v)| s != me as usize && v < ROUNDS)
    {
        l.poll()?;
    }
    for k in std::mem::take(&mut l.state_mut().kept) {
        l.packet_free(k)?;
    }

    // Interrupts: the receivers compute, the interrupt thread makes the upcalls.
    l.barrier()?;
    let unicasts = l.state().unicasts.clone();
    let period = l.options().intr_first;
    let shared = Arc::new(Mutex::new(l));
    let intr = Interrupts::start(shared.clone(), period, take);
    shared.lock().expect("lock").intr_enable();
    intr.enabled();
    if me == 0 {
        let mut l = shared.lock().expect("lock");
        for dest in 1..n {
            let p = l.send_alloc(true)?;
            l.packet_mut(p).expect("send packet")[..4]
                .copy_from_slice(&(dest as u32).to_le_bytes());
            l.ucast_launch(dest, p, 4, true)?;
        }
    } else {
        let mut x = 1.0f64;
        while unicasts.load(Ordering::Acquire) == 0 {
            x = (x * 1.000_001).sin() + 1.0; // computing, never polling
        }
        std::hint::black_box(x);
    }
    shared.lock().expect("lock").intr_disable();
    drop(intr);
    let mut l = Arc::into_inner(shared).expect("sole owner").into_inner()?;
    let by_interrupt = l.stats().interrupts;
    if me != 0 && by_interrupt == 0 {
        return Err("the unicast did not come by interrupt".into());
    }

    l.barrier()?;
    let v = l.fetch_and_add(0, true)?;
    assert!(v < n as u32);
    l.barrier()?;
    println!(
        "lfc_tree ok: process {me} of {n}, {ROUNDS} broadcasts from each, fetch-and-add value {v}"
    );
    l.exit();
    Ok(())
}

//! Reliable delivery through bursts of loss: 5,000 8-byte `flowctl` messages
//! between two `udp` ranks through a relay that, both ways, drops 50 datagrams in a
//! row of every 500; the reference is the same job through the same relay losing
//! nothing, in the same run. Prints each run and the medians, and the ratio (the
//! target: within 15x). `cargo bench -p volley-cli --bench burst_loss`;
//! `BURST_RUNS` runs of each (3 by default), `BURST_MESSAGES` messages (5,000),
//! `BURST_VOLLEY` another `volley` binary to run, `BURST_VERBOSE` the jobs' output.

#[path = "../tests/relay/mod.rs"]
mod relay;

use relay::{free_port, Faults, Relay};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

/// The `volley` to run: `BURST_VOLLEY` (another build, to compare), else this one.
fn volley() -> String {
    std::env::var("BURST_VOLLEY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_volley").into())
}

/// One job of `messages` through a relay with `faults`: how long the messages
/// took (from the first barrier to the last message in, as the receiver says), the
/// whole job, and what the relay dropped.
fn job(faults: Faults, messages: &str, seed: u64) -> (f64, Duration, u64) {
    let real = vec![free_port(), free_port()];
    let relay = Relay::with(real.clone(), seed, faults);
    let list = |v: &[SocketAddr]| {
        v.iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let t = Instant::now();
    let v = volley();
    let out = Command::new(&v)
        .args([
            "run",
            "-n",
            "2",
            "--fabric",
            "udp",
            "--timeout",
            "300",
            "--",
        ])
        .args([v.as_str(), "worker", "flowctl-exact"])
        .env("VOLLEY_UDP_PEERS", list(&relay.relay_addrs))
        .env("VOLLEY_UDP_BIND", list(&real))
        .env("VOLLEY_MESSAGES", messages)
        .output()
        .expect("volley runs");
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    if std::env::var_os("BURST_VERBOSE").is_some() {
        print!("{text}{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(
        out.status.success() && text.contains("exactly once"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let phase = text
        .split("all in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the receiver says how long the messages took");
    (
        phase,
        took,
        relay.dropped.load(std::sync::atomic::Ordering::Relaxed),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("BURST_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let messages = std::env::var("BURST_MESSAGES").unwrap_or_else(|_| "5000".into());
    let (mut clean, mut burst) = (Vec::new(), Vec::new());
    println!(
        "{:<34} {:>12} {:>12} {:>9}",
        "run", "messages s", "whole job s", "dropped"
    );
    for k in 0..runs {
        for (name, faults, into) in [
            ("clean (reference)", Faults::Clean, &mut clean),
            (
                "50 of every 500 lost, both ways",
                Faults::BurstsBoth {
                    every: 500,
                    burst: 50,
                },
                &mut burst,
            ),
        ] {
            let (phase, whole, d) = job(faults, &messages, k as u64);
            println!(
                "{name:<34} {phase:>12.4} {:>12.3} {d:>9}",
                whole.as_secs_f64()
            );
            into.push(phase);
        }
    }
    let (c, b) = (median(clean), median(burst));
    println!(
        "{messages} messages: {c:.4} s clean, {b:.4} s through bursts (medians of {runs}): {:.1}x the clean time",
        b / c
    );
}

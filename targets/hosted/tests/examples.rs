//! The Rust examples run as a user would start them: `volley run -n 4 -- example`
//! (here through the launcher library that `volley run` is).

use std::path::{Path, PathBuf};
use std::time::Duration;

use volley_hosted::launcher::{self, RunOptions};
use volley_hosted::Fabric;

fn example(name: &str) -> PathBuf {
    // Tests live in target/<profile>/deps; `cargo test` builds the examples beside.
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} not built: run `cargo test -p volley-hosted` (a filtered run builds no examples)",
        p.display()
    );
    p
}

/// `volley run -n 4 --fabric FABRIC -- PROG ARGS`: the exit status.
fn run4(fabric: Fabric, prog: &Path, args: &[&str]) -> i32 {
    let mut command = vec![prog.display().to_string()];
    command.extend(args.iter().map(|a| a.to_string()));
    launcher::run(&RunOptions {
        ranks: 4,
        fabric,
        timeout: Duration::from_secs(120),
        grace: Duration::from_secs(5),
        job: None,
        command,
        env: Vec::new(),
        rank0_only: false,
        unikernel: None,
        stdin: false,
    })
}

#[test]
fn pstream_example_runs_on_both_fabrics() {
    let prog = example("pstream");
    for fabric in [Fabric::Shm, Fabric::Udp] {
        let code = run4(fabric, &prog, &[]);
        assert_eq!(code, 0, "pstream on {}", fabric.name());
    }
}

#[test]
fn lfc_tree_example_runs_on_both_fabrics_with_each_tree() {
    let prog = example("lfc_tree");
    for (fabric, tree) in [
        (Fabric::Shm, "binary"),
        (Fabric::Udp, "binomial"),
        (Fabric::Shm, "chain"),
    ] {
        let code = run4(fabric, &prog, &["-lfc-tree", tree]);
        assert_eq!(code, 0, "lfc_tree on {} with {tree}", fabric.name());
    }
}

#[test]
fn tokio_server_example_serves_three_ranks_on_both_fabrics() {
    let prog = example("tokio_server");
    for fabric in [Fabric::Shm, Fabric::Udp] {
        let code = run4(fabric, &prog, &[]);
        assert_eq!(code, 0, "tokio_server on {}", fabric.name());
    }
}

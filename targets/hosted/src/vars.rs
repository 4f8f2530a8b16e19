//! Every `VOLLEY_*` environment variable Volley reads, in one table: what it does,
//! the values it takes, and a check of its value. `volley info` prints the table
//! and the variables in effect; a launcher checks the values once before it starts
//! any rank ([`check_env`]); rank 0 warns once about a `VOLLEY_*` name that is not
//! here ([`warn_unknown`]), as UCX does for `UCX_*` names, since a misspelt setting
//! would otherwise be ignored without a word.

use std::sync::Once;

use crate::HostError;

/// Who reads a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Set by a launcher (`volley run`) or by hand: who this rank is, its job.
    Job,
    /// Every fabric: timeouts, collectives, clock.
    Engine,
    /// The `shm` fabric.
    Shm,
    /// The `udp` fabric.
    Udp,
    /// The `eth` fabric.
    Eth,
    /// A personality's C library.
    Api,
    /// `volley run --unikernel`.
    Unikernel,
    /// The test programs of `volley worker`.
    Programs,
    /// The test suites and benchmarks.
    Tests,
}

impl Scope {
    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Job => "job",
            Scope::Engine => "engine",
            Scope::Shm => "shm",
            Scope::Udp => "udp",
            Scope::Eth => "eth",
            Scope::Api => "api",
            Scope::Unikernel => "unikernel",
            Scope::Programs => "programs",
            Scope::Tests => "tests",
        }
    }
}

/// A variable of the table.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    /// Its name.
    pub name: &'static str,
    /// Who reads it.
    pub scope: Scope,
    /// The values it takes.
    pub values: &'static str,
    /// What it does (one sentence).
    pub about: &'static str,
    /// Whether its value may be shown (a secret's is not).
    pub secret: bool,
    /// A check of its value as set now, where one can be made without the job.
    check: Option<fn() -> Result<(), HostError>>,
}

const fn var(name: &'static str, scope: Scope, values: &'static str, about: &'static str) -> Var {
    Var {
        name,
        scope,
        values,
        about,
        secret: false,
        check: None,
    }
}

const fn checked(
    name: &'static str,
    scope: Scope,
    values: &'static str,
    about: &'static str,
    check: fn() -> Result<(), HostError>,
) -> Var {
    Var {
        name,
        scope,
        values,
        about,
        secret: false,
        check: Some(check),
    }
}

fn int(name: &str, min: u64, max: u64) -> Result<(), HostError> {
    crate::settings::env_integer(name, min, max).map(drop)
}

fn secs(name: &str, min: f64, max: f64) -> Result<(), HostError> {
    crate::settings::env_seconds(name, min, max).map(drop)
}

/// A switch: `0` (off) or `1` (on; empty too), as the personalities read theirs.
fn on_off(name: &str) -> Result<(), HostError> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(()),
        Ok(v) if matches!(v.trim(), "0" | "1" | "") => Ok(()),
        Ok(v) => Err(HostError::Setting(format!(
            "{name}={v:?}: expected 0 (off) or 1 (on)"
        ))),
        Err(_) => Err(HostError::Setting(format!("{name}: not valid UTF-8"))),
    }
}

/// The table, by scope.
pub const VARS: &[Var] = &[
    checked(
        "VOLLEY_FABRIC",
        Scope::Job,
        "shm | udp | eth",
        "The fabric a rank opens (default shm).",
        || crate::Fabric::from_env().map(drop),
    ),
    var(
        "VOLLEY_RANK",
        Scope::Job,
        "0 to SIZE-1",
        "This rank's number (set by `volley run`; mpiexec and srun have their own).",
    ),
    var(
        "VOLLEY_SIZE",
        Scope::Job,
        "1 to 65535",
        "The job's number of ranks (set with VOLLEY_RANK).",
    ),
    var(
        "VOLLEY_JOB",
        Scope::Job,
        "decimal or 0x-hex",
        "The job id every rank of a job shares (default: derived from the launcher).",
    ),
    var(
        "VOLLEY_HOSTS",
        Scope::Job,
        "host[:N][=MAC],...",
        "The hosts list: a rank's number is its place in it (one entry per rank).",
    ),
    checked(
        "VOLLEY_LOCAL_RANK",
        Scope::Job,
        "0 to 65535",
        "This rank's index among the ranks of its host (hosts lists with :N).",
        || int("VOLLEY_LOCAL_RANK", 0, 65_535),
    ),
    Var {
        secret: true,
        ..var(
            "VOLLEY_SECRET",
            Scope::Job,
            "32 hex digits",
            "The job's key, handed to its ranks by `volley run` (never on a command line).",
        )
    },
    var(
        "VOLLEY_KEY_FILE",
        Scope::Job,
        "path",
        "A file (mode 600, yours) holding the job's key, for jobs started by hand.",
    ),
    checked(
        "VOLLEY_VERBOSE",
        Scope::Job,
        "0 | 1",
        "1: each rank says how it found its rank, size and host.",
        || int("VOLLEY_VERBOSE", 0, 1),
    ),
    checked(
        "VOLLEY_PEER_TIMEOUT",
        Scope::Engine,
        "seconds, 0.1 to 86400",
        "Silence after which a peer is declared dead (default 30).",
        || crate::node::peer_timeout().map(drop),
    ),
    checked(
        "VOLLEY_STARTUP_TIMEOUT",
        Scope::Engine,
        "seconds, 0.001 to 86400",
        "How long a rank waits for the others to start (default 30).",
        || secs("VOLLEY_STARTUP_TIMEOUT", 0.001, 86_400.0),
    ),
    checked(
        "VOLLEY_BARRIER",
        Scope::Engine,
        "device | frames",
        "The barrier: in NIC memory where the fabric has it, or frames everywhere.",
        || crate::node::device_barrier().map(drop),
    ),
    checked(
        "VOLLEY_BCAST",
        Scope::Engine,
        "binomial | binary | chain | flat",
        "The tree a broadcast travels where no board reaches the group.",
        || crate::node::bcast_tree().map(drop),
    ),
    checked(
        "VOLLEY_GROUPS",
        Scope::Engine,
        "sizes, e.g. 2,2",
        "The job's process groups, by size (default: one group of every rank).",
        || {
            let Ok(spec) = std::env::var("VOLLEY_GROUPS") else {
                return Ok(());
            };
            match spec
                .split(',')
                .all(|s| s.trim().parse::<u16>().is_ok_and(|n| n > 0))
            {
                true => Ok(()),
                false => Err(HostError::Setting(format!(
                    "VOLLEY_GROUPS={spec:?}: sizes expected (2,2)"
                ))),
            }
        },
    ),
    checked(
        "VOLLEY_PCAP",
        Scope::Engine,
        "directory",
        "Each rank writes the frames it sends and receives to DIR/<job>-<rank>.pcap (core/wireshark/volley.lua reads them).",
        || match std::env::var_os("VOLLEY_PCAP") {
            Some(d) if !std::path::Path::new(&d).is_dir() => Err(HostError::Setting(format!(
                "VOLLEY_PCAP={}: not a directory",
                std::path::Path::new(&d).display()
            ))),
            _ => Ok(()),
        },
    ),
    checked(
        "VOLLEY_CLOCK",
        Scope::Engine,
        "tsc | std",
        "The clock: the processor's counter where invariant, or the system's.",
        crate::clock::check_setting,
    ),
    var(
        "VOLLEY_SHM_DIR",
        Scope::Shm,
        "path",
        "The tmpfs directory job regions are made in (default /dev/shm).",
    ),
    checked(
        "VOLLEY_SHM_SLOTS",
        Scope::Shm,
        "power of two, 2 to 65536",
        "Slots in each ring between two ranks.",
        || crate::node::shm_options().map(drop),
    ),
    checked(
        "VOLLEY_SHM_SLOT_SIZE",
        Scope::Shm,
        "multiple of 64, 128 to 1048576",
        "Bytes per ring slot (the largest frame).",
        || crate::node::shm_options().map(drop),
    ),
    checked(
        "VOLLEY_SHM_COPY",
        Scope::Shm,
        "auto | cached | streaming",
        "How large messages are copied into and out of the rings.",
        || crate::stream_copy::CopyMode::from_env().map(drop),
    ),
    checked(
        "VOLLEY_PORT",
        Scope::Udp,
        "1024 to 65535",
        "The job's first UDP port; rank r uses PORT + r (default: from the job id).",
        || int("VOLLEY_PORT", 1024, 65_535),
    ),
    var(
        "VOLLEY_UDP_PEERS",
        Scope::Udp,
        "addr:port,...",
        "Every rank's socket address, in rank order (instead of a hosts list).",
    ),
    var(
        "VOLLEY_UDP_BIND",
        Scope::Udp,
        "addr:port",
        "The address this rank's socket binds (default: its entry's).",
    ),
    checked(
        "VOLLEY_UDP_MTU",
        Scope::Udp,
        "256 to 65507",
        "The largest datagram sent (default: the path's).",
        || int("VOLLEY_UDP_MTU", 256, crate::udp::MAX_DATAGRAM as u64),
    ),
    checked(
        "VOLLEY_UDP_GSO",
        Scope::Udp,
        "0 | 1",
        "0: one datagram per send (no segmentation offload).",
        || int("VOLLEY_UDP_GSO", 0, 1),
    ),
    checked(
        "VOLLEY_UDP_ANY_SOURCE",
        Scope::Udp,
        "0 | 1",
        "1: take authenticated datagrams from any source address (NAT).",
        || int("VOLLEY_UDP_ANY_SOURCE", 0, 1),
    ),
    var(
        "VOLLEY_ETH_IF",
        Scope::Eth,
        "if or if0,if1,...",
        "The interface (one for all ranks, or one per rank) raw frames use.",
    ),
    var(
        "VOLLEY_ETH_MACS",
        Scope::Eth,
        "MAC,...",
        "Every rank's MAC address, in rank order (default: learnt at start-up).",
    ),
    var(
        "VOLLEY_ETH_MTU",
        Scope::Eth,
        "bytes, up to the interface's",
        "The largest frame sent (default: the interface's MTU).",
    ),
    checked(
        "VOLLEY_ETH_XDP",
        Scope::Eth,
        "off | on | auto",
        "AF_XDP sockets instead of packet rings (auto: where they work).",
        || crate::eth::xdp_setting().map(drop),
    ),
    checked(
        "VOLLEY_CHEETAH_DIRECT",
        Scope::Api,
        "0 | 1",
        "0: Cheetah's same-host puts and gets go through the fabric, not memory.",
        || crate::direct::wanted().map(drop),
    ),
    checked(
        "VOLLEY_CHEETAH_STATS",
        Scope::Api,
        "0 | 1",
        "1: cheetah_core_finalize prints the library's counters.",
        || on_off("VOLLEY_CHEETAH_STATS"),
    ),
    checked(
        "VOLLEY_QNIX_NIC",
        Scope::Api,
        "0 | 1",
        "0: no QNIX NIC thread; the NIC's work is done inside calls only.",
        || on_off("VOLLEY_QNIX_NIC"),
    ),
    var(
        "VOLLEY_UNIKERNEL_IMAGE",
        Scope::Unikernel,
        "path",
        "The image unikernel ranks boot (default: built from the source tree).",
    ),
    var(
        "VOLLEY_QEMU_ACCEL",
        Scope::Unikernel,
        "tcg | kvm",
        "QEMU's accelerator for unikernel ranks (default tcg).",
    ),
    var(
        "VOLLEY_MESSAGES",
        Scope::Programs,
        "count",
        "flowctl-exact: messages sent (default 300).",
    ),
    var(
        "VOLLEY_COMPUTE",
        Scope::Programs,
        "seconds",
        "compute: how long each worker computes without calling in.",
    ),
    var(
        "VOLLEY_VICTIM",
        Scope::Programs,
        "rank",
        "victim: the rank that kills itself (default the last).",
    ),
    var(
        "VOLLEY_VICTIM_MODE",
        Scope::Programs,
        "send | sync | bcast",
        "victim: what the survivors do meanwhile.",
    ),
    var(
        "VOLLEY_SEED",
        Scope::Tests,
        "integer",
        "The simulator tests' seed (printed on failure).",
    ),
    var(
        "VOLLEY_TEST_SEED",
        Scope::Tests,
        "integer",
        "The hosts tests' seed.",
    ),
    var(
        "VOLLEY_FUZZ_SECS",
        Scope::Tests,
        "seconds",
        "How long the engine fuzz test runs.",
    ),
    var(
        "VOLLEY_HOSTS_RUNS",
        Scope::Tests,
        "count",
        "How many times the hosts tests run each job.",
    ),
    var(
        "VOLLEY_BENCH_NODES",
        Scope::Tests,
        "2 to 64",
        "The node count of the NIC model's benchmark region.",
    ),
    var(
        "VOLLEY_WAKEUP_PEER",
        Scope::Tests,
        "job,fabric",
        "Set by the wake-up test for the peer process it starts.",
    ),
];

/// The table's entry for `name`.
pub fn lookup(name: &str) -> Option<&'static Var> {
    VARS.iter().find(|v| v.name == name)
}

/// Checks the value of every variable of the table that is set and can be checked
/// without the job: the first bad one, as one line.
pub fn check_env() -> Result<(), HostError> {
    for v in VARS {
        if let Some(check) = v.check {
            if std::env::var_os(v.name).is_some() {
                check()?;
            }
        }
    }
    Ok(())
}

/// The `VOLLEY_*` names in `names` that the table does not hold, each with the
/// closest name it does hold, where one is close (a misspelling).
pub fn unknown<'n>(
    names: impl IntoIterator<Item = &'n str>,
) -> Vec<(String, Option<&'static str>)> {
    let mut out: Vec<(String, Option<&'static str>)> = names
        .into_iter()
        .filter(|n| n.starts_with("VOLLEY_") && lookup(n).is_none())
        .map(|n| (n.to_owned(), closest(n)))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The table's name nearest `name`, if at most a quarter of its letters differ.
fn closest(name: &str) -> Option<&'static str> {
    VARS.iter()
        .map(|v| (edit_distance(name, v.name), v.name))
        .filter(|&(d, n)| d <= (n.len() / 4).max(2))
        .min()
        .map(|(_, n)| n)
}

/// Levenshtein distance, over bytes (the names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &y) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diag + usize::from(x != y));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The warning about `name`, an unknown variable.
pub fn unknown_line(name: &str, near: Option<&str>) -> String {
    match near {
        Some(n) => format!("volley: warning: {name} is not a Volley setting and is ignored (did you mean {n}?)"),
        None => format!("volley: warning: {name} is not a Volley setting and is ignored (`volley info --help` lists them)"),
    }
}

/// Warns on stderr, once per process, about each unknown `VOLLEY_*` variable in the
/// environment. Called by rank 0 of a job, so that a job says it once.
pub fn warn_unknown() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let names: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        for (name, near) in unknown(names.iter().map(String::as_str)) {
            eprintln!("{}", unknown_line(&name, near));
        }
    });
}

/// The table as text, a line per variable, grouped by scope.
pub fn table() -> String {
    let width = VARS.iter().map(|v| v.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    let mut scope = None;
    for v in VARS {
        if scope != Some(v.scope) {
            out.push_str(&format!("\n[{}]\n", v.scope.name()));
            scope = Some(v.scope);
        }
        out.push_str(&format!(
            "  {:width$}  {}  ({})\n",
            v.name, v.about, v.values
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_name_is_unknown_and_gets_the_nearest() {
        let got = unknown([
            "VOLLEY_FABRICS",
            "VOLLEY_FABRIC",
            "PATH",
            "VOLLEY_UPD_MTU",
            "VOLLEY_ZZZZZZZZZZZZ",
        ]);
        assert_eq!(
            got,
            vec![
                ("VOLLEY_FABRICS".to_owned(), Some("VOLLEY_FABRIC")),
                ("VOLLEY_UPD_MTU".to_owned(), Some("VOLLEY_UDP_MTU")),
                ("VOLLEY_ZZZZZZZZZZZZ".to_owned(), None),
            ]
        );
        assert!(unknown_line("VOLLEY_FABRICS", Some("VOLLEY_FABRIC"))
            .contains("did you mean VOLLEY_FABRIC?"));
    }

    #[test]
    fn names_are_unique_and_the_table_lists_each() {
        for (i, v) in VARS.iter().enumerate() {
            assert!(v.name.starts_with("VOLLEY_"), "{}", v.name);
            assert!(
                VARS[..i].iter().all(|w| w.name != v.name),
                "{} twice",
                v.name
            );
        }
        let t = table();
        assert!(VARS.iter().all(|v| t.contains(v.name)));
    }

    /// Every `"VOLLEY_..."` name the workspace's sources read is in the table: a
    /// new setting without an entry would be warned about as unknown.
    #[test]
    fn every_name_the_sources_read_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut missing = Vec::new();
        let mut files = 0;
        let mut stack = vec![
            root.join("core"),
            root.join("drivers"),
            root.join("targets"),
            root.join("tests"),
            root.join("unikernel"),
        ];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    if p.file_name().is_some_and(|n| n != "target") {
                        stack.push(p);
                    }
                    continue;
                }
                // This file spells wrong names on purpose.
                if p.extension().is_none_or(|x| x != "rs") || p.ends_with("hosted/src/vars.rs") {
                    continue;
                }
                files += 1;
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, _) in text.match_indices("\"VOLLEY_") {
                    let name: String = text[i + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    // A prefix under construction (`"VOLLEY_" + ...`) names nothing.
                    if name.ends_with('_') || !text[i + 1 + name.len()..].starts_with('"') {
                        continue;
                    }
                    if lookup(&name).is_none() {
                        missing.push(format!("{name} ({})", p.display()));
                    }
                }
            }
        }
        assert!(files > 100, "sources not found under {}", root.display());
        assert!(missing.is_empty(), "not in the table: {missing:?}");
    }
}

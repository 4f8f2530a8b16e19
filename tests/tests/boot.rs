//! One node: boots, reports, and its faults become failures with their message.

use std::time::Duration;

use volley_qemu::{run, Boot, Verdict};

fn boot(cmdline: &str) -> volley_qemu::Outcome {
    let mut b = Boot::new(cmdline);
    b.timeout = Duration::from_secs(60);
    run(&b)
}

#[test]
fn a_node_boots_and_exits_with_success() {
    let o = boot("test=ok");
    assert_eq!(o.verdict, Verdict::Success, "{}", o.console);
    assert!(
        o.console
            .contains("volley unikernel: booted, cmdline \"test=ok\""),
        "{}",
        o.console
    );
    assert!(o.console.contains("test ok"), "{}", o.console);
    // The heap comes from the PVH memory map: most of the 128 MiB the harness gives.
    let heap: u64 = o
        .console
        .lines()
        .find_map(|l| l.split("heap ").nth(1)?.split(" MiB").next()?.parse().ok())
        .unwrap_or_else(|| panic!("no heap line: {}", o.console));
    assert!((64..128).contains(&heap), "heap of {heap} MiB");
}

#[test]
fn an_unknown_fabric_is_refused() {
    let o = boot("app=pingpong rank=0 macs=52:54:00:00:00:01 fabric=myri");
    assert_eq!(o.verdict, Verdict::Failure, "{}", o.console);
    assert!(
        o.console.contains(
            "fabric \"myri\" is not available (ethernet, e1000, e1000e, tulip, udp and ivshmem are)"
        ),
        "{}",
        o.console
    );
}

/// A setting out of its range is one line naming it and its range, on every fabric.
#[test]
fn a_startup_out_of_range_is_refused() {
    let o = boot("app=pingpong rank=0 macs=52:54:00:00:00:01 startup=0");
    assert_eq!(o.verdict, Verdict::Failure, "{}", o.console);
    assert!(
        o.console
            .contains("volley unikernel: startup= takes seconds, 1 to 3600"),
        "{}",
        o.console
    );
    assert!(!o.console.contains("first sync"), "{}", o.console);
}

#[test]
fn a_panic_is_a_failure_with_its_message() {
    let o = boot("test=panic");
    assert_eq!(o.verdict, Verdict::Failure, "{}", o.console);
    assert!(o.console.contains("PANIC: panicked at"), "{}", o.console);
    assert!(
        o.console
            .contains("deliberate panic requested on the command line"),
        "{}",
        o.console
    );
}

/// The page below the stack is unmapped: an overflow faults instead of writing over
/// the page tables below it (which a 64 KiB stack once did, silently).
#[test]
fn the_page_below_the_stack_is_a_guard() {
    let o = boot("test=guard");
    assert_eq!(o.verdict, Verdict::Failure, "{}", o.console);
    let guard = o
        .console
        .lines()
        .find_map(|l| l.split("stack guard page at ").nth(1))
        .unwrap_or_else(|| panic!("no guard address: {}", o.console))
        .trim()
        .to_owned();
    assert!(
        o.console.contains("EXCEPTION 14 (page fault) error 0x2"),
        "{}",
        o.console
    );
    assert!(o.console.contains(&format!("cr2 {guard}")), "{}", o.console);
    assert!(!o.console.contains("is writable"), "{}", o.console);
}

#[test]
fn a_cpu_exception_is_a_failure_with_its_name() {
    let o = boot("test=fault");
    assert_eq!(o.verdict, Verdict::Failure, "{}", o.console);
    assert!(
        o.console.contains("EXCEPTION 6 (invalid opcode)"),
        "{}",
        o.console
    );
}

#[test]
fn an_unknown_request_is_a_failure() {
    let o = boot("test=nonsense");
    assert_eq!(o.verdict, Verdict::Failure, "{}", o.console);
    assert!(
        o.console.contains("unknown test \"nonsense\""),
        "{}",
        o.console
    );
}

#[test]
fn a_kernel_that_never_reports_times_out_and_qemu_is_killed() {
    // Without the exit device the verdict never comes: the harness must stop QEMU.
    let mut b = Boot::new("test=ok");
    b.timeout = Duration::from_secs(3);
    b.exit_device = false;
    let o = run(&b);
    // The kernel's write to 0xf4 hits nothing; it halts; the harness times out.
    assert_eq!(o.verdict, Verdict::Timeout, "{}", o.console);
    assert!(o.took < Duration::from_secs(10));
    assert!(o.console.contains("test ok"), "{}", o.console);
}

#[test]
fn the_tsc_is_calibrated_against_the_pit() {
    let o = boot("test=tsc");
    assert_eq!(o.verdict, Verdict::Success, "{}", o.console);
    let mhz: u64 = o
        .console
        .lines()
        .find_map(|l| {
            l.strip_prefix("volley unikernel: tsc ")?
                .strip_suffix(" MHz")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no TSC line: {}", o.console));
    assert!((100..20_000).contains(&mhz), "{mhz} MHz");
}

#[test]
fn pci_enumeration_maps_the_e1000_and_reads_its_mac_from_the_nic() {
    // A MAC nobody could have hard-coded: it changes with every run.
    let salt = std::process::id() as u8;
    let mac = format!("52:54:00:{:02x}:{:02x}:{:02x}", salt, salt ^ 0x5a, 0x11);
    let mut b = Boot::new("test=pci");
    b.extra = [
        "-netdev",
        "hubport,id=n0,hubid=0",
        "-device",
        &format!("e1000,netdev=n0,mac={mac}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let o = run(&b);
    assert_eq!(o.verdict, Verdict::Success, "{}", o.console);
    assert!(
        o.console.contains("pci 00:02.0 8086:100e class 02"),
        "{}",
        o.console
    );
    // qboot assigns no BARs: the kernel did, at the bottom of the PCI hole.
    assert!(
        o.console
            .contains(&format!("e1000 bar0 0xc0000000 (128 KiB) mac {mac}")),
        "{}",
        o.console
    );
    // Without a NIC the scan finds none and says so with a failure.
    let o = boot("test=pci");
    assert_eq!(o.verdict, Verdict::Failure, "{}", o.console);
    assert!(!o.console.contains("e1000 bar0"), "{}", o.console);
}

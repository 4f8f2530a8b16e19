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

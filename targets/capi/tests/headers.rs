//! The headers compile cleanly as C99 and C++, and every function and variable they
//! declare is exported by libvolley with the signature the Rust side defines.
//!
//! The Rust signatures below are checked by the compiler (each function is coerced
//! to a pointer of exactly that type); their C spelling is then compared with the
//! prototype parsed from the header.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_long, c_uchar, c_ulong, c_ushort, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

use std::ffi::c_uint;

use volley_capi::cheetah;
use volley_capi::lfc::CUpcall;
use volley_capi::{CHandler, Time586};

fn include() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

const HEADERS: [&str; 6] = [
    "gamma.h",
    "linux/gamma/libgamma.h",
    "lfc.h",
    "cheetah_core.h",
    "qnix.h",
    "volley.h",
];

/// Declared by a header for the program to define, not by the library.
const PROGRAM_DEFINES: [&str; 1] = ["lfc_upcall"];

#[test]
fn headers_compile_as_strict_c99_and_as_cpp() {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for h in HEADERS {
        let src = tmp.join("header-check.c");
        std::fs::write(
            &src,
            format!("#include <{h}>\nint main(void) {{ return 0; }}\n"),
        )
        .unwrap();
        for (cc, std) in [("cc", "-std=c99"), ("c++", "-std=c++11")] {
            let mut cmd = Command::new(cc);
            cmd.args([
                std,
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
            ]);
            if cc == "c++" {
                cmd.args(["-x", "c++"]);
            }
            let o = cmd
                .arg("-I")
                .arg(include())
                .arg(&src)
                .output()
                .unwrap_or_else(|e| panic!("{cc} does not run ({e}): install gcc and g++"));
            assert!(
                o.status.success(),
                "{cc} {std} {h}:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// C spelling of a Rust FFI type as written in the signatures below.
fn c_type(rust: &str) -> String {
    let t: String = rust.chars().filter(|c| !c.is_whitespace()).collect();
    match t.as_str() {
        "c_int" => "int",
        "c_uchar" => "unsigned char",
        "c_ushort" => "unsigned short",
        "c_ulong" => "unsigned long",
        "c_uint" => "unsigned",
        "usize" => "size_t",
        "*mutc_uint" => "unsigned *",
        "*mutc_int" => "int *",
        "*mutc_char" => "char *",
        "*constc_void" => "const void *",
        "*mutlibc::FILE" => "FILE *",
        "Option<CUpcall>" => "volley_lfc_upcall_t",
        "f64" => "double",
        "()" => "void",
        "*mutc_void" => "void *",
        "*mut*mutc_char" => "char **",
        "Option<CHandler>" => "void (*)(void)",
        "Option<cheetah::CHandler>" => "void (*)(int who, int tag, void *buffer, int length)",
        "c_long" => "long",
        "*mutc_ulong" => "unsigned long *",
        "*mut*mutc_int" => "int **",
        "*constc_char" => "const char *",
        // `time_586` is an array type: as a parameter it is a pointer to its element.
        "*mutTime586" | "*constTime586" => "time_586",
        other => panic!("no C spelling for {other}"),
    }
    .to_owned()
}

macro_rules! signatures {
    ($($name:ident : ($($arg:ty),*) -> $ret:ty;)*) => {{
        let mut m = BTreeMap::new();
        $(
            let _checked: unsafe extern "C" fn($($arg),*) -> $ret = volley_capi::$name;
            let args: Vec<String> = vec![$(c_type(stringify!($arg))),*];
            m.insert(stringify!($name).to_owned(), (c_type(stringify!($ret)), args));
        )*
        m
    }};
}

type Sig = (String, Vec<String>);

fn rust_signatures() -> BTreeMap<String, Sig> {
    signatures! {
        gamma_init: (c_int, c_int, *mut *mut c_char) -> c_int;
        gamma_exit: () -> c_int;
        gamma_abort: () -> ();
        gamma_set_active_port: (c_uchar, c_uchar, c_uchar, c_uchar, Option<CHandler>,
            Option<CHandler>, c_uchar, c_uchar, *mut c_void, c_ulong) -> c_int;
        gamma_set_passive_port: (c_uchar, c_uchar, c_uchar, c_uchar, c_uchar, c_uchar,
            *mut c_void, c_ulong) -> c_int;
        gamma_post_recv: (c_uchar, *mut c_void, c_ulong) -> c_int;
        gamma_attach_buffer: (c_uchar, *mut c_void) -> c_int;
        gamma_send: (c_uchar, *mut c_void, c_ulong) -> c_int;
        gamma_send_flowctl: (c_uchar, *mut c_void, c_ulong) -> c_int;
        gamma_isend: (c_uchar, *mut c_void, c_ulong) -> c_int;
        gamma_isend_flowctl: (c_uchar, *mut c_void, c_ulong) -> c_int;
        gamma_send_2p: (c_uchar, *mut c_void, c_ulong, *mut c_void, c_ulong) -> c_int;
        gamma_send_2p_flowctl: (c_uchar, *mut c_void, c_ulong, *mut c_void, c_ulong) -> c_int;
        gamma_isend_2p: (c_uchar, *mut c_void, c_ulong, *mut c_void, c_ulong) -> c_int;
        gamma_isend_2p_flowctl: (c_uchar, *mut c_void, c_ulong, *mut c_void, c_ulong) -> c_int;
        gamma_wsend: (c_ulong) -> c_int;
        gamma_tsend: (c_ulong) -> c_int;
        gamma_signal: (c_uchar) -> c_int;
        gamma_sigerr: (c_uchar) -> c_int;
        gamma_wait: (c_uchar, c_ulong) -> c_int;
        gamma_test: (c_uchar) -> c_int;
        gamma_atomic: (Option<CHandler>) -> c_int;
        gamma_sync: () -> c_int;
        gamma_my_par_pid: () -> c_int;
        gamma_my_node: () -> c_int;
        gamma_how_many_nodes: () -> c_int;
        gamma_mlock: (*mut c_void, c_ulong) -> c_int;
        gamma_munlock: (*mut c_void, c_ulong) -> c_int;
        gamma_munlockall: () -> c_int;
        gamma_time: (*mut Time586) -> ();
        gamma_time_diff: (*const Time586, *const Time586) -> f64;
        volley_libgamma_set_active_port: (c_ushort, c_ushort, c_uchar, c_ushort,
            Option<CHandler>, c_ushort, c_uchar, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_set_passive_port: (c_ushort, c_ushort, c_uchar, c_ushort, c_ushort,
            c_uchar, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_post_recv: (c_ushort, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_attach_buffer: (c_ushort, *mut c_void) -> c_int;
        volley_libgamma_send: (c_ushort, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_send_flowctl: (c_ushort, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_isend: (c_ushort, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_isend_flowctl: (c_ushort, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_send_2p: (c_ushort, *mut c_void, c_ulong, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_send_2p_flowctl: (c_ushort, *mut c_void, c_ulong, *mut c_void,
            c_ulong) -> c_int;
        volley_libgamma_isend_2p: (c_ushort, *mut c_void, c_ulong, *mut c_void, c_ulong) -> c_int;
        volley_libgamma_isend_2p_flowctl: (c_ushort, *mut c_void, c_ulong, *mut c_void,
            c_ulong) -> c_int;
        volley_libgamma_signal: (c_ushort) -> c_int;
        volley_libgamma_sigerr: (c_ushort) -> c_int;
        volley_libgamma_wait: (c_ushort, c_ulong) -> c_int;
        volley_libgamma_test: (c_ushort) -> c_int;
        volley_lfc_init: (*mut c_int, *mut *mut c_char, Option<CUpcall>) -> ();
        lfc_group_create: (*mut c_uint, c_uint) -> c_int;
        lfc_start: () -> ();
        lfc_exit: () -> ();
        lfc_my_proc: () -> c_uint;
        lfc_nr_procs: () -> c_uint;
        lfc_packet_size: () -> c_uint;
        lfc_print_config: () -> ();
        lfc_send_alloc: (c_int) -> *mut c_void;
        lfc_ucast_launch: (c_uint, *mut c_void, c_uint, c_int) -> ();
        lfc_mcast_launch: (c_int, *mut c_void, c_uint, c_int) -> ();
        lfc_bcast_launch: (*mut c_void, c_uint, c_int) -> ();
        lfc_memcpy: (*mut c_void, *const c_void, usize) -> *mut c_void;
        lfc_poll: () -> ();
        lfc_packet_free: (*mut c_void) -> ();
        lfc_intr_disable: () -> ();
        lfc_intr_enable: () -> ();
        lfc_intr_status: () -> c_int;
        lfc_malloc: (usize) -> *mut c_void;
        lfc_calloc: (usize, usize) -> *mut c_void;
        lfc_realloc: (*mut c_void, usize) -> *mut c_void;
        lfc_free: (*mut c_void) -> ();
        lfc_timer_start: () -> ();
        lfc_timer_stop: () -> ();
        lfc_timer_elapsed: () -> f64;
        lfc_timer_delta: (c_uint) -> ();
        lfc_fetch_and_add: (c_uint, c_int) -> c_uint;
        lfc_stats_reset: () -> ();
        lfc_stats_create: () -> c_int;
        lfc_stats_gather: (c_int) -> ();
        lfc_stats_dump: (*mut libc::FILE, c_int, *mut c_char, *mut c_char) -> ();
        cheetah_core_setup: (*mut c_int, *mut c_void) -> ();
        cheetah_core_finalize: () -> ();
        cheetah_core_ncontexts: () -> c_int;
        cheetah_core_mycontext: () -> c_int;
        cheetah_core_put: (c_int, *mut c_void, *mut c_void, c_int, *mut c_int, *mut c_int) -> ();
        cheetah_core_get: (c_int, *mut c_void, *mut c_void, c_int, *mut c_int, *mut c_int) -> ();
        cheetah_core_register: (c_int, Option<cheetah::CHandler>) -> ();
        cheetah_core_ainvoke: (c_int, c_int, *mut c_void, c_int, *mut c_int) -> ();
        cheetah_core_poll: () -> ();
        cheetah_core_wait: (*mut c_int, c_int) -> ();
        cheetah_core_barrier: () -> ();
        cheetah_core_expose: (*mut c_void, c_long) -> c_int;
        qx_init: (*mut c_int, c_int, c_int) -> *mut c_void;
        qx_buffer_lock: (*mut c_char, c_long) -> c_int;
        qx_buffer_unlock: (*mut c_char, c_long) -> c_int;
        qx_buffer_pool: (c_int) -> c_int;
        qx_buffer_translate: (*mut c_char, c_long, *mut c_ulong) -> c_int;
        qx_send_context: (*mut c_int, c_int, c_int, c_int, c_long, c_int, *mut c_ulong) -> c_int;
        qx_recv_context: (*mut c_int, c_int, c_int, c_int, c_long, c_int, *mut c_ulong) -> c_int;
        qx_send: (c_int) -> c_int;
        qx_send_short: (c_int) -> c_int;
        qx_broadcast: (c_int, c_int) -> c_int;
        qx_broadcast_short: (c_int, c_int) -> c_int;
        qx_multicast: (c_int, c_int, *mut *mut c_int) -> c_int;
        qx_multicast_short: (c_int, c_int, *mut *mut c_int) -> c_int;
        qx_receive: (c_int) -> c_int;
        qx_join_group: (c_int, c_int, c_int) -> c_int;
        qx_barrier: (c_int, c_int, c_int) -> c_int;
        qx_poll_for_send: (c_int) -> c_int;
        qx_poll_for_receive: (c_int) -> c_int;
        qx_end: (*mut c_int) -> c_int;
        qx_strerror: (c_int) -> *const c_char;
        qx_last_error: () -> c_int;
        volley_wakeup_fd: () -> c_int;
        volley_arm: () -> c_int;
    }
}

/// The exported variables and their C types (checked by size below).
fn rust_variables() -> BTreeMap<&'static str, (&'static str, usize)> {
    BTreeMap::from([
        (
            "gamma_active_port",
            (
                "unsigned char",
                size_of_val(&volley_capi::gamma_active_port),
            ),
        ),
        (
            "volley_libgamma_active_port",
            (
                "unsigned short",
                size_of_val(&volley_capi::volley_libgamma_active_port),
            ),
        ),
        (
            "gamma_errno",
            ("unsigned char", size_of_val(&volley_capi::gamma_errno)),
        ),
        (
            "gamma_msglen",
            ("long", size_of_val(&volley_capi::gamma_msglen)),
        ),
    ])
}

/// Removes the parameter name from one C parameter declaration.
fn param_type(p: &str) -> String {
    let p = p.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(open) = p.find("(*") {
        // A function pointer: `ret (*name)(args)`.
        let close = p[open..].find(')').map_or(p.len(), |c| open + c);
        return format!("{}(*){}", &p[..open], &p[close + 1..]).replace("  ", " ");
    }
    if p == "void" {
        return p;
    }
    let split = p
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    let ty = p[..split].trim_end();
    // `void *data` -> `void *`, `char **argv` -> `char **`.
    match ty.find('*') {
        Some(star) => format!("{} {}", ty[..star].trim_end(), &ty[star..]),
        None => ty.to_owned(),
    }
}

struct Header {
    functions: BTreeMap<String, Sig>,
    variables: BTreeMap<String, String>,
}

/// Parses our own hand-written headers: `#define a b` renames, `extern` variables,
/// and prototypes ending in `;` (possibly across lines).
fn parse(text: &str) -> Header {
    let mut renames = BTreeMap::new();
    let mut decls = Vec::new();
    let mut cur = String::new();
    let mut in_comment = false;
    for line in text.lines() {
        let line = line.trim();
        if in_comment {
            in_comment = !line.contains("*/");
            continue;
        }
        if line.starts_with("/*") {
            in_comment = !line.contains("*/");
            continue;
        }
        if let Some(rest) = line.strip_prefix("#define ") {
            let parts: Vec<&str> = rest.split_whitespace().collect();
            if parts.len() == 2 && parts[1].starts_with("volley_") {
                renames.insert(parts[0].to_owned(), parts[1].to_owned());
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() || line.starts_with("extern \"C\"") {
            continue;
        }
        cur.push(' ');
        cur.push_str(line.split("/*").next().unwrap_or(""));
        if line.ends_with(';') || line.ends_with('{') || line.ends_with('}') {
            decls.push(std::mem::take(&mut cur));
        }
    }
    let real = |n: &str| renames.get(n).cloned().unwrap_or_else(|| n.to_owned());
    let mut functions = BTreeMap::new();
    let mut variables = BTreeMap::new();
    for d in decls {
        let d = d.trim().trim_end_matches(';').trim().to_owned();
        if let Some(v) = d.strip_prefix("extern ") {
            let split = v.rfind(' ').unwrap();
            variables.insert(real(&v[split + 1..]), v[..split].to_owned());
            continue;
        }
        let Some(open) = d.find('(') else { continue };
        if d.starts_with("typedef") || d.starts_with('}') || !d.ends_with(')') {
            continue;
        }
        let head = &d[..open];
        let split = head.rfind([' ', '*']).unwrap();
        let name = head[split + 1..].to_owned();
        let ret = head[..=split].trim().to_owned();
        let inner = &d[open + 1..d.len() - 1];
        // Split on commas outside parentheses (function-pointer parameters).
        let mut args = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    args.push(param_type(&inner[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
        args.push(param_type(&inner[start..]));
        if args == ["void"] {
            args.clear();
        }
        functions.insert(real(&name), (ret, args));
    }
    Header {
        functions,
        variables,
    }
}

fn exported() -> String {
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().join("libvolley.so");
    assert!(so.exists(), "{} not built", so.display());
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("nm (binutils) runs");
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn every_declaration_is_exported_with_a_matching_signature() {
    let rust = rust_signatures();
    let vars = rust_variables();
    let nm = exported();
    let symbols: Vec<&str> = nm
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let mut covered = std::collections::BTreeSet::new();
    for h in HEADERS {
        let text = std::fs::read_to_string(include().join(h)).unwrap();
        let parsed = parse(&text);
        // Every header declares its whole API (Cheetah core's is twelve calls, QNIX's
        // nineteen and two extensions, Volley's own two).
        let least = match h {
            "cheetah_core.h" => 12,
            "qnix.h" => 21,
            "volley.h" => 2,
            _ => 30,
        };
        assert!(
            parsed.functions.len() >= least,
            "{h}: {:?}",
            parsed.functions.keys()
        );
        for (name, (ret, args)) in &parsed.functions {
            if PROGRAM_DEFINES.contains(&name.as_str()) {
                continue;
            }
            assert!(
                symbols.contains(&name.as_str()),
                "{h}: {name} is not exported"
            );
            let (rret, rargs) = rust
                .get(name)
                .unwrap_or_else(|| panic!("{h}: {name} has no Rust signature here"));
            assert_eq!((ret, args), (rret, rargs), "{h}: {name}: header vs library");
            covered.insert(name.clone());
        }
        for (name, ty) in &parsed.variables {
            assert!(
                symbols.contains(&name.as_str()),
                "{h}: {name} is not exported"
            );
            let (rty, size) = vars[name.as_str()];
            assert_eq!(ty, rty, "{h}: variable {name}");
            let c_size = match rty {
                "unsigned char" => 1,
                "unsigned short" => 2,
                _ => std::mem::size_of::<std::ffi::c_long>(),
            };
            assert_eq!(size, c_size, "{name}: size");
        }
    }
    // Every C entry point of the library is declared by some header.
    let missing: Vec<&String> = rust.keys().filter(|k| !covered.contains(*k)).collect();
    assert!(missing.is_empty(), "exported but in no header: {missing:?}");
}

#[test]
fn the_seed_api_is_complete_in_gamma_h() {
    let text = std::fs::read_to_string(include().join("gamma.h")).unwrap();
    let parsed = parse(&text);
    // Every call the 2004 document lists, plus what real programs use.
    for f in [
        "gamma_init",
        "gamma_exit",
        "gamma_set_active_port",
        "gamma_set_passive_port",
        "gamma_post_recv",
        "gamma_attach_buffer",
        "gamma_send",
        "gamma_send_flowctl",
        "gamma_send_2p",
        "gamma_send_2p_flowctl",
        "gamma_isend",
        "gamma_isend_flowctl",
        "gamma_isend_2p",
        "gamma_isend_2p_flowctl",
        "gamma_wsend",
        "gamma_tsend",
        "gamma_signal",
        "gamma_sigerr",
        "gamma_wait",
        "gamma_test",
        "gamma_atomic",
        "gamma_sync",
        "gamma_my_par_pid",
        "gamma_my_node",
        "gamma_how_many_nodes",
        "gamma_mlock",
        "gamma_munlock",
        "gamma_munlockall",
        "gamma_time",
        "gamma_time_diff",
        "gamma_abort",
    ] {
        assert!(parsed.functions.contains_key(f), "gamma.h lacks {f}");
    }
    assert_eq!(parsed.functions["gamma_set_active_port"].1.len(), 10);
    for v in ["gamma_active_port", "gamma_errno", "gamma_msglen"] {
        assert!(parsed.variables.contains_key(v), "gamma.h lacks {v}");
    }
    for c in [
        "#define BROADCAST",
        "#define GO_AHEAD",
        "#define GO_BACK",
        "#define GAMMA_ERR_FRAMELOST 2",
        "#define GAMMA_ERR_MSGTOOLONG 3",
        "#define GAMMA_ERR_SENDFAILURE 4",
    ] {
        assert!(text.contains(c), "gamma.h lacks {c}");
    }
    let later = parse(&std::fs::read_to_string(include().join("linux/gamma/libgamma.h")).unwrap());
    let (_, args) = &later.functions["volley_libgamma_set_active_port"];
    assert_eq!(args.len(), 9, "libgamma.h: one handler");
    assert_eq!(args[0], "unsigned short");
}

#[test]
fn pkg_config_finds_the_headers_and_the_library() {
    // build.rs writes volley.pc into target/<profile>/, next to the library.
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    assert!(
        profile.join("volley.pc").exists(),
        "no volley.pc in {}",
        profile.display()
    );
    let o = Command::new("pkg-config")
        .args(["--cflags", "--libs", "volley"])
        .env("PKG_CONFIG_PATH", profile)
        .output()
        .expect("pkg-config runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let flags = String::from_utf8_lossy(&o.stdout).into_owned();
    let inc = flags
        .split_whitespace()
        .find_map(|f| f.strip_prefix("-I"))
        .expect("an include path");
    assert!(Path::new(inc).join("gamma.h").exists(), "{flags}");
    assert!(
        Path::new(inc).join("linux/gamma/libgamma.h").exists(),
        "{flags}"
    );
    assert!(flags.contains("-lvolley"), "{flags}");
    assert!(
        flags.contains(&format!("-L{}", profile.display())),
        "{flags}"
    );
}

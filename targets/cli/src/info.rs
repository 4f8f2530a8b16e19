//! `volley info`: what this machine and build offer, as `fi_info` and `ucx_info`
//! tell their users. Each fabric is probed the way a rank would open it (a
//! directory to map a region in, a socket to bind, a raw socket to open), and
//! when one is not usable here the reason is said; then the limits, the version
//! and build, and every `VOLLEY_*` variable in effect.

use std::path::Path;

use serde_json::{json, Value};
use volley_hosted::vars;

/// One fabric as found here.
#[derive(Debug, Clone)]
pub struct FabricInfo {
    /// `shm`, `udp` or `eth`.
    pub name: &'static str,
    /// Whether a rank could open it here.
    pub usable: bool,
    /// Why not, or what it would use.
    pub detail: String,
    /// The most ranks of one job.
    pub max_ranks: usize,
    /// The largest frame, in bytes (for `eth`: the interface's MTU, if one is named).
    pub max_frame: Option<usize>,
}

/// What `volley info` says.
#[derive(Debug, Clone)]
pub struct Info {
    /// The fabrics.
    pub fabrics: Vec<FabricInfo>,
    /// The unikernel's image and QEMU: (what, found, detail).
    pub unikernel: Vec<(&'static str, bool, String)>,
    /// `VOLLEY_*` variables set, with their values (a secret's hidden).
    pub settings: Vec<(String, String)>,
    /// Set `VOLLEY_*` names that are no setting, each with the nearest one.
    pub unknown: Vec<(String, Option<&'static str>)>,
    /// The first bad value among the settings, if any.
    pub bad_setting: Option<String>,
}

/// Probes this machine.
pub fn gather() -> Info {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| k.starts_with("VOLLEY_"))
        .collect();
    let mut settings: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| vars::lookup(k).is_some())
        .map(|(k, v)| {
            let secret = vars::lookup(k).is_some_and(|x| x.secret);
            (
                k.clone(),
                if secret { "(hidden)".into() } else { v.clone() },
            )
        })
        .collect();
    settings.sort();
    Info {
        fabrics: vec![shm(), udp(), eth()],
        unikernel: unikernel(),
        settings,
        unknown: vars::unknown(env.iter().map(|(k, _)| k.as_str())),
        bad_setting: vars::check_env().err().map(|e| e.to_string()),
    }
}

fn shm() -> FabricInfo {
    let base = volley_hosted::shm::shm_base();
    let max_ranks = volley_hosted::shm::MAX_RANKS;
    let max_frame = Some(64 * 1024);
    let (usable, detail) = match statvfs(&base) {
        Err(e) => (
            false,
            format!("{}: {e} (set VOLLEY_SHM_DIR to a tmpfs directory)", base.display()),
        ),
        Ok((free, total)) if !writable(&base) => (
            false,
            format!(
                "{}: not writable by this user ({} free of {})",
                base.display(),
                bytes(free),
                bytes(total)
            ),
        ),
        Ok((free, total)) => (
            true,
            format!(
                "{}: {} free of {}; a job of n ranks maps about n x n x 2 MiB up to 8 ranks, n x n x 256 KiB beyond",
                base.display(),
                bytes(free),
                bytes(total)
            ),
        ),
    };
    FabricInfo {
        name: "shm",
        usable,
        detail,
        max_ranks,
        max_frame,
    }
}

fn udp() -> FabricInfo {
    let (usable, detail) = match std::net::UdpSocket::bind("127.0.0.1:0") {
        Ok(_) => (
            true,
            "UDP sockets: loopback here, other hosts by a hosts list; rank r on port VOLLEY_PORT + r".to_owned(),
        ),
        Err(e) => (false, format!("cannot bind a UDP socket on loopback: {e}")),
    };
    FabricInfo {
        name: "udp",
        usable,
        detail,
        // Ports from 1024 to 65535, one per rank.
        max_ranks: 65_536 - 1024,
        max_frame: Some(volley_hosted::udp::MAX_DATAGRAM),
    }
}

fn eth() -> FabricInfo {
    // As a rank opens it: a packet socket needs CAP_NET_RAW.
    let raw = open_socket(libc::AF_PACKET, libc::SOCK_RAW);
    let xdp = match open_socket(libc::AF_XDP, libc::SOCK_RAW) {
        Ok(()) => "AF_XDP: supported (VOLLEY_ETH_XDP=on or auto)".to_owned(),
        Err(libc::EAFNOSUPPORT) => "AF_XDP: not in this kernel".to_owned(),
        Err(libc::EPERM) | Err(libc::EACCES) => "AF_XDP: needs CAP_NET_RAW".to_owned(),
        Err(e) => format!("AF_XDP: {}", std::io::Error::from_raw_os_error(e)),
    };
    let iface = std::env::var("VOLLEY_ETH_IF").ok();
    let mtu = iface.as_deref().and_then(|list| {
        let first = list.split(',').next()?.trim();
        std::fs::read_to_string(format!("/sys/class/net/{first}/mtu"))
            .ok()?
            .trim()
            .parse::<usize>()
            .ok()
    });
    let (usable, detail) = match (raw, &iface) {
        (Err(libc::EPERM) | Err(libc::EACCES), _) => (
            false,
            format!("no CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` the program; {xdp}"),
        ),
        (Err(e), _) => (
            false,
            format!(
                "cannot open a packet socket: {}; {xdp}",
                std::io::Error::from_raw_os_error(e)
            ),
        ),
        (Ok(()), None) => (
            false,
            format!("VOLLEY_ETH_IF is not set: name the interface (or one per rank); {xdp}"),
        ),
        (Ok(()), Some(list)) => (true, format!("on {list}; {xdp}")),
    };
    FabricInfo {
        name: "eth",
        usable,
        detail,
        max_ranks: u16::MAX as usize,
        max_frame: mtu,
    }
}

fn unikernel() -> Vec<(&'static str, bool, String)> {
    let image = volley_hosted::launcher::unikernel_image_path();
    let image = match image {
        Ok(p) if p.is_file() => (true, p.display().to_string()),
        Ok(p) => (
            true,
            format!(
                "{} (built by `volley run --unikernel` from the source tree)",
                p.display()
            ),
        ),
        Err(e) => (false, e),
    };
    let qemu = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("qemu-system-x86_64").is_file()))
        .unwrap_or(false);
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    vec![
        ("image", image.0, image.1),
        (
            "qemu",
            qemu,
            if qemu {
                "qemu-system-x86_64 found".into()
            } else {
                "qemu-system-x86_64 not on PATH (Debian: qemu-system-x86)".into()
            },
        ),
        (
            "kvm",
            kvm,
            if kvm {
                "/dev/kvm usable (VOLLEY_QEMU_ACCEL=kvm)".into()
            } else {
                "/dev/kvm not usable: nodes run under TCG".into()
            },
        ),
    ]
}

/// `socket(domain, kind, 0)`, closed at once: `Err(errno)` if refused.
fn open_socket(domain: libc::c_int, kind: libc::c_int) -> Result<(), i32> {
    // SAFETY: socket(2) takes no pointers; the descriptor is closed right away.
    let fd = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: `fd` was just opened and is ours.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Free and total bytes of the file system holding `dir`.
fn statvfs(dir: &Path) -> Result<(u64, u64), std::io::Error> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a zeroed statvfs is valid to be written; `c` is a C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frag = s.f_frsize as u64;
    Ok((s.f_bavail as u64 * frag, s.f_blocks as u64 * frag))
}

fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a C string.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

fn bytes(n: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    if n as f64 >= GIB {
        format!("{:.1} GiB", n as f64 / GIB)
    } else {
        format!("{:.1} MiB", n as f64 / MIB)
    }
}

/// The build: version, profile, target.
fn build() -> (String, &'static str, String) {
    (
        env!("CARGO_PKG_VERSION").to_owned(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
    )
}

/// `info` as text.
pub fn text(info: &Info) -> String {
    let (version, profile, target) = build();
    let mut out = format!("volley {version} ({profile} build, {target})\n\nfabrics:\n");
    for f in &info.fabrics {
        let frame = f
            .max_frame
            .map_or_else(|| "-".to_owned(), |b| format!("{b} B"));
        out.push_str(&format!(
            "  {:<4} {:<10} ranks <= {:<6} frames <= {:<8} {}\n",
            f.name,
            if f.usable { "usable" } else { "not usable" },
            f.max_ranks,
            frame,
            f.detail
        ));
    }
    out.push_str("\nunikernel:\n");
    for (what, ok, detail) in &info.unikernel {
        out.push_str(&format!(
            "  {what:<6} {:<4} {detail}\n",
            if *ok { "yes" } else { "no" }
        ));
    }
    out.push_str("\nsettings in effect (`volley info --help` lists them all):\n");
    if info.settings.is_empty() {
        out.push_str("  none: every default\n");
    }
    for (k, v) in &info.settings {
        out.push_str(&format!("  {k}={v}\n"));
    }
    if let Some(e) = &info.bad_setting {
        out.push_str(&format!("  bad: {e}\n"));
    }
    for (name, near) in &info.unknown {
        out.push_str(&format!(
            "  unknown: {name}{}\n",
            near.map_or_else(String::new, |n| format!(" (did you mean {n}?)"))
        ));
    }
    out
}

/// `info` as one JSON document.
pub fn json(info: &Info) -> Value {
    let (version, profile, target) = build();
    json!({
        "version": version,
        "profile": profile,
        "target": target,
        "fabrics": info.fabrics.iter().map(|f| json!({
            "name": f.name,
            "usable": f.usable,
            "detail": f.detail,
            "max_ranks": f.max_ranks,
            "max_frame": f.max_frame,
        })).collect::<Vec<_>>(),
        "unikernel": info.unikernel.iter().map(|(w, ok, d)| json!({
            "what": w, "ok": ok, "detail": d,
        })).collect::<Vec<_>>(),
        "settings": info.settings.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
        "bad_setting": info.bad_setting,
        "unknown": info.unknown.iter().map(|(n, near)| json!({"name": n, "did_you_mean": near})).collect::<Vec<_>>(),
        "variables": vars::VARS.iter().map(|v| json!({
            "name": v.name, "scope": v.scope.name(), "values": v.values, "about": v.about,
        })).collect::<Vec<_>>(),
    })
}

/// The long help's table of every variable.
pub fn variables_help() -> String {
    format!(
        "Every VOLLEY_* variable, by who reads it:\n{}",
        vars::table()
    )
}

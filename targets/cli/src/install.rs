//! `volley install --prefix DIR`: the C library as a system installs it. The
//! headers (carried in this binary), the shared library under its SONAME's name
//! with the usual links (`libvolley.so.0.1.0`, `libvolley.so.0.1`, `libvolley.so`),
//! the static library, `lib/pkgconfig/volley.pc` for that prefix, the `volley`
//! command, and its manual pages.

use std::path::{Path, PathBuf};

/// The headers, by their path under `include/`.
pub const HEADERS: [(&str, &str); 6] = [
    ("gamma.h", include_str!("../../capi/include/gamma.h")),
    (
        "linux/gamma/libgamma.h",
        include_str!("../../capi/include/linux/gamma/libgamma.h"),
    ),
    ("lfc.h", include_str!("../../capi/include/lfc.h")),
    (
        "cheetah_core.h",
        include_str!("../../capi/include/cheetah_core.h"),
    ),
    ("qnix.h", include_str!("../../capi/include/qnix.h")),
    ("volley.h", include_str!("../../capi/include/volley.h")),
];

/// The shared library's version suffix in its SONAME (see `libvolley`'s build).
pub fn soname_version() -> String {
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    if major == "0" {
        format!("0.{}", env!("CARGO_PKG_VERSION_MINOR"))
    } else {
        major.to_owned()
    }
}

/// `volley.pc` for an installation under `prefix`.
pub fn pkg_config(prefix: &Path) -> String {
    let names: Vec<&str> = HEADERS.iter().map(|(n, _)| *n).collect();
    format!(
        "prefix={}\nexec_prefix=${{prefix}}\nincludedir=${{prefix}}/include\nlibdir=${{exec_prefix}}/lib\n\nName: volley\nDescription: Volley cluster messaging: the GAMMA, LFC, Cheetah core and QNIX APIs and Volley's extensions ({})\nVersion: {}\nCflags: -I${{includedir}}\nLibs: -L${{libdir}} -lvolley\nLibs.private: -lpthread -ldl -lm\n",
        prefix.display(),
        names.join(", "),
        env!("CARGO_PKG_VERSION"),
    )
}

/// Installs under `prefix` (inside `destdir` when staging for a package) from
/// `from`, the directory holding `libvolley.so` and `libvolley.a`. Returns the
/// files written.
pub fn install(
    prefix: &Path,
    destdir: Option<&Path>,
    from: &Path,
    man: &mut dyn FnMut(&Path) -> std::io::Result<()>,
) -> Result<Vec<PathBuf>, String> {
    if !prefix.is_absolute() {
        return Err(format!(
            "--prefix {}: an absolute path is needed",
            prefix.display()
        ));
    }
    let (so, a) = (from.join("libvolley.so"), from.join("libvolley.a"));
    for lib in [&so, &a] {
        if !lib.is_file() {
            return Err(format!(
                "{} not found: build the library first (cargo build --release -p libvolley), or name its directory with --from",
                lib.display()
            ));
        }
    }
    let root = match destdir {
        Some(d) => d.join(prefix.strip_prefix("/").unwrap_or(prefix)),
        None => prefix.to_path_buf(),
    };
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut written = Vec::new();
    let put = |written: &mut Vec<PathBuf>,
               rel: &str,
               bytes: &[u8],
               mode: u32|
     -> Result<PathBuf, String> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let p = root.join(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
        }
        // A fresh file: whatever was there (a link to elsewhere, say) is removed,
        // never written through; one that appears meanwhile is an error.
        let _ = std::fs::remove_file(&p);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&p)
            .map_err(|e| err(&p, e))?;
        f.write_all(bytes).map_err(|e| err(&p, e))?;
        // The mode asked for, whatever the umask.
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| err(&p, e))?;
        written.push(p.clone());
        Ok(p)
    };
    for (name, text) in HEADERS {
        put(
            &mut written,
            &format!("include/{name}"),
            text.as_bytes(),
            0o644,
        )?;
    }
    let read = |p: &Path| std::fs::read(p).map_err(|e| err(p, e));
    let version = env!("CARGO_PKG_VERSION");
    let sover = soname_version();
    let real = format!("libvolley.so.{version}");
    put(&mut written, &format!("lib/{real}"), &read(&so)?, 0o755)?;
    put(&mut written, "lib/libvolley.a", &read(&a)?, 0o644)?;
    for link in [format!("libvolley.so.{sover}"), "libvolley.so".to_owned()] {
        let p = root.join("lib").join(&link);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(&real, &p).map_err(|e| err(&p, e))?;
        written.push(p);
    }
    put(
        &mut written,
        "lib/pkgconfig/volley.pc",
        pkg_config(prefix).as_bytes(),
        0o644,
    )?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    put(&mut written, "bin/volley", &read(&exe)?, 0o755)?;
    let mandir = root.join("share/man/man1");
    std::fs::create_dir_all(&mandir).map_err(|e| err(&mandir, e))?;
    man(&mandir).map_err(|e| err(&mandir, e))?;
    written.push(mandir);
    Ok(written)
}

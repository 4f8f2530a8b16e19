//! The shared library's SONAME: `libvolley.so.<major>` (`libvolley.so.0.<minor>`
//! while the major version is 0, where a minor release may break the ABI), so that
//! programs linked against one release load a compatible one, as `ld.so` and
//! packagers expect. `volley install` names the file and its links to match.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let sover = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let soname = format!("libvolley.so.{sover}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    // A program linked against the build's `libvolley.so` needs the SONAME's name
    // beside it to load (the in-tree `volley.pc`, the tests): a link to the
    // library cargo is about to write there. OUT_DIR is
    // <target>/<profile>/build/<pkg>-<hash>/out.
    let Some(out) = std::env::var_os("OUT_DIR") else {
        return;
    };
    let Some(profile) = std::path::Path::new(&out).ancestors().nth(3) else {
        return;
    };
    for dir in [profile.to_path_buf(), profile.join("deps")] {
        let link = dir.join(&soname);
        if std::fs::read_link(&link).is_ok_and(|t| t == std::path::Path::new("libvolley.so")) {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        // A read-only target directory only loses the in-tree convenience.
        let _ = std::os::unix::fs::symlink("libvolley.so", &link);
    }
}

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
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvolley.so.{sover}");
    }
}

//! Writes `volley.pc` next to the library (`target/<profile>/volley.pc`), so that
//! `PKG_CONFIG_PATH=target/release pkg-config --cflags --libs volley` finds this
//! tree's headers and this build's `libvolley`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let Some(profile_dir) = out.ancestors().nth(3) else {
        return;
    };
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let pc = format!(
        "includedir={inc}\nlibdir={lib}\n\nName: volley\nDescription: Volley cluster messaging: the GAMMA, LFC, Cheetah core and QNIX APIs and Volley's extensions (gamma.h, linux/gamma/libgamma.h, lfc.h, cheetah_core.h, qnix.h, volley.h)\nVersion: {version}\nCflags: -I${{includedir}}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lvolley\nLibs.private: -lpthread -ldl -lm\n",
        inc = manifest.join("include").display(),
        lib = profile_dir.display(),
    );
    // A read-only target directory only loses the convenience file.
    let _ = std::fs::write(profile_dir.join("volley.pc"), pc);
}

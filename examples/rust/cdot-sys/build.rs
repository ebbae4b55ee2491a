//! Link the C library `ondevice_cdot`, as pkg-config describes it for the target.
//!
//! pytest-ondevice builds the library from c/ for the board and points pkg-config at its
//! .pc file (PKG_CONFIG_LIBDIR, PKG_CONFIG_SYSROOT_DIR): this script never compiles C.

fn main() {
    let lib = pkg_config::Config::new()
        .statik(true)
        .probe("ondevice-cdot")
        .unwrap_or_else(|e| panic!("pkg-config found no ondevice-cdot for {}: {e}", std::env::var("TARGET").unwrap_or_default()));
    // a rebuilt library must relink the tests, although no Rust source changed
    for dir in &lib.link_paths {
        println!("cargo:rerun-if-changed={}", dir.join("libondevice_cdot.a").display());
    }
}

//! Link the model compiled ahead of time (`ondevice_mlp`), as pkg-config describes it for the
//! target: pytest-ondevice compiles it for the board and points pkg-config at its .pc file.
//! This script compiles nothing.

fn main() {
    let lib = pkg_config::Config::new()
        .statik(true)
        .probe("ondevice-mlp")
        .unwrap_or_else(|e| panic!("pkg-config found no ondevice-mlp for {}: {e}", std::env::var("TARGET").unwrap_or_default()));
    // a recompiled model must relink the tests, although no Rust source changed
    for dir in &lib.link_paths {
        println!("cargo:rerun-if-changed={}", dir.join("libondevice_mlp.a").display());
    }
}

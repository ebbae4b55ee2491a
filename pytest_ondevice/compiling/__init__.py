"""Sources into binaries. In: a board's toolchain (config) and what a binary links (its
format's harness, ondevice.toml's sources, a crate, a model). Out: verified binaries and
objects in a content-addressed store (or cargo's), and errors naming what to install or fix.

Named for the work, not the output: build trees (`build/`, `.ondevice/build/`) are output.
"""

//! The Rust snippets of the Tessera book, as programs cargo builds: each file in
//! `examples/` is included whole by a page of `docs/`, so a snippet that stops compiling
//! fails the build rather than a reader.

//! The generator, one module per area, linked into one test binary: small OpenAPI documents
//! (`tests/fixtures/openapi/scaffold`) and GitHub's whole REST API description, whose
//! generated module (`examples/src/github.rs`) is compiled in and called against a real HTTP
//! upstream. The `sallyport scaffold` command line is tested in `sallyport-cli/tests`.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-scaffold --test integration scaffold_github::`.

mod answers;
mod scaffold;
mod scaffold_github;

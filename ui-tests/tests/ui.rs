//! Compile tests for `#[derive(Action)]`: what the macro refuses is part of the product.
//!
//! `ui/*.rs` hold one mistake each, and each `.stderr` the exact diagnostic (that no executor
//! stage can be skipped is checked by compile-fail doctests in `sallyport-kernel`'s
//! `executor` module); `ui/secrets/` tries to print
//! or serialize a secret; `ui/scaffold/` holds what `sallyport scaffold` writes. One `TestCases`
//! holds them all, so trybuild checks the dependency graph once (a second test binary made it
//! check the whole graph again).
//!
//! The cases that must compile, `ui/pass/*.rs` and `ui/scaffold/pass/*.rs`, are test targets of
//! this package instead (see its `Cargo.toml`), built with the workspace and run by `cargo test`;
//! each denies warnings. Given one passing case, trybuild builds instead of checks: it compiled
//! the whole dependency graph to machine code, with full debug info, to link three programs.
//! Regenerate the diagnostics with `TRYBUILD=overwrite cargo test -p sallyport-ui-tests --test
//! ui`, then read every changed file.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
    // Secret types cannot be serialized or displayed.
    cases.compile_fail("ui/secrets/*.rs");
    // What `sallyport scaffold` writes does not compile until each decision is made, and the
    // error names the decision and its choices (a module whose document made them is the test
    // target `scaffold-decided-by-the-document`;
    // `sallyport-scaffold/tests/integration/scaffold.rs` checks both files are the generator's).
    cases.compile_fail("ui/scaffold/*.rs");
}

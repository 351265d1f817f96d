//! Compile tests for `#[derive(Action)]`: what the macro refuses is part of the product.
//!
//! `tests/ui/*.rs` hold one mistake each, and each `.stderr` the exact diagnostic;
//! `tests/ui/pass/` must compile and run without a warning; `tests/ui/stages/*.rs` each try
//! to forge one executor stage's value outside its module. Regenerate the diagnostics with
//! `TRYBUILD=overwrite cargo test -p sallyport-tests --test ui`, then read every changed file.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
    // One per executor stage: its value cannot be built outside its module.
    cases.compile_fail("ui/stages/*.rs");
    cases.pass("ui/pass/*.rs");
}

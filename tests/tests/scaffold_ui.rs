//! Compile tests for what `sallyport scaffold` writes: a module whose decisions are still
//! `choose` does not compile, and the error names each decision and its choices; a module
//! whose decisions the document made (`x-sallyport-effect`, `-consent`, `-retry`) compiles
//! and its catalog builds. `tests/tests/scaffold.rs` checks that both files are exactly what
//! the generator writes. Regenerate the diagnostics with
//! `TRYBUILD=overwrite cargo test -p sallyport-tests --test scaffold_ui`, then read them.

#[test]
fn scaffolded_code_does_not_compile_until_each_decision_is_made() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/scaffold/*.rs");
    cases.pass("ui/scaffold/pass/*.rs");
}

//! Compile-fail tests: secret types cannot be serialized or displayed.

#[test]
fn secret_types_cannot_be_serialized_or_displayed() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/secrets/*.rs");
}

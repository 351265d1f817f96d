//! Compile tests for sallyport, kept in a package of their own.
//!
//! The cases under `ui/` are compiled by `trybuild` from `tests/ui.rs` and `tests/ui_secrets.rs`:
//! each `ui/*.rs` holds one mistake that `#[derive(Action)]` must refuse, with the exact
//! diagnostic beside it in a `.stderr` file; `ui/pass/` must compile without a warning;
//! `ui/stages/` tries to forge each executor stage's value outside its module; `ui/secrets/`
//! tries to print or serialize a secret. This library is empty: the package exists so that
//! trybuild's build of the cases depends on `sallyport-core` and serde alone.

//! Compile tests for sallyport, kept in a package of their own.
//!
//! The cases under `ui/` that must not compile are checked by `trybuild` from `tests/ui.rs`:
//! each `ui/*.rs` holds one mistake that `#[derive(Action)]` must refuse, with the exact
//! diagnostic beside it in a `.stderr` file; `ui/secrets/` tries to print or serialize a secret; `ui/scaffold/`
//! is what `sallyport scaffold` writes before its decisions are made. The cases that must
//! compile without a warning (`ui/pass/`, `ui/scaffold/pass/`) are this package's other test
//! targets. This library is empty: the package exists so that trybuild's check of the cases
//! depends on `sallyport-core` (without default features) and serde alone.

//! Only the `resolve` stage makes a `Resolved`: code outside its module cannot build one from the
//! previous stage's value (an action the catalog never looked up), so no stage can be skipped.

use sallyport_core::executor::resolve::Resolved;

fn skip(entry: std::sync::Arc<sallyport_core::catalog::Entry>) -> Resolved {
    Resolved { entry }
}

fn main() {
    let _ = skip;
}

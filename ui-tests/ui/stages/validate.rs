//! Only the `validate` stage makes a `Validated`: code outside its module cannot build one from the
//! previous stage's value (arguments nobody checked), so no stage can be skipped.

use sallyport_core::executor::validate::Validated;

fn skip(resolved: sallyport_core::executor::resolve::Resolved) -> Validated {
    Validated { entry: resolved.entry().clone() }
}

fn main() {
    let _ = skip;
}

//! Only the `authorize` stage makes a `Authorized`: code outside its module cannot build one from the
//! previous stage's value (a call whose scope nobody checked), so no stage can be skipped.

use sallyport_core::executor::authorize::Authorized;

fn skip(validated: sallyport_core::executor::validate::Validated) -> Authorized {
    Authorized { validated }
}

fn main() {
    let _ = skip;
}

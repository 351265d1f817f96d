//! Only the `normalize` stage makes a `Normalized`: code outside its module cannot build one from the
//! previous stage's value (an answer for a call never dispatched), so no stage can be skipped.

use sallyport_core::executor::normalize::Normalized;

fn skip(intended: sallyport_core::executor::intent::Intended) -> Normalized {
    Normalized { intended }
}

fn main() {
    let _ = skip;
}

//! Only the `dispatch` stage makes a `Dispatched`: code outside its module cannot build one from the
//! previous stage's value (an outcome no channel reported), so no stage can be skipped.

use sallyport_core::executor::dispatch::Dispatched;

fn skip(intended: sallyport_core::executor::intent::Intended) -> Dispatched {
    Dispatched { intended }
}

fn main() {
    let _ = skip;
}

//! Only the `dispatch` stage makes a `Dispatched`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::dispatch::Dispatched;

fn forge() -> Dispatched {
    Dispatched { intended: unimplemented!() }
}

fn main() {
    let _ = forge;
}

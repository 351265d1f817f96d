//! Only the `definition` stage makes a `Approved`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::definition::Approved;

fn forge() -> Approved {
    Approved { authorized: unimplemented!() }
}

fn main() {
    let _ = forge;
}

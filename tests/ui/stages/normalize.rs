//! Only the `normalize` stage makes a `Normalized`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::normalize::Normalized;

fn forge() -> Normalized {
    Normalized { intended: unimplemented!() }
}

fn main() {
    let _ = forge;
}

//! Only the `consent` stage makes a `Consented`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::consent::Consented;

fn forge() -> Consented {
    Consented { checked: unimplemented!() }
}

fn main() {
    let _ = forge;
}

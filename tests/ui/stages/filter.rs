//! Only the `filter` stage makes a `Filtered`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::filter::Filtered;

fn forge() -> Filtered {
    Filtered { intended: unimplemented!() }
}

fn main() {
    let _ = forge;
}

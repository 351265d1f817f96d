//! Only the `validate` stage makes a `Validated`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::validate::Validated;

fn forge() -> Validated {
    Validated { entry: unimplemented!() }
}

fn main() {
    let _ = forge;
}

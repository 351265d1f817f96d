//! Only the `resolve` stage makes a `Resolved`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::resolve::Resolved;

fn forge() -> Resolved {
    Resolved { entry: unimplemented!() }
}

fn main() {
    let _ = forge;
}

//! Only the `authorize` stage makes a `Authorized`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::authorize::Authorized;

fn forge() -> Authorized {
    Authorized { validated: unimplemented!() }
}

fn main() {
    let _ = forge;
}

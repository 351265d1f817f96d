//! Only the `vault` stage makes a `Unlocked`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::vault::Unlocked;

fn forge() -> Unlocked {
    Unlocked { approved: unimplemented!() }
}

fn main() {
    let _ = forge;
}

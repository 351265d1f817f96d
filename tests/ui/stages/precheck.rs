//! Only the `precheck` stage makes a `Checked`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::precheck::Checked;

fn forge() -> Checked {
    Checked { unlocked: unimplemented!() }
}

fn main() {
    let _ = forge;
}

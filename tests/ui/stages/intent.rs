//! Only the `intent` stage makes a `Intended`: code outside its module cannot build one, so no
//! later stage can be reached without it.
#![allow(unreachable_code)]


use sallyport_core::executor::intent::Intended;

fn forge() -> Intended {
    Intended { consented: unimplemented!() }
}

fn main() {
    let _ = forge;
}

//! Only the `intent` stage makes a `Intended`: code outside its module cannot build one from the
//! previous stage's value (an intent nobody recorded), so no stage can be skipped.

use sallyport_core::executor::intent::Intended;

fn skip(consented: sallyport_core::executor::consent::Consented) -> Intended {
    Intended { consented }
}

fn main() {
    let _ = skip;
}

//! Only the `consent` stage makes a `Consented`: code outside its module cannot build one from the
//! previous stage's value (consent nobody gave), so no stage can be skipped.

use sallyport_core::executor::consent::Consented;

fn skip(checked: sallyport_core::executor::precheck::Checked) -> Consented {
    Consented { checked }
}

fn main() {
    let _ = skip;
}

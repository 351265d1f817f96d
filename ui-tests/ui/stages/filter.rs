//! Only the `filter` stage makes a `Filtered`: code outside its module cannot build one from the
//! previous stage's value (an answer nobody scrubbed), so no stage can be skipped.

use sallyport_core::executor::filter::Filtered;

fn skip(intended: sallyport_core::executor::intent::Intended) -> Filtered {
    Filtered { intended }
}

fn main() {
    let _ = skip;
}

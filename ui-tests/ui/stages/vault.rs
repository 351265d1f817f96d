//! Only the `vault` stage makes a `Unlocked`: code outside its module cannot build one from the
//! previous stage's value (a credential nobody resolved or bound), so no stage can be skipped.

use sallyport_core::executor::vault::Unlocked;

fn skip(approved: sallyport_core::executor::definition::Approved) -> Unlocked {
    Unlocked { approved }
}

fn main() {
    let _ = skip;
}

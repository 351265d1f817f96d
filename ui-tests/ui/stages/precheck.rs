//! Only the `precheck` stage makes a `Checked`: code outside its module cannot build one from the
//! previous stage's value (preconditions nobody ran), so no stage can be skipped.

use sallyport_core::executor::precheck::Checked;

fn skip(unlocked: sallyport_core::executor::vault::Unlocked) -> Checked {
    Checked { unlocked }
}

fn main() {
    let _ = skip;
}

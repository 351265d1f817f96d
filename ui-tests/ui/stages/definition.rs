//! Only the `definition` stage makes a `Approved`: code outside its module cannot build one from the
//! previous stage's value (a definition nobody compared with the baseline), so no stage can be skipped.

use sallyport_core::executor::definition::Approved;

fn skip(authorized: sallyport_core::executor::authorize::Authorized) -> Approved {
    Approved { authorized }
}

fn main() {
    let _ = skip;
}

use sallyport_core::Sensitive;
use serde::Serialize;

#[derive(Sensitive, Serialize)]
struct Customer {
    // `drop` on a field the typed result cannot read without.
    #[sensitive(card, drop)]
    card: String,
    // A mask is text; a number cannot hold it.
    #[sensitive(phone)]
    phone: u64,
    // Names cannot be told from other text.
    #[sensitive(detect(email, name))]
    notes: String,
    // One kind per field.
    #[sensitive(email, phone)]
    contact: String,
    // A kind that does not exist.
    #[sensitive(passport)]
    passport: String,
}

fn main() {}

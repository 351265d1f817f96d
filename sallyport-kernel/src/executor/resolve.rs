//! Stage 1, resolve: the action is in the catalog, else `unknown_action`.

use std::fmt;
use std::sync::Arc;

use crate::catalog::{Catalog, Entry};
use crate::code::RefusalCode;
use crate::outcome::Refusal;

/// An action the catalog holds. Only this stage's `resolve` makes one.
pub(crate) struct Resolved {
    entry: Arc<Entry>,
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolved")
            .field("action", &self.entry.spec().name)
            .finish()
    }
}

impl Resolved {
    /// The catalog entry.
    pub(crate) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }

    pub(super) fn into_entry(self) -> Arc<Entry> {
        self.entry
    }
}

/// Looks `action` up.
pub(super) fn resolve(catalog: &Catalog, action: &str) -> Result<Resolved, Refusal> {
    match catalog.get(action) {
        Some(entry) => Ok(Resolved {
            entry: Arc::clone(entry),
        }),
        None => {
            let known: Vec<&str> = catalog.names().collect();
            Err(Refusal::new(
                RefusalCode::UnknownAction,
                format!(
                    "no action named `{action}`; available: {}",
                    known.join(", ")
                ),
            ))
        }
    }
}

//! The kernel's shared vocabulary: the limits every stage cuts its texts to, defined once.
//!
//! A leaf module: it imports nothing of the crate, so any module may name it.

/// Longest reason kept or shown: a refusal's, a precondition's, a policy's, an upstream
/// answer's and an approval decision's. The scrubber cuts shown texts at this many bytes
/// ([`crate::scrub::Scrubber::bounded`]); an approval's reason is cut at this many characters.
pub(crate) const MAX_REASON: usize = 500;

/// Longest action name kept (an agent may call any name), in the call's record and its
/// span; a span's tool-call id is cut to the same length.
pub(crate) const MAX_ACTION_NAME: usize = 128;

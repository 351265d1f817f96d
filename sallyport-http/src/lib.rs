//! The HTTP channel for sallyport (filled by its own issue).

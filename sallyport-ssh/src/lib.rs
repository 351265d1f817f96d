//! The SSH channel for sallyport (filled by its own issue).

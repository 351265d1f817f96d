//! Shared helpers for sallyport integration tests.

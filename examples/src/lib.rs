//! Shared pieces of the sallyport examples.

//! Runnable examples of oncebox; see `examples/quickstart`.

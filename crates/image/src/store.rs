//! TODO(store)

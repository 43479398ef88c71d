//! TODO(compress)

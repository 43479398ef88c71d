//! TODO(gc)

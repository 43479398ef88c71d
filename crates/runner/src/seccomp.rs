//! placeholder: filled in by the spec engineer shortly.

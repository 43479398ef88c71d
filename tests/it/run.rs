//! `runbox run`.

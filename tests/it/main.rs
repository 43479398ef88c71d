//! Integration tests: one binary, one module per command, shared helpers in `common`.

mod common;
mod exec;
mod lifecycle;
mod load;
mod run;

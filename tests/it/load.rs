//! `runbox load`, `images`, `inspect`, `rmi`, `prune`.

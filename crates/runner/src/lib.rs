//! runbox-runner: turns an unpacked image plus the user's `run` options into a
//! running container, without a daemon and with one fork per start.
//!
//! The module list is the pipeline, in the order a start walks it:
//!
//! ```text
//! spec          image config + RunConfig -> oci_spec::runtime::Spec (pure)
//! user          /etc/passwd and /etc/group parsing, USER[:GROUP] resolution (pure)
//! env           docker's environment merge, --env-file, -e KEY from the host (pure)
//! capabilities  docker's default set, --cap-add/--cap-drop, --privileged (pure)
//! seccomp       docker's default profile, profile loading, BPF compile + cache
//! rootfs        mount plan applied inside the new mount namespace
//! namespaces    unshare/clone flags and setns
//! cgroups       resource limits: cgroup v1, v2 and hybrid hosts
//! spawn         the one fork: parent/child sync, pid 1, wait
//! watch         the event loop runbox waits in (exit, signals, pty, sync pipe)
//! exec          entering a running container
//! state         container state directory on disk
//! layers        writable layers: spares made ahead, trash deleted after
//! lifecycle     names, ps listing, signals via pidfd, stop/kill/rm, limits
//! supervisor    the per-container process of `run -d` that records the exit
//! logs          a detached container's log file, `logs -f`
//! ```
//!
//! Everything above `rootfs` decides; everything from `rootfs` on acts.

pub mod error;

// One module per line group so rustfmt keeps the pipeline order.
pub mod spec;

pub mod user;

pub mod env;

pub mod capabilities;

pub mod seccomp;

pub mod rootfs;

pub mod namespaces;

pub mod cgroups;

pub mod spawn;

pub mod exec;

pub mod syscall;

pub mod pty;

pub mod signals;

mod watch;

pub mod state;

pub mod layers;

pub mod container;

pub mod lifecycle;

pub mod supervisor;

pub mod logs;

pub use error::{Error, Result};

//! The error type of the runner crate. Every variant names the operation and
//! the path or option it concerns, so that the CLI prints one clear line.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on a named path failed.
    #[error("failed to {op} `{path}`: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A user-supplied option is invalid (`-v`, `--tmpfs`, `-w`, `--cap-add`...).
    #[error("invalid {option} `{value}`: {reason}")]
    InvalidOption {
        option: &'static str,
        value: String,
        reason: String,
    },
    /// A file given by the user or read from the image is malformed.
    #[error("invalid {what} `{path}`: {reason}")]
    InvalidFile {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// The image config JSON lacks or mistypes a field.
    #[error("invalid image config: {0}")]
    ImageConfig(String),
    /// Neither the options nor the image give a command to run.
    #[error("no command specified")]
    NoCommand,
    /// A user or group name could not be resolved in the image.
    #[error("unable to find {kind} {name}: {reason}")]
    UserNotFound {
        kind: &'static str,
        name: String,
        reason: String,
    },
    /// Building an OCI spec structure failed (oci-spec builder error).
    #[error("failed to build OCI spec {what}: {reason}")]
    Spec { what: &'static str, reason: String },
    /// A seccomp profile could not be turned into a BPF program.
    #[error("seccomp: {0}")]
    Seccomp(String),
    /// A cgroup could not be set up or torn down for a reason other than a
    /// failed read (a controller missing, processes that would not die).
    #[error("cgroup `{path}`: {reason}")]
    Cgroup { path: PathBuf, reason: String },
    /// Writing a value to a cgroup interface file failed.
    #[error("failed to write `{value}` to `{path}`: {source}")]
    CgroupWrite {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    /// The container process failed before exec; `message` names the phase and path.
    #[error("container {id}: {message}")]
    ContainerSetup { id: String, message: String },
    /// `--name` is taken by another container.
    #[error("the container name `{name}` is already in use by container {id}; remove it (runbox rm {name}) or choose another name")]
    NameInUse { name: String, id: String },
    /// No container has this name, id or id prefix.
    #[error("no such container: {0}")]
    NoSuchContainer(String),
    /// An id prefix matches several containers.
    #[error("container id prefix `{prefix}` is ambiguous: it matches {count} containers")]
    AmbiguousContainer { prefix: String, count: usize },
    /// The operation needs a running (or a stopped) container.
    #[error("container {id} {reason}")]
    ContainerState { id: String, reason: String },
    /// `exec` into a container whose PID 1 is gone (exited, or its pid reused).
    #[error("container {id} is not running")]
    NotRunning { id: String },
}

impl Error {
    /// Shorthand for [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

//! The command line as clap sees it: raw flags only. Each command turns its
//! args into validated options (in `commands/<name>.rs`) before any work.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "runbox",
    version,
    about = "Daemonless, low-overhead container runner",
    after_help = "Examples:\n  runbox load busybox.tar\n  runbox run busybox.tar -- sh -c 'echo hello'\n  runbox --root /tmp/store images --format json"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Image store root
    #[arg(
        long,
        global = true,
        env = "RUNBOX_ROOT",
        default_value = "/var/lib/runbox",
        value_name = "DIR"
    )]
    pub root: PathBuf,
    /// Container state directory (tmpfs)
    #[arg(
        long,
        global = true,
        env = "RUNBOX_STATE",
        default_value = "/run/runbox",
        value_name = "DIR"
    )]
    pub state: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    #[default]
    Table,
    Json,
}

/// `--timings` alone prints a human line; `--timings=json` writes JSON to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Timings {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load an image tarball or OCI layout into the store
    #[command(
        after_help = "Examples:\n  runbox load busybox.tar\n  runbox load -q --tag app:ci oci-layout/\n  runbox load images.tar:debian:12\n  runbox load images.tar@1"
    )]
    Load(LoadArgs),
    /// List stored images
    Images(ImagesArgs),
    /// Show an image as JSON
    Inspect(InspectArgs),
    /// Remove stored images
    Rmi(RmiArgs),
    /// Remove unused images and leftover temporary files
    #[command(after_help = "Examples:\n  runbox prune --dry-run\n  runbox prune --until 72h")]
    Prune(PruneArgs),
    /// Run a command in a new container
    #[command(
        after_help = "Examples:\n  runbox run busybox.tar -- /bin/true\n  runbox run busybox.tar sh -c 'exit 3'\n  runbox run -e FOO=bar -w /tmp -u 1000 --network none busybox.tar env\n  runbox run -v $PWD:/src:ro --timeout 30s busybox.tar ls /src"
    )]
    Run(Box<RunArgs>),
    /// Run a command in a running container
    #[command(
        after_help = "Examples:\n  runbox exec web -- ls /\n  runbox exec -it web sh\n  runbox exec -u 1000 -w /tmp -e DEBUG=1 3f2a env"
    )]
    Exec(ExecArgs),
    /// List containers
    #[command(after_help = "Examples:\n  runbox ps\n  runbox ps -a --format json\n  runbox ps -q")]
    Ps(PsArgs),
    /// Print a container's output (detached containers)
    Logs(LogsArgs),
    /// Stop containers: SIGTERM, then SIGKILL after the grace period
    Stop(StopArgs),
    /// Send a signal to containers
    Kill(KillArgs),
    /// Remove stopped containers (-f: running ones too)
    Rm(RmArgs),
}

#[derive(Debug, Args)]
pub struct PsArgs {
    /// Show all containers (default: running only)
    #[arg(long, short)]
    pub all: bool,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Print only full container IDs
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Keep printing new output until the container exits
    #[arg(long, short)]
    pub follow: bool,
    /// Container name, ID or ID prefix
    pub container: String,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// Seconds to wait after SIGTERM before SIGKILL
    #[arg(long, short = 't', default_value_t = 10, value_name = "SECONDS")]
    pub time: u64,
    #[arg(required = true, value_name = "NAME|ID")]
    pub containers: Vec<String>,
}

#[derive(Debug, Args)]
pub struct KillArgs {
    /// Signal name or number (KILL, SIGTERM, 15)
    #[arg(long, short, default_value = "KILL")]
    pub signal: String,
    #[arg(required = true, value_name = "NAME|ID")]
    pub containers: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// Kill and remove running containers
    #[arg(long, short)]
    pub force: bool,
    #[arg(required = true, value_name = "NAME|ID")]
    pub containers: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Tarball or OCI layout; PATH:NAME[:TAG] or PATH@INDEX selects one image
    pub path: String,
    /// Add a name to the loaded image
    #[arg(long, short = 't', value_name = "NAME[:TAG]")]
    pub tag: Vec<String>,
    /// Print only the image ID
    #[arg(long, short)]
    pub quiet: bool,
    /// Platform to pick from a multi-platform index
    #[arg(long, default_value_t = host_platform())]
    pub platform: String,
    /// Print phase timings (text, or json to stderr)
    #[arg(long, num_args = 0..=1, default_missing_value = "text", require_equals = true)]
    pub timings: Option<Timings>,
}

#[derive(Debug, Args)]
pub struct ImagesArgs {
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Print only image IDs
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Image name, ID or ID prefix
    #[arg(required = true)]
    pub images: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RmiArgs {
    #[arg(required = true)]
    pub images: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove only images not used within this duration (e.g. 24h, 7d)
    #[arg(long, value_name = "DURATION")]
    pub until: Option<String>,
    /// Show what would be removed
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Keep stdin open
    #[arg(short, long)]
    pub interactive: bool,
    /// Allocate a pseudo-terminal
    #[arg(short, long)]
    pub tty: bool,
    /// Set environment variables (KEY=VALUE, or KEY to take it from the host)
    #[arg(short, long = "env", value_name = "KEY[=VALUE]")]
    pub env: Vec<String>,
    /// Read environment variables from a file
    #[arg(long, value_name = "FILE")]
    pub env_file: Vec<PathBuf>,
    /// Working directory inside the container
    #[arg(short, long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// User and group (name or id)
    #[arg(short, long, value_name = "USER[:GROUP]")]
    pub user: Option<String>,
    /// Override the image's ENTRYPOINT
    #[arg(long, value_name = "CMD")]
    pub entrypoint: Option<String>,
    /// Bind mount a volume
    #[arg(short, long = "volume", value_name = "SRC:DST[:ro]")]
    pub volume: Vec<String>,
    /// Mount a tmpfs
    #[arg(long, value_name = "DST[:size=N]")]
    pub tmpfs: Vec<String>,
    /// Network: host or none
    #[arg(long, default_value = "host", value_name = "MODE")]
    pub network: String,
    /// Container host name
    #[arg(long, value_name = "NAME")]
    pub hostname: Option<String>,
    /// Mount the root filesystem read-only (no writable layer)
    #[arg(long)]
    pub read_only: bool,
    /// Add a capability
    #[arg(long, value_name = "CAP")]
    pub cap_add: Vec<String>,
    /// Drop a capability
    #[arg(long, value_name = "CAP")]
    pub cap_drop: Vec<String>,
    /// Give all capabilities and no seccomp, masked or read-only paths
    #[arg(long)]
    pub privileged: bool,
    /// Security options: no-new-privileges, seccomp=unconfined|PROFILE.json
    #[arg(long, value_name = "OPT")]
    pub security_opt: Vec<String>,
    /// Run a small init as PID 1 that reaps zombies and forwards signals
    #[arg(long)]
    pub init: bool,
    /// Kill the container after this long and exit 124
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Remove the container when it exits (the default)
    #[arg(long)]
    pub rm: bool,
    /// Keep the stopped container
    #[arg(long, conflicts_with = "rm")]
    pub keep: bool,
    /// Run in the background under a supervisor and print the container ID
    #[arg(short, long)]
    pub detach: bool,
    /// A unique name for the container
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Memory limit (b, k, m, g suffixes)
    #[arg(short, long, value_name = "BYTES")]
    pub memory: Option<String>,
    /// CPU limit (fractional)
    #[arg(long, value_name = "N")]
    pub cpus: Option<String>,
    /// Maximum number of processes and threads
    #[arg(long, value_name = "N")]
    pub pids_limit: Option<String>,
    /// Run a plain directory instead of an image
    #[arg(long, value_name = "DIR")]
    pub rootfs: Option<PathBuf>,
    /// Platform to pick when IMAGE is a multi-platform archive
    #[arg(long, default_value_t = host_platform())]
    pub platform: String,
    /// Print phase timings (text, or json to stderr)
    #[arg(long, num_args = 0..=1, default_missing_value = "text", require_equals = true)]
    pub timings: Option<Timings>,
    /// IMAGE (tarball, layout, name or ID) then the command and its arguments;
    /// with --rootfs, only the command
    #[arg(trailing_var_arg = true, value_name = "IMAGE [--] CMD")]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Keep stdin open
    #[arg(short, long)]
    pub interactive: bool,
    /// Allocate a pseudo-terminal
    #[arg(short, long)]
    pub tty: bool,
    /// Set environment variables (KEY=VALUE, or KEY to take it from the host)
    #[arg(short, long = "env", value_name = "KEY[=VALUE]")]
    pub env: Vec<String>,
    /// Working directory inside the container
    #[arg(short, long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// User and group (name or id)
    #[arg(short, long, value_name = "USER[:GROUP]")]
    pub user: Option<String>,
    /// Start the command and return without waiting for it
    #[arg(short, long)]
    pub detach: bool,
    /// Container name, ID or ID prefix, then the command and its arguments
    #[arg(
        trailing_var_arg = true,
        required = true,
        value_name = "CONTAINER [--] CMD"
    )]
    pub args: Vec<String>,
}

/// The platform picked from a multi-platform image by default: this host's,
/// as docker does.
pub fn host_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("linux/{arch}")
}

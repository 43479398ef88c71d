//! The `runbox` binary: parses the command line and hands it to one command.
//! Exit codes follow docker: 125 when runbox itself fails.

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

mod cli;
mod commands;
mod output;

fn main() -> ExitCode {
    // Usage errors are runbox failures (125, as docker), not clap's 2: a
    // script must not mistake them for a command that exited 2.
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(125),
            };
        }
    };
    // Commands that only print data die quietly on a closed pipe, like `cat`.
    // `run` and `exec` keep ignoring SIGPIPE: they must clean up their container.
    if !matches!(cli.command, cli::Command::Run(_) | cli::Command::Exec(_)) {
        runbox_runner::syscall::default_sigpipe();
    }
    match commands::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("runbox: {}", output::one_line(&err));
            ExitCode::from(125)
        }
    }
}

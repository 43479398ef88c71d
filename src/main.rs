//! The `runbox` binary: parses the command line and hands it to one command.
//! Exit codes follow docker: 125 when runbox itself fails.

use std::process::ExitCode;

use clap::Parser;

mod cli;
mod commands;
mod output;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
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

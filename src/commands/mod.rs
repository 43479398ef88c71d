//! One file per command; `dispatch` routes the parsed CLI to it.

use std::process::ExitCode;

use crate::cli::{Cli, Command};

mod images;
mod inspect;
mod load;
mod prune;
mod rmi;
mod run;

pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Load(args) => load::load(&global, args),
        Command::Images(args) => images::images(&global, args),
        Command::Inspect(args) => inspect::inspect(&global, args),
        Command::Rmi(args) => rmi::rmi(&global, args),
        Command::Prune(args) => prune::prune(&global, args),
        Command::Run(args) => run::run(&global, *args),
    }
}

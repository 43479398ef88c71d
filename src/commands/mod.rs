//! One file per command; `dispatch` routes the parsed CLI to it.

use std::process::ExitCode;

use crate::cli::{Cli, Command};

mod detach;
mod exec;
mod images;
mod inspect;
mod kill;
mod load;
mod logs;
mod prune;
mod ps;
mod rm;
mod rmi;
mod run;
mod stop;

pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Load(args) => load::load(&global, args),
        Command::Images(args) => images::images(&global, args),
        Command::Inspect(args) => inspect::inspect(&global, args),
        Command::Rmi(args) => rmi::rmi(&global, args),
        Command::Prune(args) => prune::prune(&global, args),
        Command::Run(args) => run::run(&global, *args),
        Command::Exec(args) => exec::exec(&global, args),
        Command::Ps(args) => ps::ps(&global, args),
        Command::Logs(args) => logs::logs(&global, args),
        Command::Stop(args) => stop::stop(&global, args),
        Command::Kill(args) => kill::kill(&global, args),
        Command::Rm(args) => rm::rm(&global, args),
    }
}

//! `runbox ps`: containers from their state.json files alone (no process
//! is spawned; liveness is the recorded pid plus its start time).

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use runbox_runner::lifecycle::{self, Listed};
use runbox_runner::state::Status;

use crate::cli::{Format, GlobalArgs, PsArgs};

pub fn ps(global: &GlobalArgs, args: PsArgs) -> anyhow::Result<ExitCode> {
    let now = SystemTime::now();
    let rows: Vec<Listed> = lifecycle::list(&global.state)
        .into_iter()
        .filter(|c| args.all || c.running)
        .collect();
    let mut out = String::new();
    if args.quiet {
        for c in &rows {
            out.push_str(&c.state.id);
            out.push('\n');
        }
    } else if args.format == Format::Json {
        let items: Vec<_> = rows
            .iter()
            .map(|c| {
                let st = &c.state;
                serde_json::json!({
                    "id": st.id,
                    "name": st.name,
                    "image": st.image,
                    "command": st.command,
                    "status": status_word(c),
                    "exit_code": st.exit_code,
                    "oom_killed": st.oom_killed,
                    "created": st.created,
                    "finished": st.finished,
                    "pid": if c.running { st.pid } else { 0 },
                    "detached": st.detached,
                    "log_path": st.log_path,
                })
            })
            .collect();
        out = serde_json::to_string_pretty(&items)?;
        out.push('\n');
    } else {
        let table: Vec<[String; 7]> = rows
            .iter()
            .map(|c| {
                let st = &c.state;
                [
                    st.id.chars().take(12).collect(),
                    st.name.clone().unwrap_or_default(),
                    st.image.clone(),
                    shorten(&st.command.join(" "), 30),
                    status_text(c, now),
                    ago(&st.created, now),
                    if c.running {
                        st.pid.to_string()
                    } else {
                        "-".into()
                    },
                ]
            })
            .collect();
        let head = [
            "CONTAINER ID",
            "NAME",
            "IMAGE",
            "COMMAND",
            "STATUS",
            "CREATED",
            "PID",
        ];
        let mut widths = head.map(str::len);
        for row in &table {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut line = |cells: &[&str]| {
            let mut l = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i + 1 == cells.len() {
                    l.push_str(cell);
                } else {
                    l.push_str(&format!("{cell:<w$}   "));
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(&head);
        for row in &table {
            line(&row.each_ref().map(String::as_str));
        }
    }
    use std::io::Write;
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn status_word(c: &Listed) -> &'static str {
    match (c.running, c.state.status) {
        (true, _) => "running",
        (false, Status::Stopped) => "exited",
        (false, Status::Created) => "created",
        // Recorded as running but its process is gone: its runbox died.
        (false, Status::Running) => "dead",
    }
}

fn status_text(c: &Listed, now: SystemTime) -> String {
    let st = &c.state;
    match status_word(c) {
        "running" => format!("Up {}", span(since(&st.created, now))),
        "exited" => {
            let oom = if st.oom_killed { " (OOM)" } else { "" };
            let when = st
                .finished
                .as_deref()
                .map(|f| format!(" {} ago", span(since(f, now))))
                .unwrap_or_default();
            format!("Exited ({}){oom}{when}", st.exit_code.unwrap_or(-1))
        }
        "created" => "Created".into(),
        _ => "Dead".into(),
    }
}

fn since(rfc3339: &str, now: SystemTime) -> Duration {
    humantime::parse_rfc3339(rfc3339)
        .ok()
        .and_then(|t| now.duration_since(t).ok())
        .unwrap_or_default()
}

fn ago(rfc3339: &str, now: SystemTime) -> String {
    format!("{} ago", span(since(rfc3339, now)))
}

/// docker's human durations: "3 seconds", "5 minutes", "2 hours", "4 days".
fn span(d: Duration) -> String {
    let s = d.as_secs();
    let (n, unit) = match s {
        0..=1 => return "Less than a second".into(),
        2..=59 => (s, "second"),
        60..=3599 => (s / 60, "minute"),
        3600..=86_399 => (s / 3600, "hour"),
        _ => (s / 86_400, "day"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return format!("\"{s}\"");
    }
    let cut: String = s.chars().take(max - 1).collect();
    format!("\"{cut}…\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_like_docker() {
        assert_eq!(span(Duration::from_secs(3)), "3 seconds");
        assert_eq!(span(Duration::from_secs(60)), "1 minute");
        assert_eq!(span(Duration::from_secs(7200)), "2 hours");
        assert_eq!(span(Duration::from_millis(300)), "Less than a second");
        assert_eq!(shorten("sh -c 'x'", 30), "\"sh -c 'x'\"");
        assert_eq!(shorten("abcdef", 4), "\"abc…\"");
    }
}

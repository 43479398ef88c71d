//! The resource limits a user may ask for (`--memory`, `--cpus`,
//! `--pids-limit`) and their parsers, with docker's units and bounds. Pure:
//! only [`online_cpus`] asks the kernel anything.

use crate::error::{Error, Result};

/// docker refuses memory limits under 6 MiB: a container cannot even start
/// its runtime below that.
pub const MIN_MEMORY: u64 = 6 << 20;

/// The CFS period runbox writes (docker's and the kernel's default), in µs.
pub const CPU_PERIOD_US: u64 = 100_000;

/// The kernel refuses CFS quotas under 1 ms.
const MIN_CPU_QUOTA_US: u64 = 1_000;

/// `pids.max` accepts at most PID_MAX_LIMIT (4 Mi).
pub const MAX_PIDS: u64 = 4 << 20;

/// What a container may use; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Bytes of memory (no swap on top: the limit is the whole budget).
    pub memory: Option<u64>,
    /// CPUs' worth of time per period, fractional.
    pub cpus: Option<f64>,
    /// Maximum number of tasks (processes and threads).
    pub pids: Option<u64>,
}

impl Limits {
    /// True when no limit is set: then no cgroup is needed at all.
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.cpus.is_none() && self.pids.is_none()
    }

    /// The CFS quota for `cpus`, in µs per [`CPU_PERIOD_US`].
    pub fn cpu_quota_us(&self) -> Option<u64> {
        self.cpus.map(cpu_quota_us)
    }
}

/// CFS quota in µs per 100 ms period for a fractional CPU count (0.5 -> 50000),
/// never under the kernel's 1 ms minimum.
pub fn cpu_quota_us(cpus: f64) -> u64 {
    let quota = (cpus * CPU_PERIOD_US as f64).round();
    // `as` saturates for huge or NaN values; parse_cpus already bounds them.
    (quota as u64).max(MIN_CPU_QUOTA_US)
}

fn memory_error(value: &str, reason: impl Into<String>) -> Error {
    Error::InvalidOption {
        option: "--memory",
        value: value.to_owned(),
        reason: reason.into(),
    }
}

/// Parses a docker memory size: a number (fractions allowed) with an
/// optional unit `b`, `k`, `m`, `g` or `t` (powers of 1024, any case, an
/// optional trailing `b`/`ib` as in `512MiB`). At least 6 MiB, as docker.
pub fn parse_memory(value: &str) -> Result<u64> {
    let s = value.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let usage = "expected a positive number with an optional unit b, k, m or g (e.g. 512m)";
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() || (number.contains('.') && frac_part.is_empty()) {
        return Err(memory_error(value, usage));
    }
    if frac_part.contains('.') {
        return Err(memory_error(value, usage));
    }
    let multiplier: u64 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(memory_error(
                value,
                format!("unknown unit `{}`: {usage}", unit.trim()),
            ))
        }
    };
    let too_large = || memory_error(value, "too large");
    let whole: u64 = int_part.parse().map_err(|_| too_large())?;
    let mut bytes = whole.checked_mul(multiplier).ok_or_else(too_large)?;
    if !frac_part.is_empty() {
        // Only the fraction goes through f64; whole bytes stay exact.
        let fraction: f64 = format!("0.{frac_part}")
            .parse()
            .map_err(|_| memory_error(value, usage))?;
        bytes = bytes
            .checked_add((fraction * multiplier as f64) as u64)
            .ok_or_else(too_large)?;
    }
    // The kernel takes the limit as a signed long.
    if bytes > i64::MAX as u64 {
        return Err(too_large());
    }
    if bytes < MIN_MEMORY {
        return Err(memory_error(value, "minimum memory limit allowed is 6MB"));
    }
    Ok(bytes)
}

/// Number of CPUs this process may run on (docker counts the same way:
/// the affinity mask, not the machine's total).
pub fn online_cpus() -> usize {
    use nix::sched::{sched_getaffinity, CpuSet};
    match sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&i| set.is_set(i).unwrap_or(false))
            .count()
            .max(1),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Parses `--cpus` against this host's CPU count.
pub fn parse_cpus(value: &str) -> Result<f64> {
    parse_cpus_for(value, online_cpus())
}

/// Parses `--cpus`: a decimal from 0.01 up to `online` CPUs.
pub fn parse_cpus_for(value: &str, online: usize) -> Result<f64> {
    let s = value.trim();
    let range = format!(
        "range of CPUs is from 0.01 to {online}.00, as there are only {online} CPUs available"
    );
    let error = |reason: String| Error::InvalidOption {
        option: "--cpus",
        value: value.to_owned(),
        reason,
    };
    // Plain decimals only: f64's parser would also take "inf", "NaN" and "1e3".
    let decimal = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
        && s.matches('.').count() <= 1
        && s != ".";
    if !decimal {
        return Err(error("expected a decimal number of CPUs (e.g. 1.5)".into()));
    }
    let cpus: f64 = s
        .parse()
        .map_err(|_| error("expected a decimal number of CPUs".into()))?;
    if !(0.01..=online as f64).contains(&cpus) {
        return Err(error(range));
    }
    Ok(cpus)
}

/// Parses `--pids-limit`: a positive integer up to the kernel's maximum.
pub fn parse_pids_limit(value: &str) -> Result<u64> {
    let error = |reason: &str| Error::InvalidOption {
        option: "--pids-limit",
        value: value.to_owned(),
        reason: reason.into(),
    };
    let n: u64 = value
        .trim()
        .parse()
        .map_err(|_| error("expected a positive integer"))?;
    match n {
        0 => Err(error("expected a positive integer")),
        n if n > MAX_PIDS => Err(error("at most 4194304 (the kernel's PID_MAX_LIMIT)")),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_units_are_binary_and_case_insensitive() {
        assert_eq!(parse_memory("512m").unwrap(), 512 << 20);
        assert_eq!(parse_memory("512M").unwrap(), 512 << 20);
        assert_eq!(parse_memory("1g").unwrap(), 1 << 30);
        assert_eq!(parse_memory("1G").unwrap(), 1 << 30);
        assert_eq!(parse_memory("10000k").unwrap(), 10000 << 10);
        assert_eq!(parse_memory("1048576000").unwrap(), 1_048_576_000);
        assert_eq!(parse_memory("7340032b").unwrap(), 7 << 20);
        assert_eq!(parse_memory("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_memory("6.5m").unwrap(), 13 << 19);
        assert_eq!(parse_memory("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_memory("64mb").unwrap(), 64 << 20);
        assert_eq!(parse_memory(" 8 m ").unwrap(), 8 << 20);
        assert_eq!(parse_memory("2t").unwrap(), 2 << 40);
    }

    #[test]
    fn memory_minimum_is_six_mebibytes() {
        assert_eq!(parse_memory("6m").unwrap(), MIN_MEMORY);
        let err = parse_memory("100k").unwrap_err().to_string();
        assert!(
            err.contains("--memory") && err.contains("`100k`") && err.contains("6MB"),
            "{err}"
        );
        assert!(parse_memory("1048576")
            .unwrap_err()
            .to_string()
            .contains("minimum"));
    }

    #[test]
    fn memory_rejects_malformed_values() {
        for bad in [
            "", "m", "-1", "-512m", "1.2.3g", "1.g", ".5g", "12x", "12 mm", "1e9", "abc",
        ] {
            let err = parse_memory(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid --memory"), "{bad}: {err}");
        }
        assert!(parse_memory("12x")
            .unwrap_err()
            .to_string()
            .contains("unknown unit `x`"));
        assert!(parse_memory("99999999999999999999")
            .unwrap_err()
            .to_string()
            .contains("too large"));
        assert!(parse_memory("9000000000g")
            .unwrap_err()
            .to_string()
            .contains("too large"));
        assert!(parse_memory("16777216t")
            .unwrap_err()
            .to_string()
            .contains("too large"));
    }

    #[test]
    fn cpus_range_follows_online_count() {
        assert_eq!(parse_cpus_for("0.5", 2).unwrap(), 0.5);
        assert_eq!(parse_cpus_for("2", 2).unwrap(), 2.0);
        assert_eq!(parse_cpus_for("0.01", 2).unwrap(), 0.01);
        let err = parse_cpus_for("3", 2).unwrap_err().to_string();
        assert!(
            err.contains("from 0.01 to 2.00") && err.contains("only 2 CPUs"),
            "{err}"
        );
        for bad in [
            "0", "0.001", "-1", "", ".", "inf", "NaN", "1e0", "1.5.1", "one",
        ] {
            let err = parse_cpus_for(bad, 2).unwrap_err().to_string();
            assert!(err.starts_with("invalid --cpus"), "{bad}: {err}");
        }
        assert!(parse_cpus(&online_cpus().to_string()).is_ok());
    }

    #[test]
    fn cpu_quota_math() {
        assert_eq!(cpu_quota_us(0.5), 50_000);
        assert_eq!(cpu_quota_us(1.0), 100_000);
        assert_eq!(cpu_quota_us(1.5), 150_000);
        assert_eq!(cpu_quota_us(0.333), 33_300);
        assert_eq!(cpu_quota_us(0.01), 1_000);
        assert_eq!(cpu_quota_us(0.001), 1_000, "clamped to the kernel minimum");
        let limits = Limits {
            cpus: Some(2.0),
            ..Limits::default()
        };
        assert_eq!(limits.cpu_quota_us(), Some(200_000));
    }

    #[test]
    fn pids_limit_is_a_positive_integer() {
        assert_eq!(parse_pids_limit("20").unwrap(), 20);
        assert_eq!(parse_pids_limit("4194304").unwrap(), MAX_PIDS);
        for bad in ["0", "-1", "", "1.5", "x", "4194305"] {
            let err = parse_pids_limit(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid --pids-limit"), "{bad}: {err}");
        }
    }

    #[test]
    fn empty_limits() {
        assert!(Limits::default().is_empty());
        assert!(!Limits {
            pids: Some(1),
            ..Limits::default()
        }
        .is_empty());
        assert!(!Limits {
            memory: Some(MIN_MEMORY),
            ..Limits::default()
        }
        .is_empty());
        assert!(!Limits {
            cpus: Some(0.5),
            ..Limits::default()
        }
        .is_empty());
    }
}

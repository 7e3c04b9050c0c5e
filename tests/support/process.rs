//! What `/proc` tells of a process: its state, CPU time, peak memory; and
//! signals.

use std::collections::BTreeMap;
use std::process::Command;

/// A `/proc/.../stat` line, `pid (name) state ...`, split into the name
/// (which may hold spaces and `)`) and the fields from `state` (field 3) on.
fn parse_stat(stat: &str) -> Option<(&str, Vec<&str>)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(').map_or("?", |(_, name)| name);
    Some((name, rest.split_whitespace().collect()))
}

/// User + system CPU seconds from a stat line's fields: utime and stime
/// are fields 14 and 15, in USER_HZ ticks, which Linux fixes at 100.
fn cpu_of(fields: &[&str]) -> Option<f64> {
    let ticks = |field: usize| fields.get(field - 3)?.parse::<f64>().ok();
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, `Z` zombie…);
/// `None` once the process is gone.
pub fn process_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_stat(&stat)?.1.first()?.to_string())
}

/// CPU time (user + system) process `pid` has used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    parse_stat(&stat)
        .and_then(|(_, fields)| cpu_of(&fields))
        .expect("a stat line")
}

/// CPU time (user + system) each thread of process `pid` has used so far,
/// in seconds, by `name/tid`: to tell which thread burned it.
pub fn thread_cpu_seconds(pid: u32) -> BTreeMap<String, f64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return BTreeMap::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let (name, fields) = parse_stat(&stat)?;
            let tid = task.file_name().to_string_lossy().into_owned();
            Some((format!("{name}/{tid}"), cpu_of(&fields)?))
        })
        .collect()
}

/// The threads that used CPU between two [`thread_cpu_seconds`] readings,
/// busiest first, as `name/tid=seconds`.
pub fn busiest_threads(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let mut used: Vec<(&String, f64)> = after
        .iter()
        .map(|(thread, &t)| (thread, t - before.get(thread).copied().unwrap_or(0.0)))
        .filter(|(_, used)| *used > 0.0)
        .collect();
    used.sort_by(|a, b| b.1.total_cmp(&a.1));
    used.iter()
        .take(6)
        .map(|(thread, used)| format!("{thread}={used:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A process's peak resident set (VmHWM) so far, in MiB.
#[allow(dead_code)] // the benches' helper
pub fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

pub fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
}

/// Every thread's stack of process `pid`, from gdb when it is installed:
/// what a process that does not stop is waiting for. Empty without gdb.
pub fn stacks(pid: u32) -> String {
    Command::new("timeout")
        .args(["60", "gdb", "-p", &pid.to_string(), "-batch", "-nx"])
        .args(["-ex", "set pagination off", "-ex", "thread apply all bt 40"])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
}

/// The machine's load averages (1, 5 and 15 minutes), as the benches
/// print them beside their figures.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The median of `values` (the upper one of an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

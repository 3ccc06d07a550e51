//! What a timed stretch of the end-to-end bench cost: readings/s, this
//! process's CPU per reading, and the whole machine's (every process, the
//! broker too when it runs here, from `/proc/stat`). The machine's figure
//! bounds throughput: at `c` µs of the machine's CPU per reading, `k`
//! cores carry at most `k / c` readings a µs however the work is spread
//! over threads, so it shows when a ratio is held by the machine rather
//! than by one busy thread.

use std::time::Instant;

/// One contender's run over the input.
#[derive(Clone, Copy)]
pub struct Measured {
    /// Readings a second.
    pub rate: f64,
    /// µs of this process's CPU per reading.
    pub cpu: f64,
    /// µs of the machine's CPU per reading (every process).
    pub machine: f64,
    /// CPUs the machine had over the run (time stolen by a hypervisor
    /// left out).
    pub cores: f64,
}

/// The start of a timed stretch.
pub struct Span {
    at: Instant,
    process: f64,
    machine: Cpus,
}

impl Span {
    pub fn start() -> Self {
        Self {
            at: Instant::now(),
            process: process_cpu_seconds(),
            machine: Cpus::now(),
        }
    }

    /// The stretch's figures over `readings` readings.
    pub fn finish(&self, readings: usize) -> Measured {
        let wall = self.at.elapsed().as_secs_f64();
        let n = readings.max(1) as f64;
        let now = Cpus::now();
        Measured {
            rate: n / wall,
            cpu: (process_cpu_seconds() - self.process) * 1e6 / n,
            machine: (now.busy - self.machine.busy) * 1e6 / n,
            cores: (now.available - self.machine.available) / wall,
        }
    }
}

/// The most readings/s `m`'s machine cost allows on its cores (None when
/// the machine's CPU could not be read).
pub fn ceiling(m: &Measured) -> Option<f64> {
    (m.machine > 0.0).then(|| m.cores * 1e6 / m.machine)
}

/// CPU seconds all CPUs spent busy and could have spent, so far.
#[derive(Clone, Copy)]
struct Cpus {
    busy: f64,
    available: f64,
}

impl Cpus {
    fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        // The first line sums every CPU (proc(5)): user nice system idle
        // iowait irq softirq steal guest guest_nice, in clock ticks (100
        // a second); guest time is already in user's.
        let t: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        let at = |i: usize| t.get(i).copied().unwrap_or(0.0);
        let total: f64 = t.iter().sum();
        Self {
            busy: (total - at(3) - at(4) - at(7)) / 100.0,
            available: (total - at(7)) / 100.0,
        }
    }
}

/// CPU time (user + system) this process has used so far, in seconds.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name, from the state (field
    // 3 of proc(5)); utime and stime (14 and 15) are in clock ticks, 100
    // per second on Linux.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    f.get(11)
        .zip(f.get(12))
        .map_or(0.0, |(u, s)| (u + s) / 100.0)
}

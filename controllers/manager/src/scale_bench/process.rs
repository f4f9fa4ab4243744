//! A child process's CPU time and peak memory, from Linux's `/proc`.

use std::path::PathBuf;

/// `/proc` counts CPU time in ticks of USER_HZ, 100 a second on Linux
/// whatever the kernel's own tick rate.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// User and system time of all its threads.
    pub cpu_seconds: f64,
    /// The most resident memory it has had since it started or since
    /// [`reset_peak`].
    pub peak_rss_bytes: u64,
}

pub fn read(pid: u32) -> Result<Usage, String> {
    let file = |name: &str| {
        let path = PathBuf::from(format!("/proc/{pid}/{name}"));
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let cpu_seconds =
        cpu_seconds(&file("stat")?).ok_or_else(|| format!("/proc/{pid}/stat: unreadable"))?;
    let peak_rss_bytes =
        peak_rss_bytes(&file("status")?).ok_or_else(|| format!("/proc/{pid}/status: no VmHWM"))?;
    Ok(Usage {
        cpu_seconds,
        peak_rss_bytes,
    })
}

/// Starts a new peak: the kernel sets VmHWM back to the current RSS.
pub fn reset_peak(pid: u32) -> Result<(), String> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .map_err(|e| format!("cannot reset the peak memory of process {pid}: {e}"))
}

/// utime + stime, the 14th and 15th fields of `stat`; counted after the
/// command name, which is in parentheses and may hold spaces.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let (_, after_name) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    let total = ticks(11)? + ticks(12)?;
    #[allow(clippy::cast_precision_loss)] // ticks of a benchmark fit in f64
    Some(total as f64 / TICKS_PER_SECOND)
}

/// `VmHWM:   123 kB` in `status`.
fn peak_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kilobytes = line.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    Some(kilobytes * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_user_plus_system_after_a_name_with_spaces() {
        let stat = "4242 (kruise manager) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 75 0 0 20 0 9 0 100 1000 500";
        assert_eq!(cpu_seconds(stat), Some(3.25));
        assert_eq!(cpu_seconds("4242 (x) S 1"), None);
    }

    #[test]
    fn the_peak_is_read_in_bytes() {
        let status = "Name:\tkruise-manager\nVmPeak:\t  900000 kB\nVmHWM:\t   81920 kB\nVmRSS:\t   40000 kB\n";
        assert_eq!(peak_rss_bytes(status), Some(81920 * 1024));
        assert_eq!(peak_rss_bytes("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_can_be_read_and_its_peak_reset() {
        const BIG: usize = 64 << 20;
        let pid = std::process::id();
        let before = read(pid).unwrap_or_else(|e| panic!("{e}"));
        // Touched, so resident: the peak now holds it.
        let block = std::hint::black_box(vec![1_u8; BIG]);
        let peak = read(pid).unwrap_or_else(|e| panic!("{e}"));
        assert!(peak.peak_rss_bytes >= BIG as u64, "{peak:?}");
        drop(block);
        reset_peak(pid).unwrap_or_else(|e| panic!("{e}"));
        let after = read(pid).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            after.peak_rss_bytes + (BIG as u64) / 2 < peak.peak_rss_bytes,
            "{after:?} after {peak:?}"
        );
        assert!(after.cpu_seconds >= before.cpu_seconds);
    }
}

//! This process's memory, read from Linux's `/proc/self`: the resident set now, its peak, and a
//! reset of the peak so one phase can be measured after another has run.

use std::fs;

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`), in bytes; `None` off Linux.
fn status_field(name: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(name) && line[name.len()..].starts_with(':'))?;
    let kib: u64 = line[name.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// The resident set size now, in bytes.
pub fn rss() -> Option<u64> {
    status_field("VmRSS")
}

/// The largest resident set size since the process started or since [`reset_peak_rss`], in bytes.
pub fn peak_rss() -> Option<u64> {
    status_field("VmHWM")
}

/// Resets the peak to the current resident set (`echo 5 > /proc/self/clear_refs`); false where
/// the kernel does not allow it, and then [`peak_rss`] still counts from the start.
pub fn reset_peak_rss() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_follows_a_large_allocation_and_resets() {
        let (Some(before), true) = (rss(), reset_peak_rss()) else {
            eprintln!("SKIPPED: no /proc/self/status or clear_refs on this system");
            return;
        };
        let block = vec![1u8; 64 << 20];
        let touched: u64 = block.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        assert_eq!(touched, (64 << 20) / 4096);
        let peak = peak_rss().expect("VmHWM");
        assert!(peak >= before + (60 << 20), "peak {peak} after 64 MiB on top of {before}");
        drop(block);
        assert!(reset_peak_rss());
        assert!(peak_rss().expect("VmHWM") < peak, "the reset peak is below the 64 MiB one");
        assert_eq!(mib(3 << 20), "3.0");
    }
}

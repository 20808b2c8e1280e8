//! The online-CPU mask, re-read on every collector pass. Opening a sysfs file costs more
//! than the rest of an idle pass together, so the file stays open and each read is one
//! `pread` at offset 0, which makes sysfs regenerate the attribute.
use std::fs::File;
use std::os::unix::fs::FileExt as _;

use anyhow::{bail, Context as _};

const ONLINE: &str = "/sys/devices/system/cpu/online";

pub struct OnlineCpus {
    file: File,
    buf: Vec<u8>,
}

impl OnlineCpus {
    pub fn open() -> anyhow::Result<OnlineCpus> {
        let file = File::open(ONLINE).with_context(|| format!("cannot open {ONLINE}"))?;
        Ok(OnlineCpus {
            file,
            buf: vec![0; 4096],
        })
    }

    /// The CPUs online now, ascending.
    pub fn read(&mut self) -> anyhow::Result<Vec<u32>> {
        let n = self
            .file
            .read_at(&mut self.buf, 0)
            .with_context(|| format!("cannot read {ONLINE}"))?;
        let text = self.buf.get(..n).unwrap_or_default();
        let text = std::str::from_utf8(text).with_context(|| format!("{ONLINE} is not text"))?;
        parse_cpu_list(text.trim()).with_context(|| format!("cannot parse {ONLINE}"))
    }
}

/// Parses the kernel's CPU list format (`0-3,6,8-9`).
pub fn parse_cpu_list(text: &str) -> anyhow::Result<Vec<u32>> {
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Ok(cpus);
    }
    for range in text.split(',') {
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<u32>(), b.parse::<u32>()),
            None => (range.parse::<u32>(), range.parse::<u32>()),
        };
        let (Ok(first), Ok(last)) = (first, last) else {
            bail!("bad CPU range {range:?}");
        };
        if last < first {
            bail!("bad CPU range {range:?}");
        }
        cpus.extend(first..=last);
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_cpu_list_format() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(
            parse_cpu_list("0-3,6,8-9").unwrap(),
            vec![0, 1, 2, 3, 6, 8, 9]
        );
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("1-2-3").is_err());
    }

    #[test]
    fn rereads_the_open_file() {
        let mut cpus = OnlineCpus::open().unwrap();
        let first = cpus.read().unwrap();
        assert!(!first.is_empty());
        assert_eq!(cpus.read().unwrap(), first);
        assert_eq!(first, aya::util::online_cpus().unwrap());
    }
}

//! Bind mounts and the question "what is mounted here?", answered from `/proc/self/mountinfo`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// A mount point as `/proc/self/mountinfo` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPoint {
    pub path: PathBuf,
    pub readonly: bool,
}

/// The topmost mount at `path`, or `None` when nothing is mounted there (or it does not exist).
pub fn mounted_at(path: &Path) -> io::Result<Option<MountPoint>> {
    let path = match fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let table = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(parse_mountinfo(&table)
        .into_iter()
        .rfind(|m| m.path == path))
}

/// Every mount in a mountinfo table, in order (later entries are on top of earlier ones).
pub fn parse_mountinfo(table: &str) -> Vec<MountPoint> {
    table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let path = fields.nth(4)?;
            let options = fields.next()?;
            Some(MountPoint {
                path: PathBuf::from(unescape(path)),
                readonly: options.split(',').any(|o| o == "ro"),
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo` octal escapes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Bind-mounts `source` at `target` (both existing directories), read-only when asked: a bind
/// mount ignores `MS_RDONLY` until remounted, so that is a second step, undone if it fails.
pub fn bind(source: &Path, target: &Path, readonly: bool) -> io::Result<()> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )?;
    if readonly {
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        if let Err(e) = mount(None::<&str>, target, None::<&str>, flags, None::<&str>) {
            let _ = umount2(target, MntFlags::empty());
            return Err(e.into());
        }
    }
    Ok(())
}

/// Unmounts the topmost mount at `target`.
pub fn unmount(target: &Path) -> io::Result<()> {
    umount2(target, MntFlags::empty()).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_paths_and_read_only_flags() {
        let table = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 8:1 /srv/vol /mnt/with\\040space ro,relatime shared:1 - ext4 /dev/sda1 rw
37 22 8:1 /srv/vol /mnt/a rw master:1 - ext4 /dev/sda1 rw
";
        let mounts = parse_mountinfo(table);
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[1].path, PathBuf::from("/mnt/with space"));
        assert!(mounts[1].readonly);
        assert!(!mounts[2].readonly);
    }
}

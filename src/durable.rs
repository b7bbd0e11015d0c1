//! Files replaced whole. A temp file written beside its target is made private (0600),
//! fsynced, renamed over the target, and the directory fsynced: a reader, or the file system
//! after a crash, sees the old file or the new one, never part of one. Snapshots, `petstore
//! backup` and the ACME state publish their files this way.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;

/// Publishes `temp`, already written, as `path` (see the module's note). On an error the
/// caller removes `temp`.
pub fn publish_private(temp: &Path, path: &Path) -> anyhow::Result<()> {
    fs::set_permissions(temp, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting the mode of {}", temp.display()))?;
    fs::File::open(temp)
        .and_then(|file| file.sync_all())
        .with_context(|| format!("syncing {}", temp.display()))?;
    fs::rename(temp, path)
        .with_context(|| format!("renaming {} to {}", temp.display(), path.display()))?;
    sync_parent(path).with_context(|| format!("syncing the directory of {}", path.display()))
}

/// Makes the directory's entries (a rename, a removal) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Makes the entry of `path` in its directory (a file just made or renamed) durable.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Path::new(".")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_file_is_private_and_replaces_the_old_one_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (temp, path) = (dir.path().join(".new.tmp"), dir.path().join("file"));
        fs::write(&path, b"old").expect("old");
        fs::write(&temp, b"new").expect("temp");
        publish_private(&temp, &path).expect("published");
        assert_eq!(fs::read(&path).expect("read"), b"new");
        assert!(!temp.exists());
        let mode = fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

//! Files replaced whole. A temp file written beside its target is fsynced, renamed over the
//! target, and the directory fsynced: a reader, or the file system after a crash, sees the old
//! file or the new one, never part of one. Snapshots, `petstore backup` and the ACME state
//! publish private (0600) files this way; `LockedFile` is the operator's files (`petstore
//! keys`, `petstore webhooks`) edited in place: under an exclusive lock, so two edits at once
//! never lose one, and replaced with the old file's owner and mode.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Publishes `temp`, already written, as `path` (see the module's note). On an error the
/// caller removes `temp`.
pub fn publish_private(temp: &Path, path: &Path) -> anyhow::Result<()> {
    fs::set_permissions(temp, Permissions::from_mode(0o600))
        .with_context(|| format!("setting the mode of {}", temp.display()))?;
    File::open(temp)
        .and_then(|file| file.sync_all())
        .with_context(|| format!("syncing {}", temp.display()))?;
    fs::rename(temp, path)
        .with_context(|| format!("renaming {} to {}", temp.display(), path.display()))?;
    sync_parent(path).with_context(|| format!("syncing the directory of {}", path.display()))
}

/// Makes the directory's entries (a rename, a removal) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Makes the entry of `path` in its directory (a file just made or renamed) durable.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Path::new(".")),
    }
}

/// A text file read under an exclusive lock that lasts until it is dropped, to be replaced
/// whole by `replace`.
pub struct LockedFile {
    /// The file itself, symbolic links resolved: the rename must replace it, not the link.
    pub path: PathBuf,
    /// What the file is to the operator ("keys file"), for the errors.
    kind: &'static str,
    /// Holds the lock.
    file: File,
    /// The whole file as it was read under the lock.
    pub text: String,
}

impl LockedFile {
    /// Opens and locks the file `given`, which must exist.
    pub fn open(given: &Path, kind: &'static str) -> anyhow::Result<LockedFile> {
        LockedFile::lock(given, kind)
    }

    /// Opens and locks the file `given`, made empty with mode 0600 when missing. `retry` is
    /// what to do once its missing directory is made ("add the key again").
    pub fn open_or_create(
        given: &Path,
        kind: &'static str,
        retry: &str,
    ) -> anyhow::Result<LockedFile> {
        let shown = given.display();
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(given)
        {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            // The file's own absence is what creating is for, so NotFound is its directory's:
            // making one is the operator's call (owner, mode), not ours.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let dir = given
                    .parent()
                    .filter(|dir| !dir.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                anyhow::bail!(
                    "creating {shown}: the directory {} does not exist; create it first \
                     (mkdir -p {}), then {retry}",
                    dir.display(),
                    dir.display()
                );
            }
            Err(e) => return Err(e).with_context(|| format!("creating {shown}")),
        }
        LockedFile::lock(given, kind)
    }

    fn lock(given: &Path, kind: &'static str) -> anyhow::Result<LockedFile> {
        let shown = given.display();
        let path = fs::canonicalize(given).with_context(|| format!("opening {shown}"))?;
        // Another edit may rename a new file over this path while we wait for the lock: then
        // the locked file is the old one, and we start again on the new.
        let file = loop {
            let file = File::open(&path).with_context(|| format!("opening {shown}"))?;
            file.lock()
                .with_context(|| format!("locking {shown} for the edit"))?;
            let locked = file
                .metadata()
                .with_context(|| format!("reading {shown}"))?;
            let current = fs::metadata(&path).with_context(|| format!("reading {shown}"))?;
            if (locked.dev(), locked.ino()) == (current.dev(), current.ino()) {
                break file;
            }
        };
        let mut text = String::new();
        (&file)
            .read_to_string(&mut text)
            .with_context(|| format!("reading {shown}"))?;
        Ok(LockedFile {
            path,
            kind,
            file,
            text,
        })
    }

    /// Puts `text` in place of the file: same owner and mode, atomic, durable. The lock is
    /// held until `self` is dropped, after the rename.
    pub fn replace(&self, text: &str) -> anyhow::Result<()> {
        let shown = self.path.display();
        let old = self
            .file
            .metadata()
            .with_context(|| format!("reading {shown}"))?;
        let name = self
            .path
            .file_name()
            .with_context(|| format!("{shown} names no file"))?;
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{}.tmp", std::process::id()));
        let temp = dir.join(temp_name);
        let written = write_like(&temp, text, &old, self.kind).and_then(|()| {
            fs::rename(&temp, &self.path)
                .with_context(|| format!("renaming {} to {shown}", temp.display()))
        });
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written?;
        sync_dir(dir).with_context(|| format!("syncing the directory {}", dir.display()))
    }
}

/// Writes a new file at `path` with `text` and the owner and mode of `like` (the `kind` of
/// file it replaces), and syncs it.
fn write_like(path: &Path, text: &str, like: &fs::Metadata, kind: &str) -> anyhow::Result<()> {
    let shown = path.display();
    // A temp file left by a process with our pid that died mid-edit.
    let _ = fs::remove_file(path);
    // Created private; the mode below is set explicitly, since umask would change this one.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {shown}"))?;
    let created = file
        .metadata()
        .with_context(|| format!("reading {shown}"))?;
    if (created.uid(), created.gid()) != (like.uid(), like.gid()) {
        std::os::unix::fs::fchown(&file, Some(like.uid()), Some(like.gid())).with_context(
            || {
                format!(
                    "giving {shown} the {kind}'s owner {}:{} (run as root or as that owner)",
                    like.uid(),
                    like.gid()
                )
            },
        )?;
    }
    file.set_permissions(Permissions::from_mode(like.mode() & 0o7777))
        .with_context(|| format!("setting the mode of {shown}"))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {shown}"))
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

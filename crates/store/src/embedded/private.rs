//! The store's files hold every Secret in plain text, so only their owner
//! may read them: the directory the store creates is 0700, and `db` and
//! `db.wal` are 0600 — created so, and tightened when an older version left
//! them readable (k3s keeps its server data the same way).

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::{Error, Result};

/// Mode of the store's files.
pub const FILE_MODE: u32 = 0o600;
/// Mode of directories the store creates.
pub const DIR_MODE: u32 = 0o700;

/// Creates `dir` (and its missing parents) readable by its owner only.
/// A directory that exists is left as it is: it is the caller's.
pub fn create_dir(dir: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| Error::unavailable(format!("create {}", dir.display()), e))
}

/// Creates `path` empty with mode 0600 if it does not exist (the store
/// then initializes it); an existing file is left as it is.
pub fn create_file(path: &Path) -> Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::unavailable(format!("create {}", path.display()), e)),
    }
}

/// Tightens a file the store has recognized as its own to mode 0600 (an
/// older version created them 0644). Never called on a file it refused.
pub fn restrict(path: &Path) -> Result<()> {
    let mode = std::fs::metadata(path)
        .map_err(|e| Error::unavailable(format!("inspect {}", path.display()), e))?
        .permissions()
        .mode();
    if mode & 0o777 != FILE_MODE {
        std::fs::set_permissions(path, Permissions::from_mode(FILE_MODE))
            .map_err(|e| Error::unavailable(format!("restrict {}", path.display()), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn files_are_created_private_and_loose_ones_tightened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nested = dir.path().join("a/b");
        create_dir(&nested).expect("create");
        assert_eq!(mode(&nested), DIR_MODE);
        let fresh = nested.join("db");
        create_file(&fresh).expect("create");
        assert_eq!(mode(&fresh), FILE_MODE);
        let loose = nested.join("db.wal");
        std::fs::write(&loose, b"x").expect("write");
        std::fs::set_permissions(&loose, Permissions::from_mode(0o644)).expect("chmod");
        create_file(&loose).expect("exists");
        assert_eq!(
            mode(&loose),
            0o644,
            "creating leaves an existing file alone"
        );
        restrict(&loose).expect("tighten");
        assert_eq!(mode(&loose), FILE_MODE);
        assert_eq!(std::fs::read(&loose).expect("read"), b"x", "content kept");
    }
}

//! A minimal ustar writer: the entries an image layer of a few files needs
//! (directories, regular files, symbolic links), owned by root, at time 0
//! so that the same files always make the same layer digest.

/// One entry of a tar archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Dir {
        path: String,
        mode: u32,
    },
    File {
        path: String,
        mode: u32,
        data: Vec<u8>,
    },
    Symlink {
        path: String,
        target: String,
    },
}

impl Entry {
    fn path(&self) -> &str {
        match self {
            Entry::Dir { path, .. } | Entry::File { path, .. } | Entry::Symlink { path, .. } => {
                path
            }
        }
    }
}

/// Writes `octal` right-aligned, NUL-terminated, into `field`.
fn octal(field: &mut [u8], value: u64) {
    let text = format!("{value:0width$o}\0", width = field.len() - 1);
    field.copy_from_slice(text.as_bytes());
}

fn header(entry: &Entry) -> [u8; 512] {
    let mut h = [0u8; 512];
    let mut name = entry.path().trim_start_matches('/').to_string();
    if matches!(entry, Entry::Dir { .. }) && !name.ends_with('/') {
        name.push('/');
    }
    let name = name.as_bytes();
    assert!(
        name.len() < 100,
        "tar: path too long for ustar: {:?}",
        entry.path()
    );
    h[..name.len()].copy_from_slice(name);
    let (mode, size, kind) = match entry {
        Entry::Dir { mode, .. } => (*mode, 0, b'5'),
        Entry::File { mode, data, .. } => (*mode, data.len() as u64, b'0'),
        Entry::Symlink { target, .. } => {
            assert!(target.len() < 100, "tar: link target too long: {target:?}");
            h[157..157 + target.len()].copy_from_slice(target.as_bytes());
            (0o777, 0, b'2')
        }
    };
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0); // uid
    octal(&mut h[116..124], 0); // gid
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0); // mtime
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    // The checksum is computed with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    h
}

/// The archive of `entries`, in order.
pub fn archive(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        out.extend_from_slice(&header(entry));
        if let Entry::File { data, .. } = entry {
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
    }
    // Two zero blocks end the archive.
    out.resize(out.len() + 1024, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_tar_reads_what_is_written() {
        let bytes = archive(&[
            Entry::Dir {
                path: "bin".into(),
                mode: 0o755,
            },
            Entry::File {
                path: "bin/hello".into(),
                mode: 0o755,
                data: b"hello\n".to_vec(),
            },
            Entry::Symlink {
                path: "bin/hi".into(),
                target: "hello".into(),
            },
        ]);
        assert_eq!(bytes.len() % 512, 0);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.tar");
        std::fs::write(&path, &bytes).expect("write");
        let Ok(out) = std::process::Command::new("tar")
            .arg("-tvf")
            .arg(&path)
            .output()
        else {
            eprintln!("skipped: no tar binary");
            return;
        };
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(listing.contains("drwxr-xr-x root/root"), "{listing}");
        assert!(listing.contains("bin/hello"), "{listing}");
        assert!(listing.contains("bin/hi -> hello"), "{listing}");
    }
}

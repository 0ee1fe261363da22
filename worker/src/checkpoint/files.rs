//! The files of a local RocksDB checkpoint, described for a manifest: size and SHA-256 of
//! each. SST files are immutable, so their hashes are remembered by inode, size and
//! modification time and a checkpoint only hashes what is new since the previous one.

use super::error::CheckpointError;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One file of a local checkpoint directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFile {
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    pub sha256: String,
}

/// What identifies an immutable file's content without reading it: hard links of one SST
/// share the inode, and a reused inode comes with another name or time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FileIdentity {
    name: String,
    device: u64,
    inode: u64,
    size: u64,
    modified_ns: i64,
}

/// Remembered hashes of immutable files.
#[derive(Debug, Default)]
pub struct HashCache {
    known: HashMap<FileIdentity, String>,
}

impl HashCache {
    /// Describes `name` in `dir`, hashing it unless it is a remembered immutable file.
    /// Returns the file and whether it had to be read.
    pub fn describe(
        &mut self,
        dir: &Path,
        name: &str,
    ) -> Result<(LocalFile, bool), CheckpointError> {
        let path = dir.join(name);
        let meta = std::fs::metadata(&path).map_err(CheckpointError::io("stat", &path))?;
        let identity = FileIdentity {
            name: name.to_string(),
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.len(),
            modified_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        };
        let immutable = name.ends_with(".sst");
        if immutable && let Some(sha256) = self.known.get(&identity) {
            let file = LocalFile {
                name: name.to_string(),
                path,
                size: meta.len(),
                sha256: sha256.clone(),
            };
            return Ok((file, false));
        }
        let (sha256, size) = sha256_file(&path)?;
        if immutable {
            self.known.insert(identity, sha256.clone());
        }
        Ok((
            LocalFile {
                name: name.to_string(),
                path,
                size,
                sha256,
            },
            true,
        ))
    }

    /// Forgets files that are no longer part of any checkpoint (bounded memory).
    pub fn retain_names(&mut self, names: &std::collections::HashSet<String>) {
        self.known
            .retain(|identity, _| names.contains(&identity.name));
    }
}

/// Lower-case hex SHA-256 and length of a file's content.
pub fn sha256_file(path: &Path) -> Result<(String, u64), CheckpointError> {
    let mut file = std::fs::File::open(path).map_err(CheckpointError::io("open", path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let read = file
            .read(&mut buffer)
            .map_err(CheckpointError::io("read", path))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        size += read as u64;
    }
    Ok((hex(&hasher.finalize()), size))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_the_known_sha256_of_abc() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x"), b"abc").unwrap();
        let (sha, size) = sha256_file(&dir.path().join("x")).unwrap();
        assert_eq!(
            sha,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(size, 3);
    }

    #[test]
    fn remembers_sst_files_but_rehashes_mutable_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("000001.sst"), b"sst").unwrap();
        std::fs::write(dir.path().join("CURRENT"), b"MANIFEST-1\n").unwrap();
        let mut cache = HashCache::default();
        assert!(cache.describe(dir.path(), "000001.sst").unwrap().1);
        assert!(!cache.describe(dir.path(), "000001.sst").unwrap().1);
        assert!(cache.describe(dir.path(), "CURRENT").unwrap().1);
        assert!(cache.describe(dir.path(), "CURRENT").unwrap().1);
    }
}

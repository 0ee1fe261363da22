//! Files a ConfigMap or Secret projects into a pod's volume, written at start and kept up to
//! date while the pod runs, as a kubelet does: a Secret rotated (the worker token, say) reaches
//! the running processes without a restart, a while after the change
//! ([`Options::volume_refresh_seconds`](crate::Options)).
//!
//! A kubelet swaps a `..data` symlink so a reader never sees half a change; here each changed
//! file is written beside itself and renamed over, which gives a reader of one file the same.
//! A source that is gone for the moment (a Secret deleted, not yet written again) leaves the
//! files as they were, as a kubelet does.

use crate::launch::VolumePlan;
use std::path::{Path, PathBuf};

/// Writes the files of `volume` (creating its directory); returns how many changed.
pub fn materialize(dir: &Path, files: &[(PathBuf, Vec<u8>)]) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut changed = 0;
    for (relative, content) in files {
        let path = dir.join(relative);
        if std::fs::read(&path).is_ok_and(|now| now == *content) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut temporary = path.clone().into_os_string();
        temporary.push(".sk-new");
        std::fs::write(&temporary, content)?;
        std::fs::rename(&temporary, &path)?;
        changed += 1;
    }
    Ok(changed)
}

/// Brings every projected volume of a running pod up to date; the names of the volumes that
/// changed.
pub fn refresh(volumes: &[VolumePlan]) -> std::io::Result<Vec<String>> {
    let mut changed = Vec::new();
    for volume in volumes.iter().filter(|v| !v.files.is_empty()) {
        if materialize(&volume.dir, &volume.files)? > 0 {
            changed.push(volume.name.clone());
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(dir: &Path, content: &[u8]) -> VolumePlan {
        VolumePlan {
            name: "token".into(),
            dir: dir.to_path_buf(),
            files: vec![(PathBuf::from("token"), content.to_vec())],
        }
    }

    #[test]
    fn a_changed_source_rewrites_its_file_and_an_unchanged_one_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let first = volume(dir.path(), b"one");
        assert_eq!(refresh(std::slice::from_ref(&first)).unwrap(), ["token"]);
        assert!(refresh(&[first]).unwrap().is_empty());
        assert_eq!(refresh(&[volume(dir.path(), b"two")]).unwrap(), ["token"]);
        assert_eq!(std::fs::read(dir.path().join("token")).unwrap(), b"two");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }
}

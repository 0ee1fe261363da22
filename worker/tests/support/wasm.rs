//! The example WebAssembly guests (`examples/wasm`), built by `examples/wasm/build.sh` once per
//! test binary into the target's temporary directory, and put where a job's worker reads them.

use super::Job;
use std::path::PathBuf;
use std::sync::OnceLock;
use streamkeeper_contract::module_digest::ModuleDigest;
use streamkeeper_contract::worker_config::WasmModuleSource;
use streamkeeper_worker::checkpoint::s3::S3Storage;

/// The guest `name`'s component (`python-velocity`, `c-count`, …).
pub fn guest_bytes(name: &str) -> Vec<u8> {
    std::fs::read(guest_path(name)).unwrap()
}

/// Where the guest `name`'s component is.
fn guest_path(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let out = PathBuf::from(concat!(env!("CARGO_TARGET_TMPDIR"), "/wasm-guests"));
        let status = std::process::Command::new(format!("{root}/examples/wasm/build.sh"))
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "examples/wasm/build.sh failed");
        out
    });
    dir.join(format!("{name}.wasm"))
}

/// Uploads `bytes` under `job`'s checkpoint prefix in the test bucket; the module source
/// pinning them.
pub async fn upload(job: &Job, name: &str, bytes: Vec<u8>) -> WasmModuleSource {
    let s3 = job.config.checkpoint.s3.clone().expect("checkpoints on");
    let key = format!("{}/guests/{name}.wasm", s3.prefix);
    let sha256 = ModuleDigest::of(&bytes);
    S3Storage::connect(&s3)
        .await
        .unwrap()
        .put_if_absent(&key, bytes)
        .await
        .unwrap();
    WasmModuleSource {
        bucket: None,
        key,
        file: None,
        credentials_dir: None,
        sha256,
    }
}

//! The rules of the processors a user brings: a custom processor's name (the Rust SDK) and a
//! WebAssembly processor's module and limits.

use super::{Field, Violation, violation};
use crate::worker_config::{WasmLimitsConfig, WasmModuleSource};

/// The longest name a custom processor may have.
pub const MAX_CUSTOM_NAME_LEN: usize = 63;

/// A custom processor's name: what the worker binary registered it under, and part of the
/// state's identity, so a plain lowercase word (`[a-z][a-z0-9-]*`, at most 63 characters) that
/// reads the same in a spec, a log line and a metric label.
pub fn custom_name(name: &str) -> Result<(), Violation> {
    let plain = name.len() <= MAX_CUSTOM_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if plain {
        Ok(())
    } else {
        Err(violation(
            Field::CustomName,
            format!(
                "`{name}` is not a processor name: a lowercase letter, then lowercase letters, digits and '-', at most {MAX_CUSTOM_NAME_LEN} in all"
            ),
        ))
    }
}

/// The least memory a WebAssembly instance may be capped at (a language runtime's start-up
/// needs tens of MiB), and the most.
pub const WASM_MEMORY_BYTES: std::ops::RangeInclusive<u64> = (16 << 20)..=(4 << 30);
/// The most fuel a record may burn (about ten seconds of a busy instance).
pub const MAX_WASM_FUEL_PER_RECORD: u64 = 10_000_000_000;

/// The most earlier builds a WebAssembly module may declare it reads the state of.
pub const MAX_WASM_READS_STATE_OF: usize = 16;

fn sha256(field: Field, digest: &str) -> Result<(), Violation> {
    let hex = digest.len() == 64
        && digest
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    if hex {
        Ok(())
    } else {
        Err(violation(
            field,
            format!("`{digest}` is not a SHA-256: 64 lowercase hex digits (sha256sum prints it)"),
        ))
    }
}

/// The earlier builds whose state a WebAssembly module declares it reads: digests, at most
/// [`MAX_WASM_READS_STATE_OF`], none of them the module's own (that state is its own already).
pub fn wasm_reads_state_of(module: &WasmModuleSource, digests: &[String]) -> Result<(), Violation> {
    if digests.len() > MAX_WASM_READS_STATE_OF {
        return Err(violation(
            Field::WasmReadsStateOf,
            format!(
                "names {} builds: at most {MAX_WASM_READS_STATE_OF}",
                digests.len()
            ),
        ));
    }
    for digest in digests {
        sha256(Field::WasmReadsStateOf, digest)?;
        if *digest == module.sha256 {
            return Err(violation(
                Field::WasmReadsStateOf,
                format!("names the module's own digest `{digest}`: list earlier builds only"),
            ));
        }
    }
    Ok(())
}

/// A WebAssembly processor's module and limits: an S3 key or a file, a digest of 64 lowercase
/// hex digits, and limits within bounds.
pub fn wasm(module: &WasmModuleSource, limits: &WasmLimitsConfig) -> Result<(), Violation> {
    match (module.key.trim().is_empty(), &module.file) {
        (false, None) => {}
        (true, Some(file))
            if !file.trim().is_empty()
                && module.bucket.is_none()
                && module.credentials_dir.is_none() => {}
        (true, None) => return Err(violation(Field::WasmModuleKey, "must not be empty")),
        _ => {
            return Err(violation(
                Field::WasmModuleKey,
                "the module is an S3 object (key, bucket, credentials) or a file (a ConfigMap's), not both",
            ));
        }
    }
    sha256(Field::WasmModuleSha256, &module.sha256)?;
    if !(1..=MAX_WASM_FUEL_PER_RECORD).contains(&limits.fuel_per_record) {
        return Err(violation(
            Field::WasmFuelPerRecord,
            format!(
                "{} is not within 1 to {MAX_WASM_FUEL_PER_RECORD}",
                limits.fuel_per_record
            ),
        ));
    }
    if !WASM_MEMORY_BYTES.contains(&limits.memory_bytes) {
        return Err(violation(
            Field::WasmMemoryBytes,
            format!(
                "{} is not within {} to {} bytes",
                limits.memory_bytes,
                WASM_MEMORY_BYTES.start(),
                WASM_MEMORY_BYTES.end()
            ),
        ));
    }
    Ok(())
}

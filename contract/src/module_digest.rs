//! A WebAssembly component's digest, as a job pins it (`spec.processor.wasm.module.sha256`)
//! and as both the operator (before it starts anything) and the worker (before it runs the
//! bytes) compute it: the SHA-256 of the object's bytes, 64 lowercase hex digits, as
//! `sha256sum` prints it.

use sha2::{Digest, Sha256};

/// A digest being computed over bytes that arrive in pieces.
#[derive(Debug, Clone, Default)]
pub struct ModuleDigest(Sha256);

impl ModuleDigest {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next piece of the object.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest of everything added, as the job pins it.
    pub fn finish(self) -> String {
        self.0
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> String {
        let mut digest = Self::new();
        digest.update(bytes);
        digest.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_what_sha256sum_prints_whole_or_in_pieces() {
        // printf 'abc' | sha256sum
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(ModuleDigest::of(b"abc"), abc);
        let mut pieces = ModuleDigest::new();
        pieces.update(b"a");
        pieces.update(b"bc");
        assert_eq!(pieces.finish(), abc);
    }
}

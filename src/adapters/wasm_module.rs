//! A WebAssembly processor's component in S3, as the operator looks at it before it creates
//! or changes anything: whether the object exists, and the digest of its bytes, which the job's
//! pin is judged against ([`crate::controller::judge::wasm_module`]).
//!
//! The digest costs a read of the whole object (a Python guest is about 18 MB), so it is
//! computed once per object version: the object's ETag names the version, and the digests seen
//! are kept per operator ([`ModuleDigests`]). Every reconcile after the first asks only for the
//! object's head. The workers check the bytes again before they run them: the operator's look
//! says "nothing starts on a module that is not there", not "these bytes are safe".

use super::checkpoints::CheckpointReadError;
use aws_sdk_s3::Client;
use std::collections::HashMap;
use std::sync::Mutex;
use streamkeeper_contract::module_digest::ModuleDigest;

/// How many object versions' digests an operator keeps (a few hundred bytes each); past it the
/// oldest half is forgotten and read again when asked.
const DIGESTS_KEPT: usize = 4096;

/// What is at the module's location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleFound {
    /// No object there.
    Missing,
    /// An object, and the digest of its bytes.
    Found { sha256: String },
}

/// The digests of the module objects this operator read, by location and ETag.
#[derive(Debug, Default)]
pub struct ModuleDigests {
    seen: Mutex<HashMap<String, (u64, String)>>,
}

impl ModuleDigests {
    fn get(&self, version: &str) -> Option<String> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(version).map(|(_, digest)| digest.clone())
    }

    fn keep(&self, version: String, digest: String) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= DIGESTS_KEPT {
            let mut ages: Vec<u64> = seen.values().map(|(age, _)| *age).collect();
            ages.sort_unstable();
            let median = ages[ages.len() / 2];
            seen.retain(|_, (age, _)| *age > median);
        }
        let age = seen.values().map(|(age, _)| *age).max().unwrap_or(0) + 1;
        seen.insert(version, (age, digest));
    }
}

/// What is at `s3://bucket/key`: nothing, or an object and its digest (read in full only for
/// an object version `digests` has not seen).
pub async fn look_up(
    client: &Client,
    (bucket, key): (&str, &str),
    digests: &ModuleDigests,
    count: &(dyn Fn(&'static str) + Send + Sync),
) -> Result<ModuleFound, CheckpointReadError> {
    let unavailable = |operation, message: String| CheckpointReadError::Unavailable {
        bucket: bucket.to_string(),
        operation,
        prefix: key.to_string(),
        message,
    };
    count("HeadObject");
    let head = match client.head_object().bucket(bucket).key(key).send().await {
        Ok(head) => head,
        Err(error) if error.as_service_error().is_some_and(|e| e.is_not_found()) => {
            return Ok(ModuleFound::Missing);
        }
        Err(error) => return Err(unavailable("HeadObject", context(error))),
    };
    let version = head
        .e_tag()
        .map(|etag| format!("s3://{bucket}/{key} {etag}"));
    if let Some(sha256) = version.as_deref().and_then(|v| digests.get(v)) {
        return Ok(ModuleFound::Found { sha256 });
    }
    count("GetObject");
    let object = match client.get_object().bucket(bucket).key(key).send().await {
        Ok(object) => object,
        Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
            return Ok(ModuleFound::Missing);
        }
        Err(error) => return Err(unavailable("GetObject", context(error))),
    };
    let started = std::time::Instant::now();
    let mut digest = ModuleDigest::new();
    let mut bytes = 0usize;
    let mut body = object.body;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| unavailable("GetObject", e.to_string()))?;
        bytes += chunk.len();
        digest.update(&chunk);
    }
    let sha256 = digest.finish();
    tracing::info!(
        module = %format!("s3://{bucket}/{key}"),
        bytes,
        %sha256,
        seconds = started.elapsed().as_secs_f64(),
        "read a WebAssembly module to check its digest"
    );
    if let Some(version) = version {
        digests.keep(version, sha256.clone());
    }
    Ok(ModuleFound::Found { sha256 })
}

/// An S3 SDK error with its whole chain of causes.
fn context(error: impl std::error::Error) -> String {
    aws_sdk_s3::error::DisplayErrorContext(error).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_kept_per_object_version_and_bounded() {
        let digests = ModuleDigests::default();
        digests.keep("s3://b/k \"1\"".into(), "a".repeat(64));
        assert_eq!(digests.get("s3://b/k \"1\""), Some("a".repeat(64)));
        assert_eq!(digests.get("s3://b/k \"2\""), None);
        for i in 0..DIGESTS_KEPT + 10 {
            digests.keep(format!("v{i}"), i.to_string());
        }
        let kept = digests.seen.lock().unwrap().len();
        assert!(kept <= DIGESTS_KEPT, "{kept}");
        assert_eq!(
            digests.get(&format!("v{}", DIGESTS_KEPT + 9)),
            Some((DIGESTS_KEPT + 9).to_string()),
            "the newest stays"
        );
    }
}

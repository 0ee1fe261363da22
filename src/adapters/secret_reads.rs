//! The Secrets the reconciles read (S3 access keys, Kafka TLS and SASL material, the worker
//! token), kept for a while so that a reconcile in steady state reads none of them: at 1,000
//! jobs reconciled every minute, one read of each would be 30 requests a second on its own.
//!
//! The operator may not watch Secrets (it has `get` by name only, see
//! `docs/architecture/security.md`), so a kept Secret is trusted for [`RECHECK`] and then read
//! again. Two things drop what a namespace's reconciles kept, so the next reconcile reads anew:
//! - a change of one of its jobs (spec, annotations, labels): a rotation is followed at once
//!   when the job is touched, as the day-2 guide says;
//! - a failed reconcile: stale keys that S3 or Kafka refuse are read again on the retry.
//!
//! A Secret that does not exist is not kept, nor one its reader refused: the next reconcile
//! looks again.

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a Secret read is trusted before it is read again.
pub const RECHECK: Duration = Duration::from_secs(600);

#[derive(Debug, Default)]
pub struct SecretReads {
    kept: Mutex<HashMap<(String, String), Kept>>,
}

#[derive(Debug)]
struct Kept {
    read_at: Instant,
    secret: Arc<Secret>,
}

impl SecretReads {
    fn kept(&self) -> MutexGuard<'_, HashMap<(String, String), Kept>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Secret `namespace`/`name`: as read less than [`RECHECK`] ago, else read now (and kept
    /// when it exists).
    pub async fn get_opt(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, kube::Error> {
        let key = (namespace.to_string(), name.to_string());
        if let Some(secret) = self.fresh(&key, Instant::now()) {
            return Ok(Some(secret));
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let read = api.get_opt(name).await?.map(Arc::new);
        self.keep(key, read.clone(), Instant::now());
        Ok(read)
    }

    fn fresh(&self, key: &(String, String), now: Instant) -> Option<Arc<Secret>> {
        let kept = self.kept();
        let kept = kept.get(key)?;
        (now.saturating_duration_since(kept.read_at) < RECHECK).then(|| Arc::clone(&kept.secret))
    }

    fn keep(&self, key: (String, String), read: Option<Arc<Secret>>, read_at: Instant) {
        let mut kept = self.kept();
        match read {
            Some(secret) => kept.insert(key, Kept { read_at, secret }),
            None => kept.remove(&key),
        };
    }

    /// Keeps `secret` as just read: one the operator has just created.
    pub fn created(&self, namespace: &str, secret: Secret) {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let key = (namespace.to_string(), name);
        self.keep(key, Some(Arc::new(secret)), Instant::now());
    }

    /// Drops Secret `namespace`/`name`: the reader refused it (someone else's, say), and its
    /// next read must see whether that changed.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.kept()
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Drops every Secret kept from `namespace`: its next reads go to the apiserver.
    pub fn forget_namespace(&self, namespace: &str) {
        self.kept().retain(|(kept_in, _), _| kept_in != namespace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(namespace: &str, name: &str) -> (String, String) {
        (namespace.to_string(), name.to_string())
    }

    #[test]
    fn a_secret_is_kept_for_the_recheck_interval_then_read_again() {
        let reads = SecretReads::default();
        let at = Instant::now();
        reads.keep(key("shop", "s3"), Some(Arc::new(Secret::default())), at);
        assert!(reads.fresh(&key("shop", "s3"), at + RECHECK / 2).is_some());
        assert!(reads.fresh(&key("shop", "s3"), at + RECHECK).is_none());
        assert!(reads.fresh(&key("shop", "other"), at).is_none());
    }

    #[test]
    fn a_missing_secret_is_not_kept_and_replaces_what_was() {
        let reads = SecretReads::default();
        let at = Instant::now();
        reads.keep(key("shop", "s3"), Some(Arc::new(Secret::default())), at);
        reads.keep(key("shop", "s3"), None, at);
        assert!(reads.fresh(&key("shop", "s3"), at).is_none());
    }

    #[test]
    fn forgetting_a_namespace_drops_only_its_secrets() {
        let reads = SecretReads::default();
        let at = Instant::now();
        for namespace in ["shop", "bank"] {
            reads.keep(key(namespace, "s3"), Some(Arc::new(Secret::default())), at);
        }
        reads.forget_namespace("shop");
        assert!(reads.fresh(&key("shop", "s3"), at).is_none());
        assert!(reads.fresh(&key("bank", "s3"), at).is_some());
        reads.forget("bank", "s3");
        assert!(reads.fresh(&key("bank", "s3"), at).is_none());
    }
}

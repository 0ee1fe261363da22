//! The job's worker token, kept in the Secret `<job>-worker-token`: the worker pods mount it,
//! the workers refuse requests that change something without it, and the operator sends it
//! (`POST /v1/checkpoints` before suspend). The rule itself is the contract's `worker_http`.
//!
//! Created once, by [`ensure`] during apply, from the operating system's CSPRNG, and never
//! rewritten: every later reconcile reads it back. It is not server-side applied like the other
//! objects, because an apply must send the token it wants, which would either rotate it on every
//! reconcile or need the read first anyway. Deleting the Secret rotates the token: the next
//! reconcile creates a new one, the kubelet updates the mounted file, and the worker reads that
//! file on each request.
//!
//! RBAC: `get` and `create` on Secrets, nothing else (no `list`/`watch`, so the operator does not
//! watch Secrets for this; a deleted one comes back at the next reconcile).

use crate::adapters::secret_reads::SecretReads;
use crate::k8s::apply::ApiError;
use crate::k8s::names;
use crate::k8s::ownership::{self, ForeignObject};
use crate::vocabulary::reasons;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use std::collections::BTreeMap;
use streamkeeper_contract::worker_http::{TOKEN_BYTES, TokenError, WorkerToken};

#[derive(Debug, thiserror::Error)]
pub enum WorkerTokenError {
    #[error(transparent)]
    Api(Box<ApiError>),
    #[error(
        "Secret {namespace}/{name} holds no usable worker token in key `{key}`: {reason}; delete it and the operator creates a new one"
    )]
    Unusable {
        namespace: String,
        name: String,
        key: &'static str,
        reason: String,
    },
    #[error("no random bytes for a new worker token: {0}")]
    Random(getrandom::Error),
    /// A Secret of the token's name that is not the job's: never read, never used.
    #[error(transparent)]
    Foreign(#[from] ForeignObject),
}

impl From<ApiError> for WorkerTokenError {
    fn from(error: ApiError) -> Self {
        WorkerTokenError::Api(Box::new(error))
    }
}

impl WorkerTokenError {
    /// The condition reason and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            WorkerTokenError::Api(_) | WorkerTokenError::Random(_) => reasons::API_ERROR,
            WorkerTokenError::Unusable { .. } => reasons::WORKER_TOKEN_UNUSABLE,
            WorkerTokenError::Foreign(_) => reasons::FOREIGN_OBJECT,
        }
    }
}

/// The token of job `job`, or `None` while its Secret does not exist: as `reads` keeps it
/// (the reconcile read it a moment ago, most often), or read now.
pub async fn read(
    (client, reads): (&Client, &SecretReads),
    namespace: &str,
    job: &str,
) -> Result<Option<WorkerToken>, WorkerTokenError> {
    let name = names::worker_token_secret(job);
    let secret = reads
        .get_opt(client, namespace, &name)
        .await
        .map_err(|source| WorkerTokenError::from(api_error("read", namespace, &name, source)))?;
    secret
        .map(|secret| token_of(&secret, namespace, &name))
        .transpose()
}

/// The token in `desired`'s Secret: read back when the Secret exists and is the job's (named by
/// `desired`'s owner reference, else [`WorkerTokenError::Foreign`]), otherwise created with a
/// new random token (and read back if another writer created it first).
pub async fn ensure(
    (client, reads): (&Client, &SecretReads),
    namespace: &str,
    desired: &Secret,
) -> Result<WorkerToken, WorkerTokenError> {
    let name = desired.metadata.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let existing = reads
        .get_opt(client, namespace, &name)
        .await
        .map_err(|source| api_error("read", namespace, &name, source))?;
    if let Some(secret) = existing {
        let owner = desired.metadata.owner_references.iter().flatten().next();
        let checked = match owner {
            Some(owner) => ownership::check("Secret", namespace, &secret.metadata, owner)
                .map_err(WorkerTokenError::from),
            None => Ok(()),
        };
        // A refused Secret is read again next time: it may be gone or fixed by then.
        let token = checked.and_then(|()| token_of(&secret, namespace, &name));
        if token.is_err() {
            reads.forget(namespace, &name);
        }
        return token;
    }
    let token = generate()?;
    let mut secret = desired.clone();
    secret.data = Some(BTreeMap::from([(
        names::WORKER_TOKEN_KEY.to_string(),
        ByteString(token.as_str().as_bytes().to_vec()),
    )]));
    match api.create(&PostParams::default(), &secret).await {
        Ok(created) => {
            tracing::info!(%namespace, secret = %name, "worker token created");
            // The job's failover loop reads it next: from here, not from the apiserver.
            reads.created(namespace, created);
            Ok(token)
        }
        // Another reconcile (a previous leader's, say) created it between the read and here.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let again = api
                .get(&name)
                .await
                .map_err(|source| api_error("read", namespace, &name, source))?;
            token_of(&again, namespace, &name)
        }
        Err(source) => Err(api_error("create", namespace, &name, source).into()),
    }
}

fn generate() -> Result<WorkerToken, WorkerTokenError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(WorkerTokenError::Random)?;
    Ok(WorkerToken::from_random_bytes(&bytes))
}

fn token_of(secret: &Secret, namespace: &str, name: &str) -> Result<WorkerToken, WorkerTokenError> {
    let unusable = |reason: String| WorkerTokenError::Unusable {
        namespace: namespace.to_string(),
        name: name.to_string(),
        key: names::WORKER_TOKEN_KEY,
        reason,
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|data| data.get(names::WORKER_TOKEN_KEY))
        .ok_or_else(|| unusable("the key is missing".into()))?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| unusable("not UTF-8".into()))?;
    WorkerToken::parse(text).map_err(|error: TokenError| unusable(error.to_string()))
}

fn api_error(action: &'static str, namespace: &str, name: &str, source: kube::Error) -> ApiError {
    ApiError {
        action,
        kind: "Secret".into(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(data: Option<&[u8]>) -> Secret {
        Secret {
            data: data.map(|bytes| {
                BTreeMap::from([(
                    names::WORKER_TOKEN_KEY.to_string(),
                    ByteString(bytes.to_vec()),
                )])
            }),
            ..Secret::default()
        }
    }

    #[test]
    fn generated_tokens_are_usable_and_differ() {
        let one = generate().unwrap();
        let two = generate().unwrap();
        assert_ne!(one, two);
        assert_eq!(WorkerToken::parse(one.as_str()).unwrap(), one);
    }

    #[test]
    fn a_secret_without_a_usable_token_names_the_fix() {
        for (data, says) in [
            (None, "the key is missing"),
            (Some(&b"short"[..]), "at least 32"),
            (Some(&[0xff, 0xfe][..]), "not UTF-8"),
        ] {
            let error = token_of(&secret(data), "payments", "card-count-worker-token").unwrap_err();
            let message = error.to_string();
            assert!(message.contains(says), "{message}");
            assert!(
                message.contains("payments/card-count-worker-token"),
                "{message}"
            );
            assert!(message.contains("delete it"), "{message}");
            assert_eq!(error.category(), reasons::WORKER_TOKEN_UNUSABLE);
        }
        let token = generate().unwrap();
        let stored = secret(Some(token.as_str().as_bytes()));
        assert_eq!(token_of(&stored, "payments", "t").unwrap(), token);
    }
}

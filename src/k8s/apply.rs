//! Writing to the apiserver the way every part of the operator does: server-side apply with one
//! field manager, forced, so a no-op reconcile sends the same intent and the apiserver stores
//! nothing; and one error type that names the object a request was about.

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// The one field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "streamkeeper-operator";

/// A failed write to the apiserver, naming the object.
#[derive(Debug, thiserror::Error)]
#[error("could not {action} {kind} {namespace}/{name}: {source}")]
pub struct ApiError {
    pub action: &'static str,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// Server-side apply of `object` (named, namespaced) with [`FIELD_MANAGER`], forced.
pub async fn server_side_apply<K>(
    client: &Client,
    namespace: &str,
    object: &K,
) -> Result<K, ApiError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|source| ApiError {
        action: "apply",
        kind: K::kind(&()).to_string(),
        namespace: namespace.to_string(),
        name,
        source,
    })
}

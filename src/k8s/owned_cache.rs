//! The watch caches of the objects the operator applies for its jobs: StatefulSets,
//! ConfigMaps, Services and PodDisruptionBudgets. The controller's watches of them, which
//! trigger a job's reconcile when one changes, feed these caches too
//! ([`crate::controller::run`]). The apply step reads them so that an object already as
//! desired is not applied again ([`super::unchanged`]).

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;

/// One cache per kind the operator applies.
pub struct OwnedCaches {
    pub stateful_sets: Store<StatefulSet>,
    pub config_maps: Store<ConfigMap>,
    pub services: Store<Service>,
    pub budgets: Store<PodDisruptionBudget>,
}

/// A kind the operator applies, and where its cache is.
pub trait CachedKind:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Sized + 'static
{
    fn cache(caches: &OwnedCaches) -> &Store<Self>;
}

impl CachedKind for StatefulSet {
    fn cache(caches: &OwnedCaches) -> &Store<Self> {
        &caches.stateful_sets
    }
}

impl CachedKind for ConfigMap {
    fn cache(caches: &OwnedCaches) -> &Store<Self> {
        &caches.config_maps
    }
}

impl CachedKind for Service {
    fn cache(caches: &OwnedCaches) -> &Store<Self> {
        &caches.services
    }
}

impl CachedKind for PodDisruptionBudget {
    fn cache(caches: &OwnedCaches) -> &Store<Self> {
        &caches.budgets
    }
}

impl OwnedCaches {
    /// The object `namespace`/`name` of kind `K` as the watch last saw it; `None` when the
    /// cache does not hold it (not there, or not seen yet: the first list is still running).
    pub fn get<K: CachedKind>(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        K::cache(self).get(&ObjectRef::new(name).within(namespace))
    }
}

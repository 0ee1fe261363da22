//! Whether an apply would change nothing, decided from the watch cache so that a reconcile in
//! steady state sends no request for the objects it owns (a fleet of 1,000 jobs reconciled
//! every minute would otherwise send 4,000 no-op applies a minute).
//!
//! Two checks, both needed:
//! - the object carries the hash of what the operator last built for it
//!   ([`APPLIED_HASH`]): a field the operator stopped setting is not in the new desired object,
//!   so only the hash shows that the last apply still holds it;
//! - every field of the desired object has its value in the object (the apiserver adds
//!   defaults and status, which are left alone): someone else's edit of a field the operator
//!   sets shows here, and the apply puts it back.
//!
//! When in doubt the answer is "changed", and the apply goes out as it always did: a value the
//! apiserver writes in another form (a quantity, say) costs a request, never correctness.

use kube::Resource;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The annotation holding the hash of the object as the operator last built it.
pub const APPLIED_HASH: &str = "streamkeeper.dev/applied-hash";

/// `object` as built, with its [`APPLIED_HASH`] annotation: what the operator applies.
pub fn with_applied_hash<K>(object: &K) -> K
where
    K: Resource + Serialize + Clone,
{
    let mut annotated = object.clone();
    let hash = built_hash(object);
    annotated
        .meta_mut()
        .annotations
        .get_or_insert_with(Default::default)
        .insert(APPLIED_HASH.to_string(), hash);
    annotated
}

/// Whether `current` (from the watch cache) already is `desired` (as [`with_applied_hash`]
/// returns it), so applying `desired` would change nothing.
pub fn already_applied<K>(desired: &K, current: &K) -> bool
where
    K: Resource + Serialize,
{
    let hash = |object: &K| {
        object
            .meta()
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(APPLIED_HASH).cloned())
    };
    let (Some(wanted), Some(held)) = (hash(desired), hash(current)) else {
        return false;
    };
    if wanted != held {
        return false;
    }
    match (serde_json::to_value(desired), serde_json::to_value(current)) {
        (Ok(desired), Ok(current)) => holds(&current, &desired),
        _ => false,
    }
}

/// The hash of `object` as built (without its own annotation): hex of the first 8 bytes of
/// the SHA-256 of its JSON. Objects serialize their maps in key order, so one object always
/// gives one hash.
fn built_hash<K: Serialize>(object: &K) -> String {
    let json = serde_json::to_vec(object).unwrap_or_default();
    Sha256::digest(&json)[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Whether `object` holds every field of `wanted` with its value. Lists must match item by
/// item (an item may hold more fields than wanted, as defaults add them); an empty list or map
/// in `wanted` matches an absent field, as the apiserver leaves those out.
fn holds(object: &Value, wanted: &Value) -> bool {
    match (object, wanted) {
        (Value::Object(object), Value::Object(wanted)) => {
            wanted.iter().all(|(key, value)| match object.get(key) {
                Some(found) => holds(found, value),
                None => is_empty(value),
            })
        }
        (Value::Array(object), Value::Array(wanted)) => {
            object.len() == wanted.len() && object.iter().zip(wanted).all(|(o, w)| holds(o, w))
        }
        (Value::Number(object), Value::Number(wanted)) => {
            object == wanted || object.as_f64() == wanted.as_f64()
        }
        (object, wanted) => object == wanted,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn config_map(data: &[(&str, &str)]) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": { "name": "card-count-config", "namespace": "shop",
                          "labels": { "app.kubernetes.io/managed-by": "streamkeeper" } },
            "data": data.iter().copied().collect::<std::collections::BTreeMap<_, _>>(),
        }))
        .unwrap()
    }

    /// `object` as the apiserver returns it: with defaults and fields the operator never set.
    fn as_stored(object: &ConfigMap) -> ConfigMap {
        let mut stored = object.clone();
        stored.metadata.resource_version = Some("812".into());
        stored.metadata.uid = Some("0b5e".into());
        stored
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("added-by".into(), "someone-else".into());
        stored
    }

    #[test]
    fn an_object_stored_as_built_is_already_applied() {
        let desired = with_applied_hash(&config_map(&[("worker.yaml", "a: 1")]));
        assert!(already_applied(&desired, &as_stored(&desired)));
    }

    #[test]
    fn a_changed_build_is_applied() {
        let stored = as_stored(&with_applied_hash(&config_map(&[("worker.yaml", "a: 1")])));
        let changed = with_applied_hash(&config_map(&[("worker.yaml", "a: 2")]));
        assert!(!already_applied(&changed, &stored));
    }

    #[test]
    fn a_field_the_operator_stopped_setting_is_applied_away() {
        // The new build is a subset of the stored object, so only the hash tells.
        let stored = as_stored(&with_applied_hash(&config_map(&[
            ("worker.yaml", "a: 1"),
            ("old.yaml", "b"),
        ])));
        let fewer = with_applied_hash(&config_map(&[("worker.yaml", "a: 1")]));
        assert!(!already_applied(&fewer, &stored));
    }

    #[test]
    fn someone_elses_edit_of_an_operator_field_is_applied_back() {
        let desired = with_applied_hash(&config_map(&[("worker.yaml", "a: 1")]));
        let mut edited = as_stored(&desired);
        edited
            .data
            .get_or_insert_with(Default::default)
            .insert("worker.yaml".into(), "a: 9".into());
        assert!(!already_applied(&desired, &edited));
    }

    #[test]
    fn an_object_without_the_hash_is_applied() {
        // An object applied by an operator version without the hash, or by hand.
        let desired = with_applied_hash(&config_map(&[("worker.yaml", "a: 1")]));
        assert!(!already_applied(
            &desired,
            &config_map(&[("worker.yaml", "a: 1")])
        ));
    }

    #[test]
    fn the_hash_is_of_the_build_alone() {
        let built = config_map(&[("worker.yaml", "a: 1")]);
        let once = with_applied_hash(&built);
        assert_eq!(
            built_hash(&built),
            built_hash(&config_map(&[("worker.yaml", "a: 1")]))
        );
        // The annotation holds the hash of the build, which does not hold the annotation.
        assert_eq!(
            once.metadata.annotations.as_ref().unwrap()[APPLIED_HASH],
            built_hash(&built)
        );
        assert_eq!(built_hash(&built).len(), 16);
    }

    #[test]
    fn lists_match_item_by_item_and_empty_wanted_fields_match_absent_ones() {
        let wanted = json!({ "ports": [{ "port": 8080 }], "tolerations": [], "selector": {} });
        let stored = json!({ "ports": [{ "port": 8080, "protocol": "TCP" }] });
        assert!(holds(&stored, &wanted));
        let more = json!({ "ports": [{ "port": 8080 }, { "port": 9090 }] });
        assert!(!holds(&more, &wanted), "a list with another item");
        assert!(
            !holds(&json!({}), &json!({ "replicas": 0 })),
            "zero is a value"
        );
        assert!(holds(&json!({ "weight": 1.0 }), &json!({ "weight": 1 })));
    }
}

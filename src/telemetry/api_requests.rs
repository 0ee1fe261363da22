//! The operator's own requests to the apiserver, counted by verb and resource
//! (`streamkeeper_operator_apiserver_requests_total`): what one operator costs the control
//! plane, without the other clients the apiserver's own counters mix in. A layer of the kube
//! client's service counts each request as it is sent.

use crate::telemetry::metrics::Metrics;
use http::{Method, Request};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// The verb and resource of a request, in the apiserver's own words (`list`, `watch`, `get`,
/// `apply`, `patch`, `create`, `update`, `delete`; `statefulsets`, `secrets/status`).
pub fn verb_and_resource(
    method: &Method,
    path: &str,
    query: Option<&str>,
    content_type: Option<&str>,
) -> (&'static str, String) {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return (verb_of(method, false, false, content_type), "other".into()),
    };
    // namespaces/<ns>/<resource>[/<name>[/<subresource>]], or a cluster-scoped resource.
    let rest = match rest {
        ["namespaces", _namespace, resource, more @ ..] => {
            let mut scoped = vec![*resource];
            scoped.extend_from_slice(more);
            scoped
        }
        other => other.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, subresource, ..] => (format!("{resource}/{subresource}"), true),
        [] => ("other".to_string(), false),
    };
    let watch = query.is_some_and(|query| query.split('&').any(|pair| pair == "watch=true"));
    (verb_of(method, named, watch, content_type), resource)
}

fn verb_of(method: &Method, named: bool, watch: bool, content_type: Option<&str>) -> &'static str {
    match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::PATCH if content_type == Some("application/apply-patch+yaml") => "apply",
        Method::PATCH => "patch",
        Method::POST => "create",
        Method::PUT => "update",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// Counts each request the wrapped service sends.
#[derive(Clone)]
pub struct CountedRequests {
    metrics: Arc<Metrics>,
}

impl CountedRequests {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for CountedRequests {
    type Service = CountedRequestsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountedRequestsService {
            inner,
            metrics: Arc::clone(&self.metrics),
        }
    }
}

#[derive(Clone)]
pub struct CountedRequestsService<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> Service<Request<B>> for CountedRequestsService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok());
        let (verb, resource) = verb_and_resource(
            request.method(),
            request.uri().path(),
            request.uri().query(),
            content_type,
        );
        self.metrics.apiserver_request(verb, resource);
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(method: Method, uri: &str, content_type: Option<&str>) -> (&'static str, String) {
        let (path, query) = match uri.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (uri, None),
        };
        verb_and_resource(&method, path, query, content_type)
    }

    #[test]
    fn requests_are_named_as_the_apiserver_names_them() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/shop/secrets/s3",
                None,
                "get",
                "secrets",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/shop/pods?labelSelector=a%3Db",
                None,
                "list",
                "pods",
            ),
            (
                Method::GET,
                "/api/v1/pods?watch=true&resourceVersion=5",
                None,
                "watch",
                "pods",
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/shop/statefulsets/card-count?fieldManager=x&force=true",
                Some("application/apply-patch+yaml"),
                "apply",
                "statefulsets",
            ),
            (
                Method::PATCH,
                "/apis/streamkeeper.dev/v1alpha1/namespaces/shop/statefulstreamjobs/card-count/status",
                Some("application/merge-patch+json"),
                "patch",
                "statefulstreamjobs/status",
            ),
            (
                Method::POST,
                "/api/v1/namespaces/shop/events",
                None,
                "create",
                "events",
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ops/leases/sk",
                None,
                "update",
                "leases",
            ),
            (Method::GET, "/api/v1/nodes/node-1", None, "get", "nodes"),
            (
                Method::DELETE,
                "/api/v1/namespaces/shop/pods/card-count-0",
                None,
                "delete",
                "pods",
            ),
            (Method::GET, "/version", None, "list", "other"),
        ];
        for (method, uri, content_type, verb, resource) in cases {
            assert_eq!(
                classify(method, uri, content_type),
                (verb, resource.to_string()),
                "{uri}"
            );
        }
    }
}

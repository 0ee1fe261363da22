//! The headless Service `<job>`: gives each worker pod a stable DNS name
//! (`<job>-<i>.<job>.<namespace>.svc`) and is the StatefulSet's `serviceName`.

use crate::controller::build::owned_metadata;
use crate::controller::valid_job::ValidatedJob;
use crate::k8s::labels;
use crate::k8s::names;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub fn build(job: &ValidatedJob) -> Service {
    Service {
        metadata: owned_metadata(job, names::service(&job.name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(labels::selector(&job.name)),
            ports: Some(vec![ServicePort {
                name: Some(names::HTTP_PORT_NAME.into()),
                port: names::HTTP_PORT,
                target_port: Some(IntOrString::String(names::HTTP_PORT_NAME.into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            // A restoring pod is not ready but must still be reachable (metrics, /v1/tasks
            // progress) by its stable name.
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::{self, json, yaml};

    #[test]
    fn is_headless_and_publishes_not_ready_pods() {
        let service = build(&test_support::validated());
        assert_eq!(service.metadata.name.as_deref(), Some("card-count"));
        assert_eq!(
            json(&service.spec),
            yaml(
                r#"
clusterIP: None
publishNotReadyAddresses: true
selector:
  app.kubernetes.io/instance: card-count
  app.kubernetes.io/name: streamkeeper-worker
ports:
  - name: http
    port: 8080
    targetPort: http
    protocol: TCP
"#
            )
        );
    }
}

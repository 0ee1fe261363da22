//! A held Lease is renewed on a thread of its own (`leader::renewals`): a runtime thread kept
//! busy, as a fleet's reconciles keep the controller's, does not make the leader lose it.
//! Against the real apiserver.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "operator_support/mod.rs"]
mod operator_support;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use operator_support::{client, namespace};
use std::time::{Duration, Instant};
use streamkeeper::leader::{LeaderElector, Leadership, LeaseSettings, Renewals};

/// The Lease's holder and renew time.
async fn record(leases: &Api<Lease>, name: &str) -> (Option<String>, Option<String>) {
    let spec = leases.get(name).await.unwrap().spec.unwrap_or_default();
    (
        spec.holder_identity,
        spec.renew_time.map(|time| time.0.to_string()),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn the_lease_is_renewed_while_the_runtime_is_blocked_and_released_at_the_end() {
    let admin = client().await;
    let ns = namespace(&admin, "renewals").await;
    let settings = LeaseSettings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
        ..LeaseSettings::new(ns.clone(), "renewals".into(), "me".into())
    };
    let leadership = Leadership::elected();
    let elector = LeaderElector::new(admin.clone(), settings.clone(), leadership.clone());
    let (_never, mut stop) = tokio::sync::watch::channel(false);
    assert!(elector.acquire(&mut stop).await, "acquires the Lease");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let acquired = record(&leases, "renewals").await;

    let config = kube::Config::infer().await.unwrap();
    let mut renewals = Renewals::start(config, settings, leadership.clone()).unwrap();
    // This test's only runtime thread does nothing else for twice the renew deadline, as a
    // long poll of the controller would: a renewal on it would be too late.
    std::thread::sleep(Duration::from_secs(4));
    let valid = leadership.valid_until();
    assert!(
        valid.is_some_and(|until| until > Instant::now()),
        "still leading after the runtime was blocked for 4 s (renew deadline 2 s): {valid:?}"
    );
    let renewed = record(&leases, "renewals").await;
    assert_eq!(renewed.0.as_deref(), Some("me"));
    assert_ne!(renewed.1, acquired.1, "the renew time moved meanwhile");
    assert!(
        tokio::time::timeout(Duration::from_secs(1), renewals.lost())
            .await
            .is_err(),
        "no loss reported"
    );

    renewals.release().await.unwrap();
    assert!(
        leadership.check().is_err(),
        "no write allowed once released"
    );
    let released = record(&leases, "renewals").await;
    assert_eq!(
        released.0, None,
        "the Lease has no holder after the release"
    );
    operator_support::delete_namespace(&admin, &ns).await;
}

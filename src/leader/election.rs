//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
//! the holder renews `renewTime` every few seconds; a candidate takes the Lease over only after
//! the record has not changed for a whole `leaseDurationSeconds` **as measured by its own
//! clock** (so clock skew between replicas cannot make two leaders), and every write is a
//! compare-and-swap on `resourceVersion` (so two candidates cannot both win).
//!
//! The holder may write only until the renew deadline after the start of its last successful
//! renewal ([`Leadership`], checked at each write), which is shorter than the lease duration: it
//! has stopped before anyone else may start, even when it was frozen and wakes up late. Every
//! attempt is bounded by that deadline, so a request that hangs cannot keep it leading.

use crate::leader::Leadership;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// This process, e.g. the pod name; must differ between replicas.
    pub identity: String,
    /// How long a record that stopped changing is still honoured by the others.
    pub lease_duration: Duration,
    /// The holder gives up leadership when it could not renew for this long (< lease_duration).
    pub renew_deadline: Duration,
    /// Time between attempts (acquire or renew).
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(namespace: String, name: String, identity: String) -> Self {
        Self {
            namespace,
            name,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("Lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Lease {namespace}/{name}: no answer within {timeout:?}")]
    Timeout {
        namespace: String,
        name: String,
        timeout: Duration,
    },
}

/// The last record seen and when this process saw it change.
struct Observed {
    record: (Option<String>, Option<Timestamp>, Option<i32>),
    since: Instant,
}

pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Mutex<Option<Observed>>,
    leadership: Leadership,
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

impl LeaderElector {
    /// `client` must not be the write-guarded one: the Lease is how leadership is kept.
    /// `leadership` is extended on each renewal and revoked when it is lost.
    pub fn new(client: Client, settings: LeaseSettings, leadership: Leadership) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: Mutex::new(None),
            leadership,
        }
    }

    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    fn error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            source,
        }
    }

    /// `attempt`, given up after `timeout` (`Err(LeaseError::Timeout)`).
    async fn bounded<T>(
        &self,
        timeout: Duration,
        attempt: impl Future<Output = Result<T, LeaseError>>,
    ) -> Result<T, LeaseError> {
        tokio::time::timeout(timeout, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(LeaseError::Timeout {
                    namespace: self.settings.namespace.clone(),
                    name: self.settings.name.clone(),
                    timeout,
                })
            })
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// One attempt to acquire or renew. `Ok(true)`: this process holds the Lease now.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaseError> {
        let now = Timestamp::now();
        let Some(mut lease) = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.error(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.settings.identity.clone()),
                    lease_duration_seconds: Some(self.lease_seconds()),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(error) if is_conflict(&error) => Ok(false),
                Err(error) => Err(self.error(error)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.settings.identity.as_str());
        if !ours && holder.is_some() && !self.expired(&spec) {
            return Ok(false);
        }
        let mut next = spec;
        if !ours {
            next.acquire_time = Some(MicroTime(now));
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0).saturating_add(1));
            next.holder_identity = Some(self.settings.identity.clone());
        }
        next.renew_time = Some(MicroTime(now));
        next.lease_duration_seconds = Some(self.lease_seconds());
        lease.spec = Some(next);
        // `replace` sends the resourceVersion read above: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(error) if is_conflict(&error) => Ok(false),
            Err(error) => Err(self.error(error)),
        }
    }

    /// Whether another holder's record has stayed unchanged for a whole lease duration (of the
    /// holder's own declared duration, when longer) by this process's clock.
    fn expired(&self, spec: &LeaseSpec) -> bool {
        self.expired_at(spec, Instant::now())
    }

    fn expired_at(&self, spec: &LeaseSpec, now: Instant) -> bool {
        let record = (
            spec.holder_identity.clone(),
            spec.renew_time.as_ref().map(|t| t.0),
            spec.lease_transitions,
        );
        let declared = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.settings.lease_duration);
        let duration = declared.max(self.settings.lease_duration);
        let mut observed = self
            .observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match observed.as_ref() {
            Some(seen) if seen.record == record => {
                now.saturating_duration_since(seen.since) >= duration
            }
            _ => {
                *observed = Some(Observed { record, since: now });
                false
            }
        }
    }

    /// Gives the Lease up (holder cleared, so a waiting replica takes over at its next attempt
    /// instead of after the lease duration). Only clears it if this process still holds it.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.error(e))?
        else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if is_conflict(&error) => Ok(()),
            Err(error) => Err(self.error(error)),
        }
    }

    /// Waits until this process holds the Lease (`true`) or `stop` fires first (`false`).
    /// Each attempt is bounded by the renew deadline; a success extends [`Leadership`].
    pub async fn acquire(&self, stop: &mut tokio::sync::watch::Receiver<bool>) -> bool {
        loop {
            let started = Instant::now();
            let attempt = self.try_acquire_or_renew();
            match self.bounded(self.settings.renew_deadline, attempt).await {
                Ok(true) => {
                    self.leadership
                        .renewed(started, self.settings.renew_deadline);
                    return true;
                }
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, "leader election attempt failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.retry_period) => {}
                _ = stop.wait_for(|stop| *stop) => return false,
            }
        }
    }

    /// Renews every retry period while leading, each attempt bounded by what is left of the
    /// renew deadline; returns (with [`Leadership`] revoked) as soon as leadership is lost.
    pub async fn keep_renewing(&self) -> Lost {
        loop {
            let Some(valid_until) = self.leadership.valid_until() else {
                return self.lost(Lost::DeadlinePassed);
            };
            // Wake at the deadline too: a process that slept through it must not renew first.
            let deadline = tokio::time::Instant::from_std(valid_until);
            tokio::select! {
                _ = tokio::time::sleep(self.settings.retry_period) => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
            let started = Instant::now();
            let Some(left) = valid_until
                .checked_duration_since(started)
                .filter(|d| !d.is_zero())
            else {
                return self.lost(Lost::DeadlinePassed);
            };
            match self.bounded(left, self.try_acquire_or_renew()).await {
                Ok(true) => self
                    .leadership
                    .renewed(started, self.settings.renew_deadline),
                Ok(false) => return self.lost(Lost::TakenOver),
                Err(LeaseError::Timeout { .. }) => return self.lost(Lost::DeadlinePassed),
                Err(error) => tracing::warn!(%error, "renewing the leader Lease failed"),
            }
        }
    }

    fn lost(&self, why: Lost) -> Lost {
        self.leadership.revoke();
        why
    }

    /// Gives the Lease up (see [`Self::release`]), bounded by the renew deadline; writes are
    /// refused from the start.
    pub async fn give_up(&self) -> Result<(), LeaseError> {
        self.leadership.revoke();
        self.bounded(self.settings.renew_deadline, self.release())
            .await
    }
}

/// Why [`LeaderElector::keep_renewing`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    #[error("no renewal succeeded within the renew deadline")]
    DeadlinePassed,
    #[error("another process holds the Lease")]
    TakenOver,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elector(lease_duration: Duration) -> LeaderElector {
        // A client that is never used for a request: `expired` is pure bookkeeping.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let settings = LeaseSettings {
            lease_duration,
            ..LeaseSettings::new("ns".into(), "lease".into(), "me".into())
        };
        LeaderElector::new(client, settings, Leadership::elected())
    }

    fn spec(holder: &str, renew_second: i64, duration_seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(Timestamp::from_second(renew_second).unwrap())),
            lease_duration_seconds: Some(duration_seconds),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }
    }

    fn after(start: Instant, seconds: u64) -> Instant {
        start + Duration::from_secs(seconds)
    }

    #[tokio::test]
    async fn a_record_expires_only_after_it_stopped_changing_for_the_lease_duration() {
        let elector = elector(Duration::from_secs(15));
        let start = Instant::now();
        // The holder's clock says the renewal is ancient; only our own observation counts.
        let stale_looking = spec("other", 0, 15);
        assert!(
            !elector.expired_at(&stale_looking, start),
            "first sight is never expired"
        );
        assert!(!elector.expired_at(&stale_looking, after(start, 14)));
        assert!(elector.expired_at(&stale_looking, after(start, 15)));

        // A renewal (changed record) restarts the wait.
        let renewed = spec("other", 1, 15);
        assert!(!elector.expired_at(&renewed, after(start, 16)));
        assert!(!elector.expired_at(&renewed, after(start, 30)));
        assert!(elector.expired_at(&renewed, after(start, 31)));
    }

    #[tokio::test]
    async fn a_longer_declared_duration_is_honoured() {
        let elector = elector(Duration::from_secs(15));
        let start = Instant::now();
        let long = spec("other", 0, 60);
        assert!(!elector.expired_at(&long, start));
        assert!(!elector.expired_at(&long, after(start, 30)));
        assert!(elector.expired_at(&long, after(start, 60)));
    }
}

//! The renewals of a held Lease, on a thread and a runtime of their own.
//!
//! The operator's runtime runs every reconcile, watch and failover loop, and the controller's
//! reconciles and watches are polled together on one thread. A renewal that waits for that
//! thread is late exactly when the operator is busiest: with `tests/bench.sh fleet` growing from
//! 500 to 1,000 jobs (4,000 pods), the leader lost its Lease ("no renewal succeeded within the
//! renew deadline") while the apiserver logged no slow request at all. Here a renewal waits only
//! for its own timer and the apiserver's answer.
//!
//! When the process stops (SIGTERM), the same thread stops renewing and then releases the
//! Lease, so no renewal can follow the release.

use crate::leader::{LeaderElector, Leadership, LeaseError, LeaseSettings, Lost};
use tokio::sync::oneshot;

/// Why the renewal thread could not start.
#[derive(Debug, thiserror::Error)]
pub enum RenewalsError {
    #[error("could not start the Lease's renewal thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("could not make the Lease renewals' client: {0}")]
    Client(#[source] kube::Error),
}

/// The renewal thread of a held Lease.
pub struct Renewals {
    leadership: Leadership,
    release: Option<oneshot::Sender<()>>,
    ended: oneshot::Receiver<Ended>,
}

/// How the renewal thread ended.
enum Ended {
    Lost(Lost),
    Released(Result<(), LeaseError>),
}

impl Renewals {
    /// Starts renewing the Lease of `settings`, which this process holds, on a new thread,
    /// with a client of the thread's own: a kube client's request queue and connections live on
    /// the runtime that made them, and one made on the busy runtime would wait for it.
    pub fn start(
        config: kube::Config,
        settings: LeaseSettings,
        leadership: Leadership,
    ) -> Result<Self, RenewalsError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(RenewalsError::Thread)?;
        let client = {
            let _on_this_runtime = runtime.enter();
            kube::Client::try_from(config).map_err(RenewalsError::Client)?
        };
        let elector = LeaderElector::new(client, settings, leadership.clone());
        let (release, released) = oneshot::channel();
        let (report, ended) = oneshot::channel();
        std::thread::Builder::new()
            .name("lease-renewals".into())
            .spawn(move || {
                let outcome = runtime.block_on(async {
                    tokio::select! {
                        lost = elector.keep_renewing() => Ended::Lost(lost),
                        _ = released => Ended::Released(elector.give_up().await),
                    }
                });
                let _ = report.send(outcome);
            })
            .map_err(RenewalsError::Thread)?;
        Ok(Self {
            leadership,
            release: Some(release),
            ended,
        })
    }

    /// What the renewals extend, and every write checks.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// Resolves when the Lease is lost (its leadership revoked by then).
    pub async fn lost(&mut self) -> Lost {
        match (&mut self.ended).await {
            Ok(Ended::Lost(lost)) => lost,
            // Only `release` asks the thread to release, and it takes `self`; a thread that
            // ended otherwise (it panicked) renews no more.
            Ok(Ended::Released(_)) | Err(_) => {
                self.leadership.revoke();
                Lost::DeadlinePassed
            }
        }
    }

    /// Stops renewing, then releases the Lease (bounded by the renew deadline; writes are
    /// refused from the start). `Ok` also when it was lost before: nothing is held then.
    pub async fn release(mut self) -> Result<(), LeaseError> {
        // The thread revokes the leadership itself, once it renews no more: revoked here, a
        // renewal due at this instant would end the thread as lost, with the Lease held.
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        match self.ended.await {
            Ok(Ended::Released(released)) => released,
            Ok(Ended::Lost(_)) | Err(_) => Ok(()),
        }
    }
}

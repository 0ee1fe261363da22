//! Whether this process may write right now, checked at the moment of every write.
//!
//! A leader that is frozen (SIGSTOP, a stalled VM, a long GC-like pause of the runtime) or cut
//! off from the apiserver wakes up with reconciles in flight and timers long past due; telling it
//! "you lost" through a channel arrives after those reconciles have already sent their writes.
//! So leadership is a deadline on the monotonic clock instead: the start of the last successful
//! renewal plus the renew deadline. The others may take over only a whole lease duration after
//! they saw that renewal, which came after its start, so until the deadline no one else leads.
//! Every write (each non-read request of the kube client, each Kafka topic create or delete, each
//! S3 delete, each worker checkpoint call) checks the deadline first, so a process that wakes up
//! late finds it passed before it can send anything.

use http::{Method, Request};
use kube::client::{ClientBuilder, DynBody};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower_layer::Layer;
use tower_service::Service;

/// Refused: this process does not lead (any more).
#[derive(Debug, Clone, thiserror::Error)]
#[error("not leading: {reason}; the write was not sent")]
pub struct NotLeading {
    reason: &'static str,
}

#[derive(Debug)]
enum Mode {
    /// No election (tests, benches, one-off tools): every write is allowed.
    Unconditional,
    /// Writes are allowed until this instant (`None`: never led, or lost).
    Elected(Mutex<Option<Instant>>),
}

/// Shared by the elector (which extends or revokes it) and every writer (which checks it).
#[derive(Debug, Clone)]
pub struct Leadership {
    mode: Arc<Mode>,
}

impl Leadership {
    /// Always allows writes: for code that runs without leader election.
    pub fn unconditional() -> Self {
        Self {
            mode: Arc::new(Mode::Unconditional),
        }
    }

    /// Allows writes only while an elector keeps extending it; starts revoked.
    pub fn elected() -> Self {
        Self {
            mode: Arc::new(Mode::Elected(Mutex::new(None))),
        }
    }

    fn deadline(&self) -> Option<std::sync::MutexGuard<'_, Option<Instant>>> {
        match self.mode.as_ref() {
            Mode::Unconditional => None,
            Mode::Elected(until) => Some(
                until
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            ),
        }
    }

    /// `Ok` while this process may write; checked right before each write.
    pub fn check(&self) -> Result<(), NotLeading> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), NotLeading> {
        let Some(until) = self.deadline() else {
            return Ok(());
        };
        match *until {
            Some(until) if now < until => Ok(()),
            Some(_) => Err(NotLeading {
                reason: "the renew deadline passed without a successful renewal",
            }),
            None => Err(NotLeading {
                reason: "this process does not hold the leader Lease",
            }),
        }
    }

    /// The instant writes stop being allowed, if this process leads.
    pub fn valid_until(&self) -> Option<Instant> {
        self.deadline().and_then(|until| *until)
    }

    /// A renewal that was sent at `started` succeeded: writes are allowed until `started +
    /// renew_deadline`. Never moves the deadline back (a late answer to an older renewal).
    pub fn renewed(&self, started: Instant, renew_deadline: Duration) {
        if let Some(mut until) = self.deadline() {
            let next = started + renew_deadline;
            *until = Some(until.map_or(next, |current| current.max(next)));
        }
    }

    /// Leadership is lost (or given up): no write is allowed from now on.
    pub fn revoke(&self) {
        if let Some(mut until) = self.deadline() {
            *until = None;
        }
    }
}

/// Wraps the kube client's service so that every request that may change something (anything
/// but GET, HEAD and OPTIONS) is refused, unsent, when [`Leadership::check`] fails.
#[derive(Debug, Clone)]
pub struct LeaderOnlyWrites {
    leadership: Leadership,
}

impl LeaderOnlyWrites {
    pub fn new(leadership: Leadership) -> Self {
        Self { leadership }
    }
}

impl<S> Layer<S> for LeaderOnlyWrites {
    type Service = LeaderOnlyWritesService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LeaderOnlyWritesService {
            inner,
            leadership: self.leadership.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LeaderOnlyWritesService<S> {
    inner: S,
    leadership: Leadership,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S, B> Service<Request<B>> for LeaderOnlyWritesService<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !is_read(request.method())
            && let Err(refused) = self.leadership.check()
        {
            tracing::warn!(method = %request.method(), uri = %request.uri(), %refused, "write refused");
            return Box::pin(std::future::ready(Err(Box::new(refused) as BoxError)));
        }
        let call = self.inner.call(request);
        Box::pin(async move { call.await.map_err(Into::into) })
    }
}

/// A kube client whose requests that may change something are sent only while `leadership`
/// allows. Its built-in retry of 429/503/504 is off, because a retry inside the client would be
/// sent without passing the check again; the controller's backoff retries instead.
pub fn leader_only_client(
    config: kube::Config,
    leadership: &Leadership,
) -> Result<kube::Client, kube::Error> {
    Ok(leader_only_builder(config, leadership)?.build())
}

/// The kube client's service behind the write guard, which more layers may wrap.
pub trait GuardedService:
    Service<
        Request<kube::client::Body>,
        Response = http::Response<Box<DynBody>>,
        Error = BoxError,
        Future: Send + 'static,
    > + Send
    + 'static
{
}

impl<S> GuardedService for S where
    S: Service<
            Request<kube::client::Body>,
            Response = http::Response<Box<DynBody>>,
            Error = BoxError,
            Future: Send + 'static,
        > + Send
        + 'static
{
}

/// The builder of a [`leader_only_client`], for more layers on top (the binary counts its
/// requests).
pub fn leader_only_builder(
    mut config: kube::Config,
    leadership: &Leadership,
) -> Result<ClientBuilder<impl GuardedService>, kube::Error> {
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)?.with_layer(&LeaderOnlyWrites::new(leadership.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_allowed_only_until_the_renew_deadline_after_the_renewal_started() {
        let leadership = Leadership::elected();
        let start = Instant::now();
        assert!(
            leadership.check_at(start).is_err(),
            "not leading before the first renewal"
        );
        leadership.renewed(start, Duration::from_secs(10));
        assert!(leadership.check_at(start + Duration::from_secs(9)).is_ok());
        assert!(
            leadership
                .check_at(start + Duration::from_secs(10))
                .is_err()
        );
        // A late answer to an older renewal does not shorten the deadline.
        leadership.renewed(start + Duration::from_secs(5), Duration::from_secs(10));
        leadership.renewed(start, Duration::from_secs(10));
        assert!(leadership.check_at(start + Duration::from_secs(14)).is_ok());
        leadership.revoke();
        assert!(leadership.check_at(start).is_err(), "revoked at once");
    }

    #[test]
    fn without_election_every_write_is_allowed() {
        let leadership = Leadership::unconditional();
        leadership.revoke();
        assert!(leadership.check().is_ok());
        assert_eq!(leadership.valid_until(), None);
    }
}

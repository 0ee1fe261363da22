//! One S3 client per server and credentials, kept for every reconcile that reads there.
//!
//! A client holds its connection pool: a client built for each reconcile opened new
//! connections (and, against a TLS endpoint, did a new handshake) for every job every minute,
//! and with ambient credentials it ran the AWS credential chain again each time. Clients are
//! kept by everything that makes them differ (endpoint, region, addressing style and the access
//! keys), so a rotated Secret gets a client of its own at once. At most 256 are kept; past that
//! the set starts afresh, which costs only new connections.

use super::checkpoints::{S3AccessKeys, S3Location};
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// More than the distinct servers and credentials a fleet uses; a bound on what is held.
const CLIENTS_KEPT: usize = 256;

/// What makes two clients differ.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    endpoint: Option<String>,
    region: String,
    path_style: bool,
    keys: Option<S3AccessKeys>,
}

/// The S3 clients kept, by server and credentials.
#[derive(Default)]
pub struct S3Clients {
    clients: Mutex<HashMap<ClientKey, Client>>,
}

impl S3Clients {
    fn clients(&self) -> MutexGuard<'_, HashMap<ClientKey, Client>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The client for `settings`' server with `keys`, or the ambient AWS credentials when there
    /// are none: what the operator reads a job's objects with (checkpoints, its module).
    pub async fn client(&self, settings: &S3Location, keys: Option<S3AccessKeys>) -> Client {
        let key = ClientKey {
            endpoint: settings.endpoint.clone(),
            region: settings.region.clone(),
            path_style: settings.path_style,
            keys,
        };
        if let Some(client) = self.clients().get(&key) {
            return client.clone();
        }
        // Built without the lock held: the ambient credential chain may take a while.
        let client = build(&key).await;
        let mut clients = self.clients();
        if clients.len() >= CLIENTS_KEPT {
            clients.clear();
        }
        clients.entry(key).or_insert(client).clone()
    }

    /// How many clients are kept (for the tests: what the bound is about).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.clients().len()
    }
}

async fn build(key: &ClientKey) -> Client {
    let mut config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(key.region.clone()))
        .force_path_style(key.path_style);
    if let Some(endpoint) = &key.endpoint {
        config = config.endpoint_url(endpoint);
    }
    config = match &key.keys {
        Some(keys) => config.credentials_provider(Credentials::new(
            keys.access_key_id.clone(),
            keys.secret_access_key.clone(),
            None,
            None,
            "streamkeeper-job-secret",
        )),
        None => {
            let ambient = aws_config::defaults(BehaviorVersion::latest()).load().await;
            match ambient.credentials_provider() {
                Some(provider) => config.credentials_provider(provider),
                None => config,
            }
        }
    };
    Client::from_conf(config.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(endpoint: &str) -> S3Location {
        S3Location {
            bucket: "checkpoints".into(),
            prefix: "p".into(),
            endpoint: Some(endpoint.into()),
            region: "us-east-1".into(),
            path_style: true,
        }
    }

    fn keys(secret: &str) -> Option<S3AccessKeys> {
        Some(S3AccessKeys {
            access_key_id: "id".into(),
            secret_access_key: secret.into(),
        })
    }

    #[tokio::test]
    async fn one_client_per_server_and_credentials() {
        let clients = S3Clients::default();
        let here = location("http://s3.storage:8333");
        clients.client(&here, keys("a")).await;
        clients.client(&here, keys("a")).await;
        // Another bucket or prefix on the same server shares the client.
        let other_bucket = S3Location {
            bucket: "other".into(),
            prefix: "q".into(),
            ..here.clone()
        };
        clients.client(&other_bucket, keys("a")).await;
        assert_eq!(clients.len(), 1);
        // A rotated secret, or another server, gets a client of its own.
        clients.client(&here, keys("b")).await;
        clients
            .client(&location("http://elsewhere:9000"), keys("a"))
            .await;
        assert_eq!(clients.len(), 3);
    }

    #[tokio::test]
    async fn what_is_kept_is_bounded() {
        let clients = S3Clients::default();
        for n in 0..CLIENTS_KEPT + 3 {
            clients
                .client(&location("http://s3:8333"), keys(&n.to_string()))
                .await;
        }
        assert!(clients.len() <= CLIENTS_KEPT, "{} kept", clients.len());
    }
}

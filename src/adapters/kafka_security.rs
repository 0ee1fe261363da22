//! TLS and SASL for the operator's own Kafka client, from the same Secrets the workers mount
//! (`spec.kafka.tls`, `spec.kafka.sasl`). The operator reads them through the API and hands the
//! PEM text and credentials to librdkafka directly (`ssl.*.pem`, `sasl.*`), so nothing secret
//! is written to disk.

use crate::adapters::secret_reads::SecretReads;
use crate::api::{KafkaSaslSpec, KafkaTlsSpec, SaslMechanism, SecretKeyRef};
use kube::Client;
use rdkafka::config::ClientConfig;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

/// What a Kafka client of the operator needs beyond the bootstrap list.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct KafkaClientSecurity {
    pub tls: Option<TlsMaterial>,
    pub sasl: Option<SaslCredentials>,
}

#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct TlsMaterial {
    /// CA certificates (PEM); the system roots when absent.
    pub ca_pem: Option<String>,
    /// Client certificate and key (PEM), for mutual TLS.
    pub client: Option<(String, String)>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SaslCredentials {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

// Secrets stay out of logs and error messages.
impl std::fmt::Debug for KafkaClientSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaClientSecurity")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(|s| s.mechanism))
            .finish()
    }
}

/// A Secret (or a key in it) the job names could not be read.
#[derive(Debug, thiserror::Error)]
#[error("Kafka credentials: Secret {namespace}/{name}: {reason}")]
pub struct KafkaSecretError {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

impl KafkaClientSecurity {
    /// The librdkafka settings: `security.protocol` and what it needs.
    pub fn apply(&self, config: &mut ClientConfig) {
        let protocol = match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        config.set("security.protocol", protocol);
        if let Some(tls) = &self.tls {
            if let Some(ca) = &tls.ca_pem {
                config.set("ssl.ca.pem", ca);
            }
            if let Some((certificate, key)) = &tls.client {
                config.set("ssl.certificate.pem", certificate);
                config.set("ssl.key.pem", key);
            }
        }
        if let Some(sasl) = &self.sasl {
            config.set("sasl.mechanism", mechanism_name(sasl.mechanism));
            config.set("sasl.username", &sasl.username);
            config.set("sasl.password", &sasl.password);
        }
    }

    /// Distinguishes clients of one bootstrap list with different credentials, without keeping
    /// the credentials themselves in the key.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }

    /// Reads the Secrets `tls` and `sasl` name, in `namespace`. `None` without either.
    pub async fn read(
        (client, reads): (&Client, &SecretReads),
        namespace: &str,
        tls: Option<&KafkaTlsSpec>,
        sasl: Option<&KafkaSaslSpec>,
    ) -> Result<Option<Self>, KafkaSecretError> {
        if tls.is_none() && sasl.is_none() {
            return Ok(None);
        }
        let mut secrets = SecretCache::new((client, reads), namespace);
        let tls = match tls {
            None => None,
            Some(spec) => Some(TlsMaterial {
                ca_pem: match &spec.ca {
                    Some(key) => Some(secrets.value(&key.name, &key.key).await?),
                    None => None,
                },
                client: match (&spec.certificate, &spec.private_key) {
                    (Some(certificate), Some(key)) => Some((
                        secrets.key_ref(certificate).await?,
                        secrets.key_ref(key).await?,
                    )),
                    _ => None,
                },
            }),
        };
        let sasl = match sasl {
            None => None,
            Some(spec) => Some(SaslCredentials {
                mechanism: spec.mechanism,
                username: secrets.value(&spec.secret_name, &spec.username_key).await?,
                password: secrets.value(&spec.secret_name, &spec.password_key).await?,
            }),
        };
        Ok(Some(Self { tls, sasl }))
    }
}

pub fn mechanism_name(mechanism: SaslMechanism) -> &'static str {
    match mechanism {
        SaslMechanism::Plain => "PLAIN",
        SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
        SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
    }
}

/// Reads each Secret once per reconcile, or not at all while [`SecretReads`] keeps it.
struct SecretCache<'a> {
    client: &'a Client,
    reads: &'a SecretReads,
    namespace: &'a str,
    read: BTreeMap<String, BTreeMap<String, String>>,
}

impl<'a> SecretCache<'a> {
    fn new((client, reads): (&'a Client, &'a SecretReads), namespace: &'a str) -> Self {
        Self {
            client,
            reads,
            namespace,
            read: BTreeMap::new(),
        }
    }

    async fn key_ref(&mut self, key: &SecretKeyRef) -> Result<String, KafkaSecretError> {
        self.value(&key.name, &key.key).await
    }

    async fn value(&mut self, name: &str, key: &str) -> Result<String, KafkaSecretError> {
        let failure = |reason: String| KafkaSecretError {
            namespace: self.namespace.to_string(),
            name: name.to_string(),
            reason,
        };
        if !self.read.contains_key(name) {
            let secret = self
                .reads
                .get_opt(self.client, self.namespace, name)
                .await
                .map_err(|e| failure(format!("could not be read: {e}")))?
                .ok_or_else(|| failure("does not exist".into()))?;
            let data = secret
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            self.read.insert(name.to_string(), data);
        }
        self.read
            .get(name)
            .and_then(|data| data.get(key))
            .map(|value| value.trim_end_matches(['\r', '\n']).to_string())
            .ok_or_else(|| failure(format!("has no key {key}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(security: &KafkaClientSecurity) -> BTreeMap<String, String> {
        let mut config = ClientConfig::new();
        security.apply(&mut config);
        config
            .config_map()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn protocol_and_settings_follow_what_is_given() {
        let sasl = SaslCredentials {
            mechanism: SaslMechanism::ScramSha512,
            username: "u".into(),
            password: "p".into(),
        };
        let tls = TlsMaterial {
            ca_pem: Some("CA".into()),
            client: Some(("CERT".into(), "KEY".into())),
        };
        let both = settings(&KafkaClientSecurity {
            tls: Some(tls.clone()),
            sasl: Some(sasl.clone()),
        });
        assert_eq!(both["security.protocol"], "sasl_ssl");
        assert_eq!(both["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(both["ssl.ca.pem"], "CA");
        assert_eq!(both["ssl.key.pem"], "KEY");
        let tls_only = settings(&KafkaClientSecurity {
            tls: Some(tls),
            sasl: None,
        });
        assert_eq!(tls_only["security.protocol"], "ssl");
        assert!(!tls_only.contains_key("sasl.username"));
        let sasl_only = settings(&KafkaClientSecurity {
            tls: None,
            sasl: Some(sasl),
        });
        assert_eq!(sasl_only["security.protocol"], "sasl_plaintext");
    }

    #[test]
    fn the_fingerprint_tells_credentials_apart_and_debug_hides_them() {
        let with = |password: &str| KafkaClientSecurity {
            tls: None,
            sasl: Some(SaslCredentials {
                mechanism: SaslMechanism::Plain,
                username: "u".into(),
                password: password.into(),
            }),
        };
        assert_ne!(with("a").fingerprint(), with("b").fingerprint());
        assert_eq!(with("a").fingerprint(), with("a").fingerprint());
        assert!(!format!("{:?}", with("hunter2")).contains("hunter2"));
    }
}

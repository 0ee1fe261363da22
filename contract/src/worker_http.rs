//! The worker's HTTP port as both sides see it: its paths, which requests need the job's token,
//! how the token travels, and the document a refused request carries.
//!
//! The rule: a request that changes something (every method but `GET` and `HEAD`) carries
//! `Authorization: Bearer <token>`, where the token is the job's own (the operator creates one per
//! job in the Secret `<job>-worker-token` and mounts it into the worker pods; the worker config's
//! `http.tokenFile` names the file). Reads stay open, as the probes and Prometheus need them.
//! A worker with no token configured refuses every request that needs one.

use crate::Versioned;
use serde::{Deserialize, Serialize};
use std::fmt;

pub const HEALTHZ_PATH: &str = "/healthz";
pub const READYZ_PATH: &str = "/readyz";
pub const METRICS_PATH: &str = "/metrics";
/// `GET`: every task's report ([`crate::TaskReportsDocument`]).
pub const TASKS_PATH: &str = "/v1/tasks";
/// `POST`: a durable checkpoint of every task now; needs the token.
pub const CHECKPOINTS_PATH: &str = "/v1/checkpoints";
/// `PUT`: the operator's assignment document ([`crate::AssignmentDocument`]); needs the token.
pub const ASSIGNMENT_PATH: &str = "/v1/assignment";

/// The request header holding the token (HTTP header names are case-insensitive; this is the
/// form HTTP/2 and the `http` crate use).
pub const AUTHORIZATION_HEADER: &str = "authorization";
/// The authentication scheme of [`AUTHORIZATION_HEADER`] (RFC 6750).
pub const BEARER_SCHEME: &str = "Bearer";
/// Sent with a 401, as RFC 7235 asks.
pub const WWW_AUTHENTICATE_CHALLENGE: &str = "Bearer realm=\"streamkeeper-worker\"";

/// Random bytes in a token the operator generates (hex-encoded: twice as many characters).
pub const TOKEN_BYTES: usize = 32;
/// The shortest token a worker accepts: a token anyone can guess protects nothing.
pub const MIN_TOKEN_CHARS: usize = 32;

/// Whether a request with `method` needs the token: everything but reads.
pub fn needs_token(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD")
}

/// The job's worker token. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct WorkerToken(String);

/// Why a text is not a usable token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is {found} characters long; at least {MIN_TOKEN_CHARS} are needed")]
    TooShort { found: usize },
    #[error(
        "the token holds a character that cannot be sent in an HTTP header (only visible ASCII)"
    )]
    NotVisibleAscii,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this request changes the worker and needs `Authorization: Bearer <token>`")]
    Missing,
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
    #[error("the bearer token is not this job's worker token")]
    WrongToken,
}

impl WorkerToken {
    /// A token read from a file or a Secret: surrounding whitespace (a trailing newline) is not
    /// part of it.
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let token = text.trim();
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::NotVisibleAscii);
        }
        if token.len() < MIN_TOKEN_CHARS {
            return Err(TokenError::TooShort { found: token.len() });
        }
        Ok(Self(token.to_string()))
    }

    /// A new token from [`TOKEN_BYTES`] random bytes (the caller's CSPRNG), hex-encoded.
    pub fn from_random_bytes(bytes: &[u8; TOKEN_BYTES]) -> Self {
        Self(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value of [`AUTHORIZATION_HEADER`] that carries this token.
    pub fn authorization(&self) -> String {
        format!("{BEARER_SCHEME} {}", self.0)
    }

    /// Checks a request's [`AUTHORIZATION_HEADER`] value against this token. The token itself is
    /// compared in constant time, so the answer's timing says nothing about how much of a guess
    /// was right.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<(), Refusal> {
        use subtle::ConstantTimeEq;
        let value = authorization.ok_or(Refusal::Missing)?;
        let scheme_len = BEARER_SCHEME.len();
        let (scheme, rest) = value
            .split_at_checked(scheme_len)
            .ok_or(Refusal::NotBearer)?;
        // The scheme is case-insensitive (RFC 7235); one space or more before the token.
        if !scheme.eq_ignore_ascii_case(BEARER_SCHEME.as_bytes()) || !rest.starts_with(b" ") {
            return Err(Refusal::NotBearer);
        }
        let presented = rest.trim_ascii();
        if bool::from(presented.ct_eq(self.0.as_bytes())) {
            Ok(())
        } else {
            Err(Refusal::WrongToken)
        }
    }
}

impl fmt::Debug for WorkerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkerToken(<{} characters>)", self.0.len())
    }
}

/// The body of an error answer from the worker (a refused or impossible request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorDocument {
    pub version: u32,
    /// What went wrong and, where there is one, the fix.
    pub error: String,
}

impl ErrorDocument {
    pub fn new(error: impl Into<String>) -> Self {
        Self {
            version: Self::VERSION,
            error: error.into(),
        }
    }
}

impl Versioned for ErrorDocument {
    const FORMAT: &'static str = "worker error";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FormatError;

    fn token() -> WorkerToken {
        WorkerToken::from_random_bytes(&[0xa7; TOKEN_BYTES])
    }

    #[test]
    fn only_reads_go_without_the_token() {
        assert!(!needs_token("GET"));
        assert!(!needs_token("HEAD"));
        for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "get"] {
            assert!(needs_token(method), "{method}");
        }
    }

    #[test]
    fn a_generated_token_is_hex_and_parses_back() {
        let token = token();
        assert_eq!(token.as_str().len(), 2 * TOKEN_BYTES);
        assert!(token.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            WorkerToken::parse(&format!("{}\n", token.as_str())),
            Ok(token)
        );
    }

    #[test]
    fn short_or_unprintable_tokens_are_refused() {
        assert_eq!(
            WorkerToken::parse("secret"),
            Err(TokenError::TooShort { found: 6 })
        );
        assert_eq!(
            WorkerToken::parse(""),
            Err(TokenError::TooShort { found: 0 })
        );
        let spaced = format!("{} {}", "a".repeat(20), "b".repeat(20));
        assert_eq!(
            WorkerToken::parse(&spaced),
            Err(TokenError::NotVisibleAscii)
        );
    }

    #[test]
    fn only_the_same_token_as_bearer_passes() {
        let token = token();
        let header = token.authorization();
        assert_eq!(token.check(Some(header.as_bytes())), Ok(()));
        let lower = header.replacen("Bearer", "bearer", 1);
        assert_eq!(token.check(Some(lower.as_bytes())), Ok(()));
        assert_eq!(token.check(None), Err(Refusal::Missing));
        assert_eq!(
            token.check(Some(format!("Basic {}", token.as_str()).as_bytes())),
            Err(Refusal::NotBearer)
        );
        assert_eq!(
            token.check(Some(format!("Bearer{}", token.as_str()).as_bytes())),
            Err(Refusal::NotBearer)
        );
        assert_eq!(token.check(Some(b"Bear")), Err(Refusal::NotBearer));
        let other = WorkerToken::from_random_bytes(&[0xa6; TOKEN_BYTES]);
        assert_eq!(
            token.check(Some(other.authorization().as_bytes())),
            Err(Refusal::WrongToken)
        );
        let prefix = format!("Bearer {}", &token.as_str()[..40]);
        assert_eq!(
            token.check(Some(prefix.as_bytes())),
            Err(Refusal::WrongToken)
        );
    }

    #[test]
    fn debug_never_shows_the_token() {
        let token = token();
        let shown = format!("{token:?}");
        assert!(!shown.contains(token.as_str()), "{shown}");
        assert!(shown.contains("64 characters"), "{shown}");
    }

    #[test]
    fn the_error_document_round_trips_and_refuses_another_version() {
        let document = ErrorDocument::new("nope");
        assert_eq!(
            ErrorDocument::from_json(&document.to_json()).unwrap(),
            document
        );
        let error = ErrorDocument::from_json(br#"{"version":2,"error":"x"}"#).unwrap_err();
        assert!(
            matches!(error, FormatError::UnsupportedVersion { found: 2, .. }),
            "{error}"
        );
    }
}

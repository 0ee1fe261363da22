//! The worker HTTP contract's routes, answered from a [`PodState`]: pure, so each answer is
//! unit-tested without a socket. Paths, the token rule and the error document are the
//! contract's (`worker_http`); the server only moves bytes.
//!
//! Any well-formed bearer token is accepted: the fleet does not know each job's Secret, and the
//! operator's token handling is not what the fleet measures. A request that needs a token and
//! carries none, or one that is not `Bearer <at least 32 visible characters>`, is refused with
//! 401 as the real worker refuses it.

use crate::pod::PodState;
use std::collections::BTreeMap;
use streamkeeper_contract::Versioned;
use streamkeeper_contract::report_stream::REPORT_STREAM_PATH;
use streamkeeper_contract::task_report::TaskRole;
use streamkeeper_contract::worker_http::{
    self, ASSIGNMENT_PATH, CHECKPOINTS_PATH, ErrorDocument, HEALTHZ_PATH, METRICS_PATH,
    READYZ_PATH, Refusal, TASKS_PATH, WorkerToken,
};

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// One answer, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Send `WWW-Authenticate` (a 401, as RFC 7235 asks).
    pub challenge: bool,
}

impl Answer {
    fn text(status: u16, body: &str) -> Self {
        Self {
            status,
            content_type: TEXT,
            body: body.as_bytes().to_vec(),
            challenge: false,
        }
    }

    fn json(status: u16, body: Vec<u8>) -> Self {
        Self {
            status,
            content_type: JSON,
            body,
            challenge: false,
        }
    }

    fn error(status: u16, message: impl Into<String>) -> Self {
        Self::json(status, ErrorDocument::new(message).to_json())
    }
}

/// A request as the routes need it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The `Authorization` header's value, if any.
    pub authorization: Option<&'a [u8]>,
    pub body: &'a [u8],
}

/// Answers `request` on the pod in `state`, whose tasks report `lag`; `now_ms` stamps an
/// assignment's arrival.
pub fn answer(state: &mut PodState, request: Request<'_>, lag: i64, now_ms: u64) -> Answer {
    if worker_http::needs_token(request.method)
        && let Err(refusal) = check_token(request.authorization)
    {
        let mut answer = Answer::error(401, refusal.to_string());
        answer.challenge = true;
        return answer;
    }
    match (request.method, request.path) {
        ("GET" | "HEAD", HEALTHZ_PATH) => Answer::text(200, "ok"),
        // Every task this process holds is Running, so it is always ready.
        ("GET" | "HEAD", READYZ_PATH) => Answer::text(200, "ready"),
        ("GET" | "HEAD", METRICS_PATH) => Answer {
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            ..Answer::text(200, "# EOF\n")
        },
        ("GET" | "HEAD", TASKS_PATH) => Answer::json(200, state.reports(lag).to_json()),
        // The stream itself is served by `serve`; a worker from before it gets here.
        ("GET", REPORT_STREAM_PATH) => Answer::error(404, format!("no route {}", request.path)),
        ("PUT", ASSIGNMENT_PATH) => match state.assign(request.body, now_ms) {
            Ok(roles) => Answer::json(200, roles_document(&roles)),
            Err(refused) => Answer::json(refused.status(), refused.document().to_json()),
        },
        // A simulated task has no state to checkpoint: answered as a worker without S3 does.
        ("POST", CHECKPOINTS_PATH) => Answer::error(
            404,
            "checkpoints are off: this is a simulated worker (streamkeeper-fleet-workers)",
        ),
        (_, ASSIGNMENT_PATH | CHECKPOINTS_PATH | TASKS_PATH | HEALTHZ_PATH | READYZ_PATH) => {
            Answer::error(405, format!("{} is not allowed here", request.method))
        }
        _ => Answer::error(404, format!("no route {}", request.path)),
    }
}

/// A bearer token of the contract's form, whatever its value.
fn check_token(authorization: Option<&[u8]>) -> Result<(), Refusal> {
    let value = authorization.ok_or(Refusal::Missing)?;
    let text = std::str::from_utf8(value).map_err(|_| Refusal::NotBearer)?;
    let (scheme, token) = text.split_once(' ').ok_or(Refusal::NotBearer)?;
    if !scheme.eq_ignore_ascii_case(worker_http::BEARER_SCHEME) {
        return Err(Refusal::NotBearer);
    }
    // The presented token is taken as the job's: the check then only refuses a malformed one.
    let token = WorkerToken::parse(token).map_err(|_| Refusal::WrongToken)?;
    token.check(Some(value))
}

/// The worker's answer to an assignment: each of its tasks' role.
fn roles_document(roles: &BTreeMap<u32, TaskRole>) -> Vec<u8> {
    let roles: BTreeMap<String, String> = roles
        .iter()
        .map(|(task, role)| (task.to_string(), format!("{role:?}")))
        .collect();
    serde_json::json!({ "version": 1, "roles": roles })
        .to_string()
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamkeeper_contract::{AssignmentDocument, TaskAssignment, TaskReportsDocument};

    const TOKEN: &str = "Bearer 0123456789abcdef0123456789abcdef";

    fn get(path: &str) -> Request<'_> {
        Request {
            method: "GET",
            path,
            authorization: None,
            body: b"",
        }
    }

    fn put<'a>(authorization: Option<&'a str>, body: &'a [u8]) -> Request<'a> {
        Request {
            method: "PUT",
            path: ASSIGNMENT_PATH,
            authorization: authorization.map(str::as_bytes),
            body,
        }
    }

    fn assignment(generation: u64) -> Vec<u8> {
        AssignmentDocument {
            version: 1,
            generation,
            tasks: vec![TaskAssignment {
                task: 0,
                active: Some("job-0".into()),
                standbys: vec!["job-1".into()],
            }],
        }
        .to_json()
    }

    #[test]
    fn probes_answer_ok() {
        let mut pod = PodState::new("job-0", "p1");
        for path in [HEALTHZ_PATH, READYZ_PATH, METRICS_PATH] {
            assert_eq!(answer(&mut pod, get(path), 0, 0).status, 200, "{path}");
        }
    }

    #[test]
    fn an_assignment_with_any_well_formed_token_is_taken_and_reported() {
        let mut pod = PodState::new("job-0", "p1");
        let body = assignment(4);
        let taken = answer(&mut pod, put(Some(TOKEN), &body), 0, 5);
        assert_eq!(
            taken.status,
            200,
            "{}",
            String::from_utf8_lossy(&taken.body)
        );
        let roles: serde_json::Value = serde_json::from_slice(&taken.body).unwrap();
        assert_eq!(roles["roles"]["0"], "Active");
        let tasks = answer(&mut pod, get(TASKS_PATH), 3, 6);
        let reports = TaskReportsDocument::from_json(&tasks.body).unwrap();
        assert_eq!(reports.generation, Some(4));
        assert_eq!(reports.tasks[0].input_lag, Some(3));
    }

    #[test]
    fn an_assignment_without_a_proper_bearer_token_is_refused_with_a_challenge() {
        let mut pod = PodState::new("job-0", "p1");
        let body = assignment(4);
        for authorization in [
            None,
            Some("Basic abc"),
            Some("Bearer short"),
            Some("Bearer"),
        ] {
            let refused = answer(&mut pod, put(authorization, &body), 0, 0);
            assert_eq!(refused.status, 401, "{authorization:?}");
            assert!(refused.challenge);
            ErrorDocument::from_json(&refused.body).unwrap();
        }
        assert_eq!(pod.generation(), None);
    }

    #[test]
    fn a_stale_assignment_answers_409_with_the_error_document() {
        let mut pod = PodState::new("job-0", "p1");
        answer(&mut pod, put(Some(TOKEN), &assignment(4)), 0, 0);
        let stale = answer(&mut pod, put(Some(TOKEN), &assignment(3)), 0, 0);
        assert_eq!(stale.status, 409);
        let error = ErrorDocument::from_json(&stale.body).unwrap();
        assert!(error.error.contains("older"), "{}", error.error);
    }

    #[test]
    fn unknown_routes_and_methods_are_refused() {
        let mut pod = PodState::new("job-0", "p1");
        assert_eq!(answer(&mut pod, get("/nope"), 0, 0).status, 404);
        let delete = Request {
            method: "DELETE",
            path: TASKS_PATH,
            authorization: Some(TOKEN.as_bytes()),
            body: b"",
        };
        assert_eq!(answer(&mut pod, delete, 0, 0).status, 405);
        let checkpoint = Request {
            method: "POST",
            path: CHECKPOINTS_PATH,
            authorization: None,
            body: b"",
        };
        assert_eq!(answer(&mut pod, checkpoint, 0, 0).status, 401);
    }
}

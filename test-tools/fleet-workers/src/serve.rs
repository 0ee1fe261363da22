//! A simulated pod's listener: HTTP/1.1 on the pod's own loopback address, answered by
//! [`crate::answer`] (and the report stream here, a frame a beat), held or delayed as the pod's
//! faults say. Closing it (dropping its
//! [`Listening`]) closes the listening socket and every connection it took, as a killed process
//! does: the operator's next connect is refused at once, and a call in flight ends.

use crate::answer::{self, Answer};
use crate::fleet::{Inner, Pod, now_ms};
use crate::pod::Plan;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use streamkeeper_contract::report_stream::{self, FrameWriter, REPORT_STREAM_PATH};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

/// Pending connections the kernel queues per listener: a poll round of the operator reaches a
/// pod with a few connections at most.
const BACKLOG: u32 = 128;

/// An open listener. Dropping it closes the listener and its connections.
pub struct Listening {
    _close: watch::Sender<()>,
    /// Told to end every connection open now, the listener staying open.
    cut: watch::Sender<()>,
}

impl Listening {
    /// Ends every connection open now and keeps listening: a process restarted in place. (A new
    /// listener could not bind at once: the old one closes only once its task next runs.)
    pub fn cut_connections(&self) {
        self.cut.send_replace(());
    }
}

/// Binds `address` and serves `pod` there until the returned [`Listening`] is dropped.
pub(crate) fn listen(
    address: SocketAddr,
    pod: Arc<Pod>,
    fleet: Arc<Inner>,
) -> std::io::Result<Listening> {
    let socket = TcpSocket::new_v4()?;
    // A restarted pod binds again at once while the connections its old listener closed sit in
    // TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    let listener = socket.listen(BACKLOG)?;
    let (close, closed) = watch::channel(());
    let cut = watch::Sender::new(());
    tokio::spawn(accept(listener, (pod, fleet), closed, cut.clone()));
    Ok(Listening { _close: close, cut })
}

async fn accept(
    listener: TcpListener,
    (pod, fleet): (Arc<Pod>, Arc<Inner>),
    mut closed: watch::Receiver<()>,
    cut: watch::Sender<()>,
) {
    loop {
        tokio::select! {
            // Only an error comes: the sender is dropped, never sent on.
            _ = closed.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    fleet.connections.fetch_add(1, Ordering::Relaxed);
                    let ends = (closed.clone(), cut.subscribe());
                    tokio::spawn(connection(stream, Arc::clone(&pod), Arc::clone(&fleet), ends));
                }
                Err(error) => {
                    // Out of descriptors, most likely: keep the listener, retry shortly rather
                    // than spin.
                    tracing::warn!(ip = %pod.ip, %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

async fn connection(
    stream: TcpStream,
    pod: Arc<Pod>,
    fleet: Arc<Inner>,
    (mut closed, mut cut): (watch::Receiver<()>, watch::Receiver<()>),
) {
    let service = service_fn(move |request| respond(request, Arc::clone(&pod), Arc::clone(&fleet)));
    let served = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = served => {}
        // Dropping the connection mid-request resets it, as the death of its process would.
        _ = closed.changed() => {}
        _ = cut.changed() => {}
    }
}

/// An answer's body: whole, or the report stream.
type AnswerBody = UnsyncBoxBody<Bytes, Infallible>;

async fn respond(
    request: Request<Incoming>,
    pod: Arc<Pod>,
    fleet: Arc<Inner>,
) -> Result<Response<AnswerBody>, hyper::Error> {
    let (parts, body) = request.into_parts();
    let method = parts.method.as_str();
    let path = parts.uri.path();
    fleet.count_request(method, path);
    pod.requests.fetch_add(1, Ordering::Relaxed);
    let body = body.collect().await?.to_bytes();
    if method == "GET" && path == REPORT_STREAM_PATH && !pod.faults.borrow().older {
        let beat = report_stream::beat_from_query(parts.uri.query());
        return Ok(report_stream_answer(pod, beat));
    }
    let lag = wait_for_faults(&pod).await;
    let authorization = parts
        .headers
        .get(hyper::header::AUTHORIZATION)
        .map(|value| value.as_bytes());
    let request = answer::Request {
        method,
        path,
        authorization,
        body: &body,
    };
    let answer = answer::answer(&mut pod.state(), request, lag, now_ms());
    Ok(response(answer, method == "HEAD"))
}

/// The report stream: a frame every `beat`, each held by the pod's faults as an answer is (a
/// frozen pod sends nothing, a slow one sends late).
fn report_stream_answer(pod: Arc<Pod>, beat: Duration) -> Response<AnswerBody> {
    let mut ticks = tokio::time::interval(beat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let frames = futures::stream::unfold(
        (FrameWriter::default(), ticks, pod),
        |(mut writer, mut ticks, pod)| async move {
            ticks.tick().await;
            let lag = wait_for_faults(&pod).await;
            let reports = pod.state().reports(lag);
            let line = writer.next(&reports, Instant::now()).to_line();
            Some((Ok(Frame::data(Bytes::from(line))), (writer, ticks, pod)))
        },
    );
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(report_stream::CONTENT_TYPE),
    );
    response
}

/// Waits as long as the pod is frozen, then its delay; gives the lag to report.
async fn wait_for_faults(pod: &Pod) -> i64 {
    let mut faults = pod.faults.subscribe();
    let delay = match faults.wait_for(|f| f.plan() != Plan::Hold).await {
        Ok(current) => match current.plan() {
            Plan::AnswerAfter(delay) => delay,
            Plan::Hold => Duration::ZERO,
        },
        // The pod is gone; its connection is being closed.
        Err(_) => Duration::ZERO,
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    pod.faults.borrow().lag
}

fn response(answer: Answer, head: bool) -> Response<AnswerBody> {
    let Answer {
        status,
        content_type,
        body,
        challenge,
    } = answer;
    let body = if head { Vec::new() } else { body };
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    if challenge {
        headers.insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static(
                streamkeeper_contract::worker_http::WWW_AUTHENTICATE_CHALLENGE,
            ),
        );
    }
    response
}

//! `GET /v1/tasks/stream`: the task reports as a stream of changes, one frame a beat (the
//! contract's `report_stream`). The frames come from the same document `GET /v1/tasks`
//! answers; [`FrameWriter`] decides what each one carries. The stream ends when the reader
//! goes: hyper drops the body once a write to a closed connection fails.

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::convert::Infallible;
use std::time::{Duration, Instant};
use streamkeeper_contract::TaskReportsDocument;
use streamkeeper_contract::report_stream::{self, FrameWriter};
use tokio::time::{Interval, MissedTickBehavior};

/// The stream answer: a frame now, then one every `beat`, each from `reports()` at that moment.
pub(super) fn answer(
    beat: Duration,
    reports: impl Fn() -> TaskReportsDocument + Send + 'static,
) -> Response {
    // The first tick completes at once: the whole document goes out with the answer's head.
    let mut ticks = tokio::time::interval(beat);
    // A worker held up (a stop of its process) sends one frame when it resumes, not a burst.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = (FrameWriter::default(), ticks, reports);
    let frames = futures::stream::unfold(state, next_frame);
    (
        [
            (header::CONTENT_TYPE, report_stream::CONTENT_TYPE),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(frames),
    )
        .into_response()
}

async fn next_frame<F: Fn() -> TaskReportsDocument>(
    (mut writer, mut ticks, reports): (FrameWriter, Interval, F),
) -> Option<(Result<Bytes, Infallible>, (FrameWriter, Interval, F))> {
    ticks.tick().await;
    let frame = writer.next(&reports(), Instant::now());
    Some((Ok(Bytes::from(frame.to_line())), (writer, ticks, reports)))
}

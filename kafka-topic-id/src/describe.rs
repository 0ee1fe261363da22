//! librdkafka's DescribeTopics for one topic, through its C API. Every native object is owned by
//! a guard that destroys it, so no path (an early error included) leaks one, and nothing
//! borrowed from the result event outlives it: the id is copied into a `String` before the event
//! is destroyed.
#![allow(unsafe_code)]

use crate::{TopicId, TopicIdError};
use rdkafka_sys::bindings as rd;
use std::ffi::{CStr, CString, c_char, c_int};
use std::time::Duration;

/// A native object and the function that destroys it.
struct Owned<T> {
    ptr: *mut T,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Owned<T> {
    /// `None` when librdkafka returned no object.
    fn new(ptr: *mut T, destroy: unsafe extern "C" fn(*mut T)) -> Option<Self> {
        (!ptr.is_null()).then_some(Self { ptr, destroy })
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from the librdkafka constructor paired with `destroy`, is not null,
        // and is destroyed only here, once.
        unsafe { (self.destroy)(self.ptr) }
    }
}

/// Copies a C string librdkafka returned (`None` for a null pointer).
///
/// SAFETY: `text` is null or points to a NUL-terminated string valid for this call.
unsafe fn copied(text: *const c_char) -> Option<String> {
    // SAFETY: as the caller promises.
    (!text.is_null()).then(|| {
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    })
}

pub(crate) fn topic_id(
    client: *mut rd::rd_kafka_t,
    topic: &str,
    limit: Duration,
) -> Result<TopicId, TopicIdError> {
    let broker = |reason: String| TopicIdError::Broker {
        topic: topic.to_string(),
        reason,
    };
    let name = CString::new(topic).map_err(|_| TopicIdError::BadName {
        topic: topic.to_string(),
    })?;
    let limit_ms = c_int::try_from(limit.as_millis()).unwrap_or(c_int::MAX);
    let mut names = [name.as_ptr()];
    // SAFETY: `client` is a live rd_kafka_t owned by the caller's rdkafka client, which outlives
    // this call. The collection copies the names. Each object is destroyed by its guard.
    unsafe {
        let collection = Owned::new(
            rd::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), names.len()),
            rd::rd_kafka_TopicCollection_destroy,
        )
        .ok_or_else(|| broker("librdkafka could not make a topic collection".into()))?;
        let options = Owned::new(
            rd::rd_kafka_AdminOptions_new(
                client,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
            ),
            rd::rd_kafka_AdminOptions_destroy,
        )
        .ok_or_else(|| broker("librdkafka could not make admin options".into()))?;
        let mut errstr = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr,
            limit_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let queue = Owned::new(rd::rd_kafka_queue_new(client), rd::rd_kafka_queue_destroy)
            .ok_or_else(|| broker("librdkafka could not make a queue".into()))?;
        rd::rd_kafka_DescribeTopics(client, collection.ptr, options.ptr, queue.ptr);
        // The request timeout above answers with an error event first; this bound is the
        // backstop for a client that never answers at all.
        let event = Owned::new(
            rd::rd_kafka_queue_poll(queue.ptr, limit_ms.saturating_add(1_000)),
            rd::rd_kafka_event_destroy,
        )
        .ok_or(TopicIdError::Timeout {
            topic: topic.to_string(),
            limit,
        })?;
        let code = rd::rd_kafka_event_error(event.ptr);
        if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__TIMED_OUT {
            return Err(TopicIdError::Timeout {
                topic: topic.to_string(),
                limit,
            });
        }
        if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            let reason = copied(rd::rd_kafka_event_error_string(event.ptr));
            return Err(broker(
                reason.unwrap_or_else(|| "DescribeTopics failed".into()),
            ));
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(event.ptr);
        if result.is_null() {
            return Err(broker("the answer was not a DescribeTopics result".into()));
        }
        let mut count = 0usize;
        let descriptions = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        if descriptions.is_null() || count == 0 {
            return Err(broker("the answer described no topic".into()));
        }
        let description = *descriptions;
        let error = rd::rd_kafka_TopicDescription_error(description);
        if !error.is_null()
            && rd::rd_kafka_error_code(error) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            let reason = copied(rd::rd_kafka_error_string(error));
            return Err(broker(reason.unwrap_or_else(|| "unknown error".into())));
        }
        let id = rd::rd_kafka_TopicDescription_topic_id(description);
        let no_id = || TopicIdError::NoId {
            topic: topic.to_string(),
        };
        if id.is_null()
            || (rd::rd_kafka_Uuid_most_significant_bits(id) == 0
                && rd::rd_kafka_Uuid_least_significant_bits(id) == 0)
        {
            return Err(no_id());
        }
        copied(rd::rd_kafka_Uuid_base64str(id))
            .map(TopicId)
            .ok_or_else(no_id)
    }
}

//! What the operator tells about itself: Prometheus [`metrics`], served with a health check on
//! its own port by [`http`], and the count of its own [`api_requests`].

pub mod api_requests;
pub mod http;
pub mod metrics;

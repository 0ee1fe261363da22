//! What the operator tells about itself: Prometheus [`metrics`], served with a health check on
//! its own port by [`http`].

pub mod http;
pub mod metrics;

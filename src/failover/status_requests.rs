//! Requests to write a job's status again now. A finished move (its new owner's first commit)
//! changes the owner and the move figures `kubectl get ssj -o yaml` shows, but it changes nothing
//! the controller watches: without a request, a steady job's status would name the old owner
//! until its next periodic refresh, up to a minute later.

use crate::api::StatefulStreamJob;
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::reflector::ObjectRef;
use std::sync::{Mutex, PoisonError};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Where the failover loops ask for a status refresh ([`RefreshSender::request`]) and the
/// controller takes the requests from ([`StatusRefresh::take_requests`]).
pub struct StatusRefresh {
    sender: UnboundedSender<ObjectRef<StatefulStreamJob>>,
    receiver: Mutex<Option<UnboundedReceiver<ObjectRef<StatefulStreamJob>>>>,
}

impl Default for StatusRefresh {
    fn default() -> Self {
        let (sender, receiver) = unbounded_channel();
        Self {
            sender,
            receiver: Mutex::new(Some(receiver)),
        }
    }
}

/// The loops' end of [`StatusRefresh`].
#[derive(Clone)]
pub struct RefreshSender(UnboundedSender<ObjectRef<StatefulStreamJob>>);

impl RefreshSender {
    /// Asks for a reconcile of the job, which writes its status from fresh worker reports. A
    /// request after the controller stopped is dropped: nobody writes status then.
    pub fn request(&self, namespace: &str, name: &str) {
        let _ = self.0.send(ObjectRef::new(name).within(namespace));
    }
}

impl StatusRefresh {
    pub fn sender(&self) -> RefreshSender {
        RefreshSender(self.sender.clone())
    }

    /// The requests, for the one controller that runs (`None` once taken).
    pub fn take_requests(&self) -> Option<BoxStream<'static, ObjectRef<StatefulStreamJob>>> {
        let receiver = self
            .receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        let requests = futures::stream::unfold(receiver, |mut receiver| async move {
            let request = receiver.recv().await?;
            Some((request, receiver))
        });
        Some(requests.boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_reaches_the_controller_once_and_only_one_takes_them() {
        let refresh = StatusRefresh::default();
        let mut requests = refresh.take_requests().unwrap();
        assert!(
            refresh.take_requests().is_none(),
            "one controller takes them"
        );
        refresh.sender().request("ns", "job");
        let request = requests.next().await.unwrap();
        assert_eq!(request, ObjectRef::new("job").within("ns"));
    }
}

//! A run that ends when its shutdown future resolves (a listener's `run`), in a task of its own
//! until the test stops it.

use std::future::Future;
use std::pin::Pin;

use libtest_mimic::Failed;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::runner::fail;

/// The shutdown future handed to a [`Background`] run: it resolves when the run is
/// [stopped](Background::stop) or its handle is dropped.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A run in a task of its own, such as `listener.run(shutdown)`.
#[derive(Debug)]
pub struct Background<T> {
    stop: oneshot::Sender<()>,
    task: JoinHandle<T>,
}

impl<T: Send + 'static> Background<T> {
    /// Spawns `run` with the shutdown future it must end on.
    pub fn spawn<F, Fut>(run: F) -> Self
    where
        F: FnOnce(Shutdown) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown: Shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        Self { stop, task: tokio::spawn(run(shutdown)) }
    }

    /// Resolves the shutdown future and waits for the run to end; what it returned, or a failure
    /// when it panicked.
    pub async fn stop(self) -> Result<T, Failed> {
        let _ = self.stop.send(());
        self.task.await.map_err(fail)
    }

    /// Ends the task at once, without the run's shutdown (for clean-up after a failed test).
    pub fn abort(&self) {
        self.task.abort();
    }
}

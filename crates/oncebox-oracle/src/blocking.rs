//! The bounded blocking pool: the `oracle` crate's calls block their thread, so each runs on
//! tokio's blocking threads, never on an async worker, and at most as many run at once as the
//! connection pool has connections. A caller over the bound waits asynchronously for a permit
//! instead of parking a thread on the pool.

use std::sync::Arc;

use oncebox_core::{Error, Result};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Where the blocking calls get their connection.
pub(crate) trait Source: Send + Sync + 'static {
    /// A connection, used by one blocking call at a time.
    type Connection: Send + Sync + 'static;

    /// Takes a connection (blocks).
    fn get(&self) -> Result<Self::Connection>;
}

/// Runs blocking calls on connections of `S`, at most `size` at once.
pub(crate) struct Bounded<S: Source> {
    source: Arc<S>,
    permits: Arc<Semaphore>,
}

impl<S: Source> Clone for Bounded<S> {
    fn clone(&self) -> Self {
        Self { source: Arc::clone(&self.source), permits: Arc::clone(&self.permits) }
    }
}

impl<S: Source> Bounded<S> {
    /// Calls on `source`, at most `size` (at least 1) at once.
    pub(crate) fn new(source: S, size: u32) -> Self {
        let size = usize::try_from(size.max(1)).unwrap_or(1);
        Self { source: Arc::new(source), permits: Arc::new(Semaphore::new(size)) }
    }

    /// The source.
    pub(crate) fn source(&self) -> &S {
        &self.source
    }

    /// Runs `work` on a connection on a blocking thread, once a permit is free.
    pub(crate) async fn run<T, F>(&self, context: &str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&S::Connection) -> Result<T> + Send + 'static,
    {
        let permit = self.permit(context).await?;
        let source = Arc::clone(&self.source);
        let joined = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let connection = source.get()?;
            work(&connection)
        })
        .await;
        joined
            .map_err(|error| Error::database(format!("{context}: the blocking call failed"), false, error))?
    }

    /// Takes a permit and a connection for longer than one call (a caller's transaction); both
    /// are given back when the [`Held`] is dropped.
    pub(crate) async fn hold(&self, context: &str) -> Result<Held<S::Connection>> {
        let permit = self.permit(context).await?;
        let source = Arc::clone(&self.source);
        let connection = tokio::task::spawn_blocking(move || source.get()).await.map_err(|error| {
            Error::database(format!("{context}: the blocking call failed"), false, error)
        })??;
        Ok(Held { connection: Arc::new(connection), _permit: permit })
    }

    async fn permit(&self, context: &str) -> Result<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).acquire_owned().await.map_err(|error| {
            Error::database(format!("{context}: the connection pool is closed"), false, error)
        })
    }
}

/// A connection taken out of the bound for a while, with its permit.
pub(crate) struct Held<C> {
    pub(crate) connection: Arc<C>,
    /// Given back to the bound when the connection is.
    _permit: OwnedSemaphorePermit,
}

impl<C: Send + Sync + 'static> Held<C> {
    /// Runs `work` on the held connection on a blocking thread.
    pub(crate) async fn run<T, F>(&self, context: &str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&C) -> Result<T> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        tokio::task::spawn_blocking(move || work(&connection))
            .await
            .map_err(|error| Error::database(format!("{context}: the blocking call failed"), false, error))?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Connections that count how many are in use at once.
    #[derive(Default)]
    struct Counting {
        in_use: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    struct Lease(Arc<AtomicUsize>);

    impl Drop for Lease {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl Source for Counting {
        type Connection = Lease;

        fn get(&self) -> Result<Lease> {
            let now = self.in_use.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            Ok(Lease(Arc::clone(&self.in_use)))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_calls_run_at_once_than_the_bound() {
        let source = Counting::default();
        let most = Arc::clone(&source.most);
        let bounded = Bounded::new(source, 3);
        let calls: Vec<_> = (0..24)
            .map(|_| {
                let bounded = bounded.clone();
                tokio::spawn(async move {
                    bounded
                        .run("sleeping", |_lease| {
                            std::thread::sleep(Duration::from_millis(5));
                            Ok(())
                        })
                        .await
                })
            })
            .collect();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        let most = most.load(Ordering::SeqCst);
        assert!(most <= 3, "{most} calls ran at once with a bound of 3");
        assert!(most >= 2, "the calls never overlapped ({most}); the test proves nothing");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_connection_takes_a_permit_until_dropped() {
        let bounded = Bounded::new(Counting::default(), 1);
        let held = bounded.hold("beginning").await.unwrap();
        let waiting = {
            let bounded = bounded.clone();
            tokio::spawn(async move { bounded.run("reading", |_lease| Ok(7)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a call ran while the only permit was held");
        assert_eq!(held.run("writing", |_lease| Ok(1)).await.unwrap(), 1);
        drop(held);
        assert_eq!(waiting.await.unwrap().unwrap(), 7);
    }

    #[tokio::test]
    async fn a_failed_call_returns_its_error_and_its_permit() {
        let bounded = Bounded::new(Counting::default(), 1);
        let failed: Result<()> = bounded.run("failing", |_lease| Err(Error::invalid_input("no"))).await;
        assert!(failed.unwrap_err().to_string().contains("no"));
        assert_eq!(bounded.run("after", |_lease| Ok(2)).await.unwrap(), 2);
    }
}

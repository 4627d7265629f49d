//! The job lock: a lease row per job, taken by an `UPDATE` when it has run out on the database
//! clock, or by the first `INSERT`.

use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::JobLease;
use oncebox_core::{JobLock, Result};
use uuid::Uuid;

use crate::error::{database_error, is_unique_violation};
use crate::row::id_bytes;
use crate::session::{Bind, execute, micros, store_daos};

store_daos! {
    /// [`JobLock`] on Oracle, timed by the database clock.
    OraJobLock: jobs;
}

#[async_trait]
impl JobLock for OraJobLock {
    async fn try_lock(
        &self,
        job: &str,
        owner: Uuid,
        lock_at_least_for: Duration,
        lock_at_most_for: Duration,
    ) -> Result<Option<JobLease>> {
        let name = job.to_owned();
        let taken = self
            .0
            .call(format!("locking job {job}"), move |connection, statements, context| {
                let (owner, at_most) = (id_bytes(owner), micros(lock_at_most_for));
                let binds: [Bind<'_>; 3] = [("at_most_micros", &at_most), ("owner", &owner), ("name", &name)];
                if execute(connection, &statements.job_take_expired, &binds, context)? == 1 {
                    return Ok(true);
                }
                // No row, or a lease still running: only a missing row can be inserted, and
                // ORA-00001 says another instance holds or has just taken it.
                match connection.execute_named(&statements.job_insert, &binds) {
                    Ok(_) => Ok(true),
                    Err(error) if is_unique_violation(&error) => Ok(false),
                    Err(error) => Err(database_error(context, error)),
                }
            })
            .await?;
        Ok(taken.then(|| JobLease { job: job.to_owned(), owner, lock_at_least_for }))
    }

    async fn unlock(&self, lease: &JobLease) -> Result<()> {
        let lease = lease.clone();
        self.0
            .call(format!("unlocking job {}", lease.job), move |connection, statements, context| {
                let (owner, at_least) = (id_bytes(lease.owner), micros(lease.lock_at_least_for));
                let binds: [Bind<'_>; 3] =
                    [("at_least_micros", &at_least), ("name", &lease.job), ("owner", &owner)];
                execute(connection, &statements.job_unlock, &binds, context).map(drop)
            })
            .await
    }
}

//! ShedLock-style job leases in the jobs table, timed by the database clock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::JobLease;
use oncebox_core::{JobLock, Result};
use sqlx::MySqlPool;
use uuid::Uuid;

use crate::error::{DUPLICATE_KEY, SqlxResultExt, database_error, error_number};
use crate::statements::Statements;
use crate::time::micros;

/// [`JobLock`] for MySQL and MariaDB: taking a lease updates the job's row only when its lease has
/// run out on `UTC_TIMESTAMP(6)`, or inserts the row when there is none; of several instances
/// trying at once exactly one succeeds, whatever their own clocks say. (An upsert would be one
/// statement, but under the CLIENT_FOUND_ROWS flag it reports "unchanged" and "inserted" alike.)
#[derive(Clone)]
pub struct MySqlJobLock {
    pool: MySqlPool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for MySqlJobLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlJobLock").field("table", &self.statements.tables.jobs()).finish()
    }
}

impl MySqlJobLock {
    pub(crate) fn new(pool: MySqlPool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }
}

#[async_trait]
impl JobLock for MySqlJobLock {
    async fn try_lock(
        &self,
        job: &str,
        owner: Uuid,
        lock_at_least_for: Duration,
        lock_at_most_for: Duration,
    ) -> Result<Option<JobLease>> {
        let context = format!("locking job {job}");
        let lease = || JobLease { job: job.to_owned(), owner, lock_at_least_for };
        let taken = sqlx::query(self.statements.job_take_expired.clone())
            .bind(micros(lock_at_most_for))
            .bind(owner)
            .bind(job)
            .execute(&self.pool)
            .await
            .context(&context)?
            .rows_affected();
        if taken == 1 {
            return Ok(Some(lease()));
        }
        let inserted = sqlx::query(self.statements.job_insert.clone())
            .bind(job)
            .bind(micros(lock_at_most_for))
            .bind(owner)
            .execute(&self.pool)
            .await;
        match inserted {
            Ok(_) => Ok(Some(lease())),
            // The row exists: its lease is still running, or another instance was just first.
            Err(error) if error_number(&error) == Some(DUPLICATE_KEY) => Ok(None),
            Err(error) => Err(database_error(&context, error)),
        }
    }

    async fn unlock(&self, lease: &JobLease) -> Result<()> {
        sqlx::query(self.statements.job_unlock.clone())
            .bind(micros(lease.lock_at_least_for))
            .bind(lease.job.as_str())
            .bind(lease.owner)
            .execute(&self.pool)
            .await
            .context(&format!("unlocking job {}", lease.job))?;
        Ok(())
    }
}

//! ShedLock-style job leases in the jobs table, timed by the database clock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::JobLease;
use oncebox_core::{JobLock, Result};
use sqlx::SqlitePool;
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::statements::Statements;
use crate::time::later_by;

/// [`JobLock`] for SQLite: taking a lease is one upsert that only changes the row when the current
/// lease has run out, so of several instances trying at once exactly one succeeds.
#[derive(Clone)]
pub struct SqliteJobLock {
    pool: SqlitePool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for SqliteJobLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJobLock").field("table", &self.statements.tables.jobs()).finish()
    }
}

impl SqliteJobLock {
    pub(crate) fn new(pool: SqlitePool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }
}

#[async_trait]
impl JobLock for SqliteJobLock {
    async fn try_lock(
        &self,
        job: &str,
        owner: Uuid,
        lock_at_least_for: Duration,
        lock_at_most_for: Duration,
    ) -> Result<Option<JobLease>> {
        let result = sqlx::query(self.statements.job_try_lock.clone())
            .bind(job)
            .bind(later_by(lock_at_most_for))
            .bind(owner.hyphenated())
            .execute(&self.pool)
            .await
            .context(&format!("locking job {job}"))?;
        Ok((result.rows_affected() == 1).then(|| JobLease { job: job.to_owned(), owner, lock_at_least_for }))
    }

    async fn unlock(&self, lease: &JobLease) -> Result<()> {
        sqlx::query(self.statements.job_unlock.clone())
            .bind(lease.job.as_str())
            .bind(lease.owner.hyphenated())
            .bind(later_by(lease.lock_at_least_for))
            .execute(&self.pool)
            .await
            .context(&format!("unlocking job {}", lease.job))?;
        Ok(())
    }
}

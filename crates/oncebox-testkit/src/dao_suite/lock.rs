//! The job lock.

use super::*;

const JOB: &str = "outbox-clean-up";

dao_cases! {
    // Job lock.

    async fn job_lock_has_one_winner_among_concurrent_owners(_harness, dialect) {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let lock = dialect.job_lock();
            tasks.push(tokio::spawn(
                async move { lock.try_lock(JOB, Uuid::now_v7(), Duration::ZERO, HOUR).await },
            ));
        }
        let mut winners = Vec::new();
        for task in tasks {
            if let Some(lease) = task.await.map_err(fail)?.map_err(fail)? {
                winners.push(lease);
            }
        }
        assert_eq!(winners.len(), 1, "exactly one of eight owners gets the lease: {winners:?}");
        assert_eq!(winners[0].job, JOB);
        Ok(())
    }

    async fn job_lock_held_refuses_other_owners(_harness, dialect) {
        let lock = dialect.job_lock();
        let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
        let lease = lock.try_lock(JOB, first, Duration::ZERO, HOUR).await.map_err(fail)?;
        assert_eq!(lease, Some(JobLease { job: JOB.into(), owner: first, lock_at_least_for: Duration::ZERO }));
        assert!(lock.try_lock(JOB, second, Duration::ZERO, HOUR).await.map_err(fail)?.is_none(), "lease held");
        assert!(
            lock.try_lock("another-job", second, Duration::ZERO, HOUR).await.map_err(fail)?.is_some(),
            "leases are per job"
        );
        Ok(())
    }

    async fn job_lock_expires_after_lock_at_most_for(harness, dialect) {
        let lock = dialect.job_lock();
        let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
        assert!(lock.try_lock(JOB, first, Duration::ZERO, HOUR).await.map_err(fail)?.is_some());
        assert!(lock.try_lock(JOB, second, Duration::ZERO, HOUR).await.map_err(fail)?.is_none());
        // The holder died an hour and more ago: its lease ran out.
        harness.backdate(dialect, AgedTable::Jobs, &[], TWO_HOURS).await.map_err(fail)?;
        let lease = lock.try_lock(JOB, second, Duration::ZERO, HOUR).await.map_err(fail)?;
        assert_eq!(lease.map(|lease| lease.owner), Some(second), "an expired lease can be taken");
        Ok(())
    }

    async fn job_lock_only_the_owner_releases(_harness, dialect) {
        let lock = dialect.job_lock();
        let (owner, intruder, next) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let lease = lock.try_lock(JOB, owner, Duration::ZERO, HOUR).await.map_err(fail)?;
        let lease = lease.ok_or_else(|| fail("a free job should lock"))?;
        let forged = JobLease { job: JOB.into(), owner: intruder, lock_at_least_for: Duration::ZERO };
        lock.unlock(&forged).await.map_err(fail)?;
        assert!(lock.try_lock(JOB, next, Duration::ZERO, HOUR).await.map_err(fail)?.is_none(), "still held");
        lock.unlock(&lease).await.map_err(fail)?;
        assert!(lock.try_lock(JOB, next, Duration::ZERO, HOUR).await.map_err(fail)?.is_some(), "released");
        Ok(())
    }

    async fn job_lock_stays_held_for_lock_at_least_for(_harness, dialect) {
        let lock = dialect.job_lock();
        let (owner, other) = (Uuid::now_v7(), Uuid::now_v7());
        let lease = lock.try_lock(JOB, owner, HOUR, TWO_HOURS).await.map_err(fail)?;
        let lease = lease.ok_or_else(|| fail("a free job should lock"))?;
        assert_eq!(lease.lock_at_least_for, HOUR);
        lock.unlock(&lease).await.map_err(fail)?;
        assert!(
            lock.try_lock(JOB, other, Duration::ZERO, HOUR).await.map_err(fail)?.is_none(),
            "lock-at-least-for keeps the job locked after unlock"
        );

        let quick = "quick-job";
        let lease = lock.try_lock(quick, owner, Duration::ZERO, TWO_HOURS).await.map_err(fail)?;
        lock.unlock(&lease.ok_or_else(|| fail("a free job should lock"))?).await.map_err(fail)?;
        assert!(lock.try_lock(quick, other, Duration::ZERO, HOUR).await.map_err(fail)?.is_some(), "free at once");
        Ok(())
    }

    async fn job_lock_durations_are_taken_per_call(_harness, dialect) {
        let lock = dialect.job_lock();
        let (first, second, third) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        // A lease held for at most zero time is over as soon as it is taken.
        assert!(lock.try_lock(JOB, first, Duration::ZERO, Duration::ZERO).await.map_err(fail)?.is_some());
        let lease = lock.try_lock(JOB, second, Duration::ZERO, HOUR).await.map_err(fail)?;
        assert_eq!(lease.map(|lease| lease.owner), Some(second), "the first call's zero duration took effect");
        assert!(
            lock.try_lock(JOB, third, Duration::ZERO, HOUR).await.map_err(fail)?.is_none(),
            "the second call's hour took effect"
        );
        Ok(())
    }
}

//! The outbox: publishing, claiming, settling, its background jobs and payload round trips.

use super::*;

async fn round_trip<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
    events: &[NewOutboxEvent],
) -> Result<Vec<OutboxEvent>, Failed> {
    publish(harness, dialect, events).await?;
    let batch = dialect.outbox_dao().claim(ORDERS, 100).await.map_err(fail)?;
    assert_eq!(batch.len(), events.len());
    for (claimed, written) in batch.events.iter().zip(events) {
        assert_eq!(claimed.id, written.id);
        assert_eq!(claimed.payload, written.payload, "payload of {} changed", written.id);
        assert_eq!(claimed.payload_type, written.payload_type);
        assert_eq!(claimed.headers, written.headers);
        assert_eq!(claimed.partition_key, written.partition_key);
        assert_eq!(claimed.event_type, written.event_type);
    }
    Ok(batch.events)
}

dao_cases! {
    // Publishing.

    async fn publish_is_visible_after_commit(harness, dialect) {
        let event = new_event(ORDERS, 1);
        publish(harness, dialect, std::slice::from_ref(&event)).await?;
        let outbox = dialect.outbox_dao();
        let row = stored(&*outbox, event.id).await?;
        assert_eq!(row.status, EventStatus::Pending);
        assert_eq!(row.attempts, 0, "a new event has no attempts");
        assert_eq!(row.claim_token, None);
        assert_eq!(row.processed_at, None);
        assert_eq!(row.last_error, None);
        assert_eq!(row.created_at, row.updated_at, "created_at and updated_at are both the insert time");
        assert!(row.next_retry_at <= row.created_at, "a new event is due at once");
        let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert_eq!(claimed_ids(&batch), vec![event.id]);
        // An empty publish is a no-op, not an error.
        publish(harness, dialect, &[]).await?;
        Ok(())
    }

    async fn publish_is_invisible_after_rollback(harness, dialect) {
        let events = new_events(ORDERS, 3);
        harness.publish(dialect, &events, false).await.map_err(fail)?;
        let outbox = dialect.outbox_dao();
        let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert!(batch.is_empty(), "rolled-back events must never be claimed: {:?}", claimed_ids(&batch));
        for event in &events {
            assert!(outbox.get(event.id).await.map_err(fail)?.is_none(), "rolled-back event {} exists", event.id);
        }
        assert_eq!(outbox.counts().await.map_err(fail)?.total(), 0);
        Ok(())
    }

    async fn batch_publish_of_1000_events(harness, dialect) {
        let events = new_events(ORDERS, 1000);
        publish(harness, dialect, &events).await?;
        let outbox = dialect.outbox_dao();
        let counts = outbox.counts().await.map_err(fail)?;
        assert_eq!(counts.status_total(EventStatus::Pending), 1000);
        let batch = outbox.claim(ORDERS, 2000).await.map_err(fail)?;
        let claimed: HashSet<Uuid> = claimed_ids(&batch).into_iter().collect();
        assert_eq!(claimed, ids_of(&events).into_iter().collect::<HashSet<_>>(), "every event is claimable");
        Ok(())
    }

    // Claiming.

    async fn claim_respects_event_type(harness, dialect) {
        let orders = new_events(ORDERS, 3);
        let payments = new_events(PAYMENTS, 2);
        publish(harness, dialect, &[orders.clone(), payments.clone()].concat()).await?;
        let outbox = dialect.outbox_dao();
        let batch = outbox.claim(PAYMENTS, 10).await.map_err(fail)?;
        assert_eq!(batch.event_type, PAYMENTS);
        assert_eq!(claimed_ids(&batch), ids_of(&payments), "only rows of the claimed type");
        assert!(batch.events.iter().all(|event| event.event_type == PAYMENTS));
        let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert_eq!(claimed_ids(&batch), ids_of(&orders));
        assert!(outbox.claim("unknown-type", 10).await.map_err(fail)?.is_empty());
        Ok(())
    }

    async fn claim_respects_limit(harness, dialect) {
        let events = new_events(ORDERS, 5);
        publish(harness, dialect, &events).await?;
        let outbox = dialect.outbox_dao();
        let first = outbox.claim(ORDERS, 2).await.map_err(fail)?;
        assert_eq!(claimed_ids(&first), ids_of(&events[..2]), "the limit caps the batch");
        assert!(first.events.iter().all(|event| event.status == EventStatus::InProcess));
        assert!(first.events.iter().all(|event| event.claim_token == Some(first.claim_token)));
        let second = outbox.claim(ORDERS, 2).await.map_err(fail)?;
        assert_eq!(claimed_ids(&second), ids_of(&events[2..4]));
        assert_ne!(first.claim_token, second.claim_token, "every batch gets a fresh claim token");
        let third = outbox.claim(ORDERS, 2).await.map_err(fail)?;
        assert_eq!(claimed_ids(&third), ids_of(&events[4..]));
        assert!(outbox.claim(ORDERS, 2).await.map_err(fail)?.is_empty(), "claimed rows are not claimed again");
        Ok(())
    }

    async fn claim_skips_rows_not_due_yet(harness, dialect) {
        let (events, batch) = published_and_claimed(harness, dialect, 2).await?;
        let outbox = dialect.outbox_dao();
        let settlements = vec![
            Settlement::Retry { id: events[0].id, delay: HOUR, error: "broker away".into() },
            Settlement::Retry { id: events[1].id, delay: Duration::ZERO, error: "broker away".into() },
        ];
        outbox.settle(&batch, &settlements).await.map_err(fail)?;
        let again = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert_eq!(claimed_ids(&again), vec![events[1].id], "a row due in an hour is not claimed now");
        Ok(())
    }

    async fn claim_takes_oldest_next_retry_at_first(harness, dialect) {
        let events = new_events(ORDERS, 4);
        publish(harness, dialect, &events).await?;
        // Due times: event 2 oldest, then 0, then 3; event 1 keeps its insert time.
        harness
            .backdate(dialect, AgedTable::Events, &[events[2].id], Duration::from_secs(300))
            .await
            .map_err(fail)?;
        harness
            .backdate(dialect, AgedTable::Events, &[events[0].id], Duration::from_secs(200))
            .await
            .map_err(fail)?;
        harness
            .backdate(dialect, AgedTable::Events, &[events[3].id], Duration::from_secs(100))
            .await
            .map_err(fail)?;
        let outbox = dialect.outbox_dao();
        let batch = outbox.claim(ORDERS, 3).await.map_err(fail)?;
        assert_eq!(
            claimed_ids(&batch),
            vec![events[2].id, events[0].id, events[3].id],
            "oldest next_retry_at first"
        );
        let batch = outbox.claim(ORDERS, 3).await.map_err(fail)?;
        assert_eq!(claimed_ids(&batch), vec![events[1].id]);
        Ok(())
    }

    async fn two_concurrent_claims_never_share_a_row(harness, dialect) {
        let events = new_events(ORDERS, 100);
        publish(harness, dialect, &events).await?;
        let outbox = dialect.outbox_dao();
        let (first, second) = tokio::join!(outbox.claim(ORDERS, 50), outbox.claim(ORDERS, 50));
        let (first, second) = (first.map_err(fail)?, second.map_err(fail)?);
        let first_ids: HashSet<Uuid> = claimed_ids(&first).into_iter().collect();
        let second_ids: HashSet<Uuid> = claimed_ids(&second).into_iter().collect();
        assert!(first_ids.is_disjoint(&second_ids), "two claims shared rows");
        assert_eq!(first_ids.len() + second_ids.len(), 100, "together the claims took every row");
        Ok(())
    }

    async fn four_claiming_tasks_claim_every_row_once(harness, dialect) {
        let events = new_events(ORDERS, 500);
        publish(harness, dialect, &events).await?;
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let outbox = dialect.outbox_dao();
            tasks.push(tokio::spawn(async move {
                let mut claimed = Vec::new();
                loop {
                    let batch = outbox.claim(ORDERS, 17).await?;
                    if batch.is_empty() {
                        return Ok::<_, oncebox_core::Error>(claimed);
                    }
                    let report = outbox.settle(&batch, &processed_all(&batch)).await?;
                    assert_eq!(report.settled, batch.len() as u64, "a fresh claim settles in full");
                    claimed.extend(claimed_ids(&batch));
                }
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.map_err(fail)?.map_err(fail)?);
        }
        let unique: HashSet<Uuid> = all.iter().copied().collect();
        assert_eq!(all.len(), 500, "some row was claimed twice or not at all");
        assert_eq!(unique, ids_of(&events).into_iter().collect::<HashSet<_>>());
        Ok(())
    }

    // Settling.

    async fn settle_processed_counts_the_attempt(harness, dialect) {
        let (events, batch) = published_and_claimed(harness, dialect, 3).await?;
        let outbox = dialect.outbox_dao();
        let report = outbox.settle(&batch, &processed_all(&batch)).await.map_err(fail)?;
        assert_eq!((report.settled, report.refused), (3, 0));
        for event in &events {
            let row = stored(&*outbox, event.id).await?;
            assert_eq!(row.status, EventStatus::Processed);
            assert_eq!(row.attempts, 1, "the delivery counts as attempt 1");
            assert_eq!(row.claim_token, None, "settling clears the claim token");
            assert_eq!(row.last_error, None);
            let processed_at = row.processed_at.ok_or_else(|| fail("processed_at is not set"))?;
            assert!(close_to(processed_at, row.updated_at, Duration::from_secs(1)));
        }
        // Settling again is refused: the rows no longer hold the claim.
        let report = outbox.settle(&batch, &processed_all(&batch)).await.map_err(fail)?;
        assert_eq!((report.settled, report.refused), (0, 3));
        Ok(())
    }

    async fn settle_retry_schedules_the_next_attempt(harness, dialect) {
        let (events, batch) = published_and_claimed(harness, dialect, 1).await?;
        let id = events[0].id;
        let outbox = dialect.outbox_dao();
        let delay = Duration::from_millis(90_250);
        let report = outbox
            .settle(&batch, &[Settlement::Retry { id, delay, error: "connection refused".into() }])
            .await
            .map_err(fail)?;
        assert_eq!((report.settled, report.refused), (1, 0));
        let row = stored(&*outbox, id).await?;
        assert_eq!(row.status, EventStatus::Pending);
        assert_eq!(row.attempts, 1);
        assert_eq!(row.claim_token, None);
        assert_eq!(row.last_error.as_deref(), Some("connection refused"));
        let expected = row.updated_at + chrono::Duration::from_std(delay).map_err(fail)?;
        assert!(
            close_to(row.next_retry_at, expected, Duration::from_secs(1)),
            "next_retry_at {} should be about now + {delay:?} = {expected}",
            row.next_retry_at
        );

        // A second failure counts attempt 2, and a long error text is shortened, not refused.
        harness.backdate(dialect, AgedTable::Events, &[id], TWO_HOURS).await.map_err(fail)?;
        let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert_eq!(claimed_ids(&batch), vec![id], "a row is claimable once its retry is due");
        let long_error = "x".repeat(20_000);
        outbox
            .settle(&batch, &[Settlement::Retry { id, delay: Duration::ZERO, error: long_error }])
            .await
            .map_err(fail)?;
        let row = stored(&*outbox, id).await?;
        assert_eq!(row.attempts, 2);
        let stored_error = row.last_error.unwrap_or_default();
        assert!(!stored_error.is_empty() && stored_error.len() < 20_000, "last_error should be shortened");

        let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        outbox.settle(&batch, &processed_all(&batch)).await.map_err(fail)?;
        let row = stored(&*outbox, id).await?;
        assert_eq!((row.status, row.attempts), (EventStatus::Processed, 3));
        assert_eq!(row.last_error, None, "a delivery clears the last error");
        Ok(())
    }

    async fn settle_failed_keeps_the_error(harness, dialect) {
        let (events, batch) = published_and_claimed(harness, dialect, 2).await?;
        let outbox = dialect.outbox_dao();
        let settlements = vec![
            Settlement::Failed { id: events[0].id, error: "message too large".into() },
            Settlement::Processed { id: events[1].id },
        ];
        let report = outbox.settle(&batch, &settlements).await.map_err(fail)?;
        assert_eq!((report.settled, report.refused), (2, 0));
        let failed = stored(&*outbox, events[0].id).await?;
        assert_eq!(failed.status, EventStatus::Failed);
        assert_eq!(failed.attempts, 1);
        assert_eq!(failed.claim_token, None);
        assert_eq!(failed.last_error.as_deref(), Some("message too large"));
        assert_eq!(stored(&*outbox, events[1].id).await?.status, EventStatus::Processed);
        assert!(outbox.claim(ORDERS, 10).await.map_err(fail)?.is_empty(), "FAILED rows are never claimed");
        Ok(())
    }

    async fn a_stale_claim_token_cannot_settle(harness, dialect) {
        let (events, old_batch) = published_and_claimed(harness, dialect, 3).await?;
        let outbox = dialect.outbox_dao();
        // The first worker stalls: its batch is recovered as stuck and claimed by a second worker.
        harness.backdate(dialect, AgedTable::Events, &[], TWO_HOURS).await.map_err(fail)?;
        assert_eq!(outbox.recover_stuck(HOUR, 5, 100).await.map_err(fail)?, 3);
        let new_batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert_eq!(new_batch.len(), 3);
        assert_ne!(new_batch.claim_token, old_batch.claim_token);

        // Both settle shapes are fenced: a dialect may settle an all-delivered batch with a statement
        // of its own.
        let report = outbox.settle(&old_batch, &processed_all(&old_batch)).await.map_err(fail)?;
        assert_eq!((report.settled, report.refused), (0, 3), "a stale all-delivered batch must be refused");
        let failures: Vec<Settlement> = events
            .iter()
            .map(|event| Settlement::Failed { id: event.id, error: "late failure".into() })
            .collect();
        let report = outbox.settle(&old_batch, &failures).await.map_err(fail)?;
        assert_eq!((report.settled, report.refused), (0, 3), "the stale batch must be refused");
        let retries: Vec<Settlement> = events
            .iter()
            .map(|event| Settlement::Retry { id: event.id, delay: Duration::ZERO, error: "late retry".into() })
            .collect();
        let report = outbox.settle(&old_batch, &retries).await.map_err(fail)?;
        assert_eq!((report.settled, report.refused), (0, 3), "a stale retry must be refused");
        for event in &events {
            let row = stored(&*outbox, event.id).await?;
            assert_eq!(row.status, EventStatus::InProcess, "the new claimer's state is kept");
            assert_eq!(row.claim_token, Some(new_batch.claim_token));
            assert_eq!(row.attempts, 0);
            assert_eq!(row.last_error, None);
        }
        let report = outbox.settle(&new_batch, &processed_all(&new_batch)).await.map_err(fail)?;
        assert_eq!((report.settled, report.refused), (3, 0), "the current claimer settles");
        Ok(())
    }

    // Background jobs on the outbox.

    async fn stuck_recovery_keeps_attempts_and_spares_young_rows(harness, dialect) {
        let outbox = dialect.outbox_dao();
        // One row with an attempt behind it, then claimed again.
        let (retried, batch) = published_and_claimed(harness, dialect, 1).await?;
        let retried = retried[0].id;
        outbox
            .settle(&batch, &[Settlement::Retry { id: retried, delay: Duration::ZERO, error: "flaky".into() }])
            .await
            .map_err(fail)?;
        assert_eq!(claimed_ids(&outbox.claim(ORDERS, 10).await.map_err(fail)?), vec![retried]);
        // Two fresh stuck rows, and one young claimed row.
        let others = new_events(ORDERS, 3);
        publish(harness, dialect, &others).await?;
        let young_batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert_eq!(young_batch.len(), 3);
        let old_ids = [retried, others[0].id, others[1].id];
        harness.backdate(dialect, AgedTable::Events, &old_ids, TWO_HOURS).await.map_err(fail)?;

        assert_eq!(outbox.recover_stuck(HOUR, 5, 2).await.map_err(fail)?, 2, "at most `limit` rows per call");
        assert_eq!(outbox.recover_stuck(HOUR, 5, 2).await.map_err(fail)?, 1);
        assert_eq!(outbox.recover_stuck(HOUR, 5, 2).await.map_err(fail)?, 0);
        for id in old_ids {
            let row = stored(&*outbox, id).await?;
            assert_eq!(row.status, EventStatus::Pending, "stuck row {id} is PENDING again");
            assert_eq!(row.claim_token, None);
        }
        assert_eq!(stored(&*outbox, retried).await?.attempts, 1, "recovery does not count an attempt");
        assert_eq!(stored(&*outbox, others[0].id).await?.attempts, 0);
        let young = stored(&*outbox, others[2].id).await?;
        assert_eq!(young.status, EventStatus::InProcess, "a row claimed just now is not stuck");
        assert_eq!(young.claim_token, Some(young_batch.claim_token));
        let reclaimed = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert_eq!(reclaimed.len(), 3, "recovered rows are claimable again");
        Ok(())
    }

    async fn stuck_recovery_fails_a_row_after_max_recoveries(harness, dialect) {
        const MAX_RECOVERIES: u32 = 3;
        let outbox = dialect.outbox_dao();
        // An event with one failed send behind it, then claimed by workers that all die sending it.
        let (published, batch) = published_and_claimed(harness, dialect, 1).await?;
        let crasher = published[0].id;
        outbox
            .settle(&batch, &[Settlement::Retry { id: crasher, delay: Duration::ZERO, error: "flaky".into() }])
            .await
            .map_err(fail)?;
        for recovery in 1..=MAX_RECOVERIES {
            assert_eq!(claimed_ids(&outbox.claim(ORDERS, 10).await.map_err(fail)?), vec![crasher]);
            harness.backdate(dialect, AgedTable::Events, &[crasher], TWO_HOURS).await.map_err(fail)?;
            assert_eq!(outbox.recover_stuck(HOUR, MAX_RECOVERIES, 100).await.map_err(fail)?, 1);
            let row = stored(&*outbox, crasher).await?;
            assert_eq!(row.attempts, 1, "recovery {recovery} does not count an attempt");
            assert_eq!(row.claim_token, None);
            if recovery < MAX_RECOVERIES {
                assert_eq!(row.status, EventStatus::Pending, "after {recovery} of {MAX_RECOVERIES} recoveries");
                assert_eq!(row.last_error.as_deref(), Some("flaky"));
            } else {
                assert_eq!(row.status, EventStatus::Failed, "after {MAX_RECOVERIES} recoveries");
                let last_error = row.last_error.unwrap_or_default();
                assert!(last_error.contains(&format!("recovered {MAX_RECOVERIES} times")), "{last_error}");
            }
        }
        assert!(outbox.claim(ORDERS, 10).await.map_err(fail)?.is_empty(), "a FAILED row is never claimed");
        Ok(())
    }

    async fn a_settle_restarts_the_count_of_recoveries(harness, dialect) {
        const MAX_RECOVERIES: u32 = 2;
        let outbox = dialect.outbox_dao();
        // A worker stalls on the event once; the next one gets an outcome, a retry.
        let (published, _) = published_and_claimed(harness, dialect, 1).await?;
        let event = published[0].id;
        harness.backdate(dialect, AgedTable::Events, &[event], TWO_HOURS).await.map_err(fail)?;
        assert_eq!(outbox.recover_stuck(HOUR, MAX_RECOVERIES, 100).await.map_err(fail)?, 1);
        let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        assert_eq!(claimed_ids(&batch), vec![event]);
        let retry = Settlement::Retry { id: event, delay: Duration::ZERO, error: "broker away".into() };
        assert_eq!(outbox.settle(&batch, &[retry]).await.map_err(fail)?.settled, 1);
        // A stall after that outcome starts a new run: the event stays deliverable.
        for recovery in 1..=MAX_RECOVERIES {
            assert_eq!(claimed_ids(&outbox.claim(ORDERS, 10).await.map_err(fail)?), vec![event]);
            harness.backdate(dialect, AgedTable::Events, &[event], TWO_HOURS).await.map_err(fail)?;
            assert_eq!(outbox.recover_stuck(HOUR, MAX_RECOVERIES, 100).await.map_err(fail)?, 1);
            let row = stored(&*outbox, event).await?;
            assert_eq!(row.attempts, 1, "only the settle counted an attempt");
            if recovery < MAX_RECOVERIES {
                assert_eq!(
                    row.status,
                    EventStatus::Pending,
                    "{recovery} recovery since the settle, {} in all, of at most {MAX_RECOVERIES}: \
                     the settle must restart the count",
                    recovery + 1
                );
            } else {
                // The stalls since the settle still add up to the limit.
                assert_eq!(row.status, EventStatus::Failed, "after {MAX_RECOVERIES} consecutive recoveries");
                let last_error = row.last_error.unwrap_or_default();
                assert!(last_error.contains(&format!("recovered {MAX_RECOVERIES} times")), "{last_error}");
            }
        }
        Ok(())
    }

    async fn create_schema_adds_recoveries_to_an_older_outbox_table(harness, dialect) {
        // An outbox table as an oncebox without migration 0005 left it, holding a stuck row.
        harness.execute_sql(dialect, "ALTER TABLE {events} DROP COLUMN recoveries").await.map_err(fail)?;
        let (published, _) = published_and_claimed(harness, dialect, 1).await?;
        harness.backdate(dialect, AgedTable::Events, &[], TWO_HOURS).await.map_err(fail)?;
        let outbox = dialect.outbox_dao();
        let missing = outbox.recover_stuck(HOUR, 1, 10).await;
        assert!(missing.is_err(), "recovery needs the recoveries column");

        let everything = SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true };
        dialect.create_schema(everything).await.map_err(fail)?;
        dialect.create_schema(everything).await.map_err(fail)?;
        assert_eq!(outbox.recover_stuck(HOUR, 1, 10).await.map_err(fail)?, 1);
        let row = stored(&*outbox, published[0].id).await?;
        assert_eq!(row.status, EventStatus::Failed, "the existing row starts at 0 recoveries");
        assert!(row.last_error.is_some_and(|error| error.contains("recovered 1 times")));
        Ok(())
    }

    async fn clean_up_deletes_only_old_processed_rows_in_batches(harness, dialect) {
        let (events, batch) = published_and_claimed(harness, dialect, 5).await?;
        let outbox = dialect.outbox_dao();
        outbox.settle(&batch, &processed_all(&batch)).await.map_err(fail)?;
        let pending = new_events(ORDERS, 1);
        publish(harness, dialect, &pending).await?;
        let old: Vec<Uuid> = events[..3].iter().map(|event| event.id).chain([pending[0].id]).collect();
        harness.backdate(dialect, AgedTable::Events, &old, TWO_HOURS).await.map_err(fail)?;

        assert_eq!(outbox.delete_processed(HOUR, 2).await.map_err(fail)?, 2, "at most `limit` rows per call");
        assert_eq!(outbox.delete_processed(HOUR, 2).await.map_err(fail)?, 1);
        assert_eq!(outbox.delete_processed(HOUR, 2).await.map_err(fail)?, 0);
        for event in &events[..3] {
            assert!(outbox.get(event.id).await.map_err(fail)?.is_none(), "old processed row kept");
        }
        for event in &events[3..] {
            stored(&*outbox, event.id).await?;
        }
        assert_eq!(stored(&*outbox, pending[0].id).await?.status, EventStatus::Pending, "only PROCESSED rows go");
        Ok(())
    }

    async fn counts_group_by_type_and_status(harness, dialect) {
        let (_, batch) = published_and_claimed(harness, dialect, 2).await?;
        publish(harness, dialect, &new_events(ORDERS, 3)).await?;
        publish(harness, dialect, &new_events(PAYMENTS, 4)).await?;
        let outbox = dialect.outbox_dao();
        outbox.settle(&batch, &processed_all(&batch)[..1]).await.map_err(fail)?;
        let counts = outbox.counts().await.map_err(fail)?;
        let mut rows = counts.by_type_and_status.clone();
        rows.sort_by(|a, b| (a.0.as_str(), a.1.as_str()).cmp(&(b.0.as_str(), b.1.as_str())));
        assert_eq!(
            rows,
            vec![
                (ORDERS.to_owned(), EventStatus::InProcess, 1),
                (ORDERS.to_owned(), EventStatus::Pending, 3),
                (ORDERS.to_owned(), EventStatus::Processed, 1),
                (PAYMENTS.to_owned(), EventStatus::Pending, 4),
            ]
        );
        assert_eq!(counts.total(), 9);
        assert!(outbox.get(Uuid::now_v7()).await.map_err(fail)?.is_none(), "an unknown id reads as None");
        Ok(())
    }

    async fn counts_give_the_age_of_the_oldest_pending_event_per_type(harness, dialect) {
        let (_, batch) = published_and_claimed(harness, dialect, 2).await?;
        let orders = new_events(ORDERS, 3);
        publish(harness, dialect, &orders).await?;
        publish(harness, dialect, &new_events(PAYMENTS, 1)).await?;
        let hour = Duration::from_secs(3600);
        // The oldest pending order waited two hours, the next one hour; the claimed batch is older
        // still but IN_PROCESS, so it does not count.
        harness.backdate(dialect, AgedTable::Events, &[orders[0].id], hour).await.map_err(fail)?;
        harness.backdate(dialect, AgedTable::Events, &[orders[0].id, orders[1].id], hour).await.map_err(fail)?;
        harness.backdate(dialect, AgedTable::Events, &claimed_ids(&batch), hour * 3).await.map_err(fail)?;
        let counts = dialect.outbox_dao().counts().await.map_err(fail)?;
        let mut ages = counts.oldest_pending.clone();
        ages.sort();
        assert_eq!(ages.len(), 2, "{ages:?}");
        let (order_type, order_age) = &ages[0];
        assert_eq!(order_type, ORDERS);
        assert!(*order_age >= hour * 2 && *order_age < hour * 2 + Duration::from_secs(600), "{order_age:?}");
        let (payment_type, payment_age) = &ages[1];
        assert_eq!(payment_type, PAYMENTS);
        assert!(*payment_age < Duration::from_secs(600), "a new event is young: {payment_age:?}");
        Ok(())
    }

    // Payloads.

    async fn payload_texts_round_trip(harness, dialect) {
        let payloads = [
            String::new(),
            "plain text, not JSON".to_owned(),
            "{\"emoji\":\"🚀🎉👩‍👩‍👧\",\"cjk\":\"注文が作成されました\",\"rtl\":\"مرحبا\"}".to_owned(),
            "combining: e\u{301} a\u{308} n\u{303}; zero width:\u{200b}|".to_owned(),
            "quotes ' \" ` and backslashes \\ \\\\ \\n; percent %s %d; NUL-free \t tab".to_owned(),
            "'); DROP TABLE outbox_events; --".to_owned(),
        ];
        let events: Vec<NewOutboxEvent> = payloads
            .iter()
            .enumerate()
            .map(|(index, payload)| NewOutboxEvent { payload: payload.clone(), ..new_event(ORDERS, index) })
            .collect();
        round_trip(harness, dialect, &events).await?;
        Ok(())
    }

    async fn large_payload_round_trips(harness, dialect) {
        let mebibyte: String = "0123456789abcdef".repeat(64 * 1024);
        let event = NewOutboxEvent { payload: mebibyte, ..new_event(ORDERS, 0) };
        let claimed = round_trip(harness, dialect, std::slice::from_ref(&event)).await?;
        assert_eq!(claimed[0].payload.len(), 1024 * 1024);
        Ok(())
    }

    async fn headers_and_partition_key_survive_claim(harness, dialect) {
        let mut with_headers = new_event(ORDERS, 0);
        with_headers
            .headers
            .insert("traceparent".into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
        with_headers.headers.insert("correlation-id".into(), "order-42".into());
        with_headers.headers.insert("note".into(), "quotes \" and ünïcödé ✓".into());
        with_headers.partition_key = Some("customer-7".into());
        let plain = new_event(ORDERS, 1);
        let claimed = round_trip(harness, dialect, &[with_headers.clone(), plain]).await?;
        assert_eq!(claimed[0].headers.len(), 3);
        assert_eq!(claimed[1].partition_key, None, "no partition key stays none");
        let message = claimed[0].to_message("orders");
        assert_eq!(message.key, "customer-7", "the partition key is the message key");
        Ok(())
    }
}

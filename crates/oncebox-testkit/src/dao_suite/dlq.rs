//! The dead letter queue.

use super::*;

/// Publishes `orders` events of [`ORDERS`] and `payments` of [`PAYMENTS`], fails them all and moves
/// them to the DLQ. Returns the moved rows as they were in the outbox, oldest first.
async fn in_dlq<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
    orders: usize,
    payments: usize,
) -> Result<Vec<OutboxEvent>, Failed> {
    in_dlq_written(harness, dialect, orders, payments, &[]).await
}

/// [`in_dlq`], the `n`th event of `event_type` written `age` earlier for each
/// `(event_type, n, age)` of `aged`.
async fn in_dlq_written<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
    orders: usize,
    payments: usize,
    aged: &[(&str, usize, Duration)],
) -> Result<Vec<OutboxEvent>, Failed> {
    let outbox = dialect.outbox_dao();
    let mut failed = Vec::new();
    for (event_type, count) in [(ORDERS, orders), (PAYMENTS, payments)] {
        if count == 0 {
            continue;
        }
        let events = new_events(event_type, count);
        publish(harness, dialect, &events).await?;
        for (_, n, age) in aged.iter().filter(|(aged_type, n, _)| *aged_type == event_type && *n < count) {
            harness.backdate(dialect, AgedTable::Events, &[events[*n].id], *age).await.map_err(fail)?;
        }
        let batch = outbox.claim(event_type, 1000).await.map_err(fail)?;
        let settlements: Vec<Settlement> = batch
            .events
            .iter()
            .map(|event| Settlement::Failed { id: event.id, error: "gave up".into() })
            .collect();
        outbox.settle(&batch, &settlements).await.map_err(fail)?;
        for event in &batch.events {
            failed.push(stored(&*outbox, event.id).await?);
        }
    }
    let moved = dialect.dlq_dao().transfer_to_dlq(1000).await.map_err(fail)?;
    assert_eq!(moved.len(), failed.len(), "every FAILED row moves to the DLQ");
    Ok(failed)
}

/// Checks that `count` rows of `selection` were written more than `age` ago, the oldest `oldest`
/// ago. The age is read on the database's clock; a case may take up to a minute to get there.
async fn assert_older(
    dlq: &dyn oncebox_core::DlqDao,
    selection: &DlqSelection,
    age: Duration,
    count: u64,
    oldest: Duration,
) -> TestResult {
    let older = dlq.older_than(selection, age).await.map_err(fail)?;
    assert_eq!(older.count, count, "{selection:?} older than {age:?}: {older:?}");
    let found = older.oldest_age.unwrap_or_default();
    assert!(
        found >= oldest && found < oldest + Duration::from_secs(60),
        "oldest {found:?}, expected {oldest:?}"
    );
    Ok(())
}

dao_cases! {
    // Dead letter queue.

    async fn dlq_transfer_to_keeps_id_and_data(harness, dialect) {
        let outbox = dialect.outbox_dao();
        let dlq = dialect.dlq_dao();
        let mut events = new_events(ORDERS, 3);
        events[0].headers.insert("traceparent".into(), "00-trace-span-01".into());
        events[0].partition_key = Some("customer-1".into());
        publish(harness, dialect, &events).await?;
        let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        let settlements = vec![
            Settlement::Failed { id: events[0].id, error: "too large".into() },
            Settlement::Failed { id: events[1].id, error: "rejected".into() },
            Settlement::Processed { id: events[2].id },
        ];
        outbox.settle(&batch, &settlements).await.map_err(fail)?;
        let before = [stored(&*outbox, events[0].id).await?, stored(&*outbox, events[1].id).await?];

        let first = dlq.transfer_to_dlq(1).await.map_err(fail)?;
        assert_eq!(first.len(), 1, "at most `limit` rows per transfer");
        let rest = dlq.transfer_to_dlq(10).await.map_err(fail)?;
        assert_eq!(rest.len(), 1);
        assert!(dlq.transfer_to_dlq(10).await.map_err(fail)?.is_empty());
        let mut moved: Vec<OutboxEvent> = first.into_iter().chain(rest).collect();
        moved.sort_by_key(|event| event.id);
        assert_eq!(moved.as_slice(), &before, "the moved rows are returned unchanged");

        for original in &before {
            assert!(outbox.get(original.id).await.map_err(fail)?.is_none(), "moved row left in the outbox");
            let row = dlq.get(original.id).await.map_err(fail)?.ok_or_else(|| fail("row missing in the DLQ"))?;
            assert_eq!(&row.event, original, "same id and data in the DLQ");
            assert_eq!(row.dlq_status, DlqStatus::Moved);
            assert_eq!(row.event.status, EventStatus::Failed);
            assert!(row.moved_at >= original.updated_at);
        }
        assert_eq!(stored(&*outbox, events[2].id).await?.status, EventStatus::Processed, "others stay");
        let counts = outbox.counts().await.map_err(fail)?;
        assert_eq!(counts.total(), 1);
        assert_eq!(dlq.count(&DlqFilter::default()).await.map_err(fail)?, 2);
        Ok(())
    }

    async fn dlq_transfer_from_makes_events_claimable_again(harness, dialect) {
        let failed = in_dlq(harness, dialect, 3, 0).await?;
        let outbox = dialect.outbox_dao();
        let dlq = dialect.dlq_dao();
        assert_eq!(dlq.transfer_from_dlq(10).await.map_err(fail)?, 0, "MOVED rows stay until a person acts");
        let retry: Vec<Uuid> = failed[..2].iter().map(|event| event.id).collect();
        assert_eq!(dlq.set_status(&DlqSelection::Ids(retry.clone()), DlqStatus::ToRetry).await.map_err(fail)?, 2);

        assert_eq!(dlq.transfer_from_dlq(1).await.map_err(fail)?, 1, "at most `limit` rows per transfer");
        assert_eq!(dlq.transfer_from_dlq(10).await.map_err(fail)?, 1);
        assert_eq!(dlq.transfer_from_dlq(10).await.map_err(fail)?, 0);
        for original in &failed[..2] {
            assert!(dlq.get(original.id).await.map_err(fail)?.is_none(), "re-driven row left in the DLQ");
            let row = stored(&*outbox, original.id).await?;
            assert_eq!(row.status, EventStatus::Pending);
            assert_eq!(row.attempts, 0, "a re-driven event starts over");
            assert_eq!(row.claim_token, None);
            assert_eq!(row.processed_at, None);
            assert_eq!(row.payload, original.payload);
            assert_eq!(row.created_at, original.created_at, "created_at is the original write time");
        }
        let remaining =
            dlq.get(failed[2].id).await.map_err(fail)?.ok_or_else(|| fail("untouched DLQ row gone"))?;
        assert_eq!(remaining.dlq_status, DlqStatus::Moved);

        let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
        let mut claimed = claimed_ids(&batch);
        claimed.sort();
        assert_eq!(claimed, retry, "re-driven events are claimable with their ids");
        Ok(())
    }

    async fn dlq_set_status_refuses_in_process(harness, dialect) {
        let failed = in_dlq(harness, dialect, 1, 0).await?;
        let dlq = dialect.dlq_dao();
        for selection in [DlqSelection::Ids(vec![failed[0].id]), DlqSelection::EventType(ORDERS.into())] {
            let error = dlq.set_status(&selection, DlqStatus::InProcess).await.err();
            assert_eq!(error.map(|e| e.kind()), Some(ErrorKind::InvalidInput), "IN_PROCESS is not settable");
        }
        let row = dlq.get(failed[0].id).await.map_err(fail)?.ok_or_else(|| fail("DLQ row gone"))?;
        assert_eq!(row.dlq_status, DlqStatus::Moved, "a refused change leaves the row alone");
        assert_eq!(dlq.transfer_from_dlq(10).await.map_err(fail)?, 0);
        Ok(())
    }

    async fn dlq_set_status_and_delete_by_ids_and_type(harness, dialect) {
        let failed = in_dlq(harness, dialect, 3, 2).await?;
        let dlq = dialect.dlq_dao();
        let order_ids: Vec<Uuid> = failed.iter().filter(|e| e.event_type == ORDERS).map(|e| e.id).collect();
        let status_of = |id: Uuid| {
            let dlq = dlq.clone();
            async move {
                let row = dlq.get(id).await.map_err(fail)?.ok_or_else(|| fail(format!("DLQ row {id} gone")))?;
                Ok::<_, Failed>(row.dlq_status)
            }
        };

        let before = dlq.get(order_ids[0]).await.map_err(fail)?.ok_or_else(|| fail("DLQ row gone"))?;
        let changed = dlq.set_status(&DlqSelection::Ids(vec![order_ids[0]]), DlqStatus::Resolved).await;
        assert_eq!(changed.map_err(fail)?, 1);
        assert_eq!(status_of(order_ids[0]).await?, DlqStatus::Resolved);
        let after = dlq.get(order_ids[0]).await.map_err(fail)?.ok_or_else(|| fail("DLQ row gone"))?;
        assert!(after.event.updated_at >= before.event.updated_at, "a status change updates updated_at");
        assert_eq!(status_of(order_ids[1]).await?, DlqStatus::Moved, "other ids are untouched");

        let changed = dlq.set_status(&DlqSelection::EventType(PAYMENTS.into()), DlqStatus::ToRetry).await;
        assert_eq!(changed.map_err(fail)?, 2);
        let filter = DlqFilter { status: Some(DlqStatus::ToRetry), event_type: None };
        assert_eq!(dlq.count(&filter).await.map_err(fail)?, 2);
        assert_eq!(dlq.set_status(&DlqSelection::Ids(Vec::new()), DlqStatus::Resolved).await.map_err(fail)?, 0);
        let unknown = DlqSelection::Ids(vec![Uuid::now_v7()]);
        assert_eq!(dlq.set_status(&unknown, DlqStatus::Resolved).await.map_err(fail)?, 0);

        assert_eq!(dlq.delete(&DlqSelection::Ids(vec![order_ids[0], order_ids[1]])).await.map_err(fail)?, 2);
        assert!(dlq.get(order_ids[0]).await.map_err(fail)?.is_none());
        assert_eq!(dlq.delete(&DlqSelection::Ids(Vec::new())).await.map_err(fail)?, 0);
        assert_eq!(dlq.delete(&DlqSelection::EventType(PAYMENTS.into())).await.map_err(fail)?, 2);
        assert_eq!(dlq.count(&DlqFilter::default()).await.map_err(fail)?, 1);
        assert_eq!(status_of(order_ids[2]).await?, DlqStatus::Moved);
        Ok(())
    }

    async fn dlq_changes_by_long_id_lists_reach_every_chunk(harness, dialect) {
        // Past the 4,096 ids a MySQL statement takes: the list is split, and a row in any chunk,
        // the last one included, is changed exactly once.
        let failed = in_dlq(harness, dialect, 3, 0).await?;
        let dlq = dialect.dlq_dao();
        let mut ids: Vec<Uuid> = (0..5_000).map(|_| Uuid::now_v7()).collect();
        for (at, event) in [0, 4_096, 4_999].into_iter().zip(&failed) {
            ids[at] = event.id;
        }
        let selection = DlqSelection::Ids(ids);
        assert_eq!(dlq.set_status(&selection, DlqStatus::Resolved).await.map_err(fail)?, 3);
        let resolved = DlqFilter { status: Some(DlqStatus::Resolved), event_type: None };
        assert_eq!(dlq.count(&resolved).await.map_err(fail)?, 3);
        assert_eq!(dlq.delete(&selection).await.map_err(fail)?, 3);
        assert_eq!(dlq.count(&DlqFilter::default()).await.map_err(fail)?, 0);
        Ok(())
    }

    async fn dlq_list_and_count_filter_and_page(harness, dialect) {
        let first = in_dlq(harness, dialect, 4, 0).await?;
        // A second transfer, later than the first, so moved_at orders the two groups.
        harness.backdate(dialect, AgedTable::Dlq, &[], Duration::from_secs(60)).await.map_err(fail)?;
        let second = in_dlq(harness, dialect, 0, 3).await?;
        let dlq = dialect.dlq_dao();
        let mut expected: Vec<Uuid> = first.iter().map(|event| event.id).collect();
        expected.sort();
        let mut later: Vec<Uuid> = second.iter().map(|event| event.id).collect();
        later.sort();
        expected.extend(later);

        let mut paged = Vec::new();
        for page in 0..4 {
            let rows = dlq.list(&DlqFilter::default(), page * 3, 3).await.map_err(fail)?;
            assert!(rows.len() <= 3);
            paged.extend(rows.iter().map(|row| row.event.id));
        }
        assert_eq!(paged, expected, "pages follow moved_at, then id, without gaps or repeats");
        let moved_at: Vec<DateTime<Utc>> =
            dlq.list(&DlqFilter::default(), 0, 100).await.map_err(fail)?.iter().map(|row| row.moved_at).collect();
        assert!(moved_at.windows(2).all(|pair| pair[0] <= pair[1]), "ordered by moved_at");

        dlq.set_status(&DlqSelection::Ids(vec![first[0].id, second[0].id]), DlqStatus::Resolved)
            .await
            .map_err(fail)?;
        let resolved = DlqFilter { status: Some(DlqStatus::Resolved), event_type: None };
        let resolved_orders = DlqFilter { status: Some(DlqStatus::Resolved), event_type: Some(ORDERS.into()) };
        let payments = DlqFilter { status: None, event_type: Some(PAYMENTS.into()) };
        assert_eq!(dlq.count(&resolved).await.map_err(fail)?, 2);
        assert_eq!(dlq.count(&resolved_orders).await.map_err(fail)?, 1);
        assert_eq!(dlq.count(&payments).await.map_err(fail)?, 3);
        assert_eq!(dlq.count(&DlqFilter::default()).await.map_err(fail)?, 7);
        let listed = dlq.list(&resolved_orders, 0, 10).await.map_err(fail)?;
        assert_eq!(listed.iter().map(|row| row.event.id).collect::<Vec<_>>(), vec![first[0].id]);
        let listed = dlq.list(&payments, 1, 10).await.map_err(fail)?;
        assert_eq!(listed.len(), 2, "offset skips rows within the filter");
        assert!(listed.iter().all(|row| row.event.event_type == PAYMENTS));
        assert!(dlq.list(&DlqFilter::default(), 100, 10).await.map_err(fail)?.is_empty());

        let mut counts = dlq.counts().await.map_err(fail)?.by_type_and_status;
        counts.sort_by(|a, b| (a.0.as_str(), a.1.as_str()).cmp(&(b.0.as_str(), b.1.as_str())));
        assert_eq!(
            counts,
            vec![
                (ORDERS.to_owned(), DlqStatus::Moved, 3),
                (ORDERS.to_owned(), DlqStatus::Resolved, 1),
                (PAYMENTS.to_owned(), DlqStatus::Moved, 2),
                (PAYMENTS.to_owned(), DlqStatus::Resolved, 1),
            ]
        );
        Ok(())
    }

    async fn dlq_older_than_counts_the_selected_rows_written_before_an_age(harness, dialect) {
        // Orders 0 and 1 were written 2 h and 3 h ago, order 2 and the payments just now; the
        // move to the DLQ keeps created_at.
        let three_hours = TWO_HOURS + HOUR;
        let aged = [(ORDERS, 0, TWO_HOURS), (ORDERS, 1, three_hours)];
        let failed = in_dlq_written(harness, dialect, 3, 2, &aged).await?;
        let dlq = dialect.dlq_dao();
        // In publishing order (the ids ascend), not in the order the older rows were claimed.
        let of_type = |wanted: &str| -> Vec<Uuid> {
            let mut ids: Vec<Uuid> = failed.iter().filter(|e| e.event_type == wanted).map(|e| e.id).collect();
            ids.sort();
            ids
        };
        let (orders, payments) = (of_type(ORDERS), of_type(PAYMENTS));
        let all = DlqSelection::Ids(failed.iter().map(|e| e.id).collect());
        let by_type = |event_type: &str| DlqSelection::EventType(event_type.to_owned());

        assert_older(&*dlq, &all, HOUR, 2, three_hours).await?;
        assert_older(&*dlq, &all, TWO_HOURS + HOUR / 2, 1, three_hours).await?;
        assert_older(&*dlq, &DlqSelection::Ids(vec![orders[0], orders[2]]), HOUR, 1, TWO_HOURS).await?;
        assert_older(&*dlq, &by_type(ORDERS), HOUR, 2, three_hours).await?;

        let none = OlderEvents::default();
        let empty = [
            (DlqSelection::Ids(Vec::new()), HOUR),
            (DlqSelection::Ids(vec![Uuid::now_v7()]), HOUR),
            (DlqSelection::Ids(payments), HOUR),
            (by_type(PAYMENTS), HOUR),
            (by_type("no-such-type"), HOUR),
            (by_type(ORDERS), three_hours + HOUR),
        ];
        for (selection, age) in empty {
            let older = dlq.older_than(&selection, age).await.map_err(fail)?;
            assert_eq!(older, none, "{selection:?} older than {age:?}");
        }

        // A long id list is read in chunks: the old rows at either end are both found.
        let mut ids: Vec<Uuid> = (0..5_000).map(|_| Uuid::now_v7()).collect();
        ids[0] = orders[0];
        ids[4_999] = orders[1];
        assert_older(&*dlq, &DlqSelection::Ids(ids), HOUR, 2, three_hours).await?;

        // Whatever their DLQ status, save IN_PROCESS (which only the transfer job's transaction
        // sees): a re-drive by type changes a RESOLVED row too.
        dlq.set_status(&DlqSelection::Ids(vec![orders[0]]), DlqStatus::Resolved).await.map_err(fail)?;
        assert_older(&*dlq, &by_type(ORDERS), HOUR, 2, three_hours).await
    }

    async fn dlq_clean_up_deletes_only_old_resolved_rows(harness, dialect) {
        let failed = in_dlq(harness, dialect, 5, 0).await?;
        let ids: Vec<Uuid> = failed.iter().map(|event| event.id).collect();
        let dlq = dialect.dlq_dao();
        dlq.set_status(&DlqSelection::Ids(ids[..3].to_vec()), DlqStatus::Resolved).await.map_err(fail)?;
        // Old: resolved 0 and 1, and the MOVED row 4; young: resolved 2.
        harness.backdate(dialect, AgedTable::Dlq, &[ids[0], ids[1], ids[4]], TWO_HOURS).await.map_err(fail)?;
        assert_eq!(dlq.delete_resolved(HOUR, 1).await.map_err(fail)?, 1, "at most `limit` rows per call");
        assert_eq!(dlq.delete_resolved(HOUR, 10).await.map_err(fail)?, 1);
        assert_eq!(dlq.delete_resolved(HOUR, 10).await.map_err(fail)?, 0);
        let left: Vec<Uuid> =
            dlq.list(&DlqFilter::default(), 0, 10).await.map_err(fail)?.iter().map(|r| r.event.id).collect();
        let left: HashSet<Uuid> = left.into_iter().collect();
        assert_eq!(left, [ids[2], ids[3], ids[4]].into_iter().collect::<HashSet<_>>());
        Ok(())
    }
}

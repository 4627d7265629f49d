//! The durable inbox: stored messages, their claim, fence, settles, retry schedule, stuck leases,
//! duplicates and clean-up.

use oncebox_core::stored::{InboxSettlement, InboxStatus, LEASE_RAN_OUT, NewInboxMessage};
use oncebox_core::{StoredInboxDao, stored::InboxMessage};

use super::*;

/// The consumer most cases store for.
const BILLING: &str = "billing";

/// A message for `consumer` of `event_type`, with a payload that is not UTF-8, user headers, a
/// correlation id and a creation time.
fn message(consumer: &str, event_type: &str) -> NewInboxMessage {
    let mut headers = Headers::new();
    headers.insert("traceparent".into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
    NewInboxMessage {
        consumer: consumer.to_owned(),
        id: Uuid::now_v7(),
        event_type: event_type.to_owned(),
        payload_type: Some("OrderCreated".into()),
        payload: vec![0xff, 0x00, b'{', 0xc3, 0x28, b'}'],
        headers,
        source: "queue 'billing'".into(),
        correlation_id: Some("order-42".into()),
        created_at: Some(Utc::now() - chrono::Duration::seconds(5)),
    }
}

async fn read(inbox: &dyn StoredInboxDao, consumer: &str, id: Uuid) -> Result<InboxMessage, Failed> {
    inbox.get(consumer, id).await.map_err(fail)?.ok_or_else(|| fail(format!("message {id} is not stored")))
}

/// Stores `count` messages of [`ORDERS`] for [`BILLING`], one after the other.
async fn stored_messages(inbox: &dyn StoredInboxDao, count: usize) -> Result<Vec<NewInboxMessage>, Failed> {
    let mut messages = Vec::new();
    for _ in 0..count {
        let message = message(BILLING, ORDERS);
        assert!(inbox.store(&message).await.map_err(fail)?, "a new message is stored");
        messages.push(message);
    }
    Ok(messages)
}

fn ids(messages: &[InboxMessage]) -> Vec<Uuid> {
    messages.iter().map(|stored| stored.message.id).collect()
}

dao_cases! {
    async fn stored_inbox_keeps_a_message_once_as_it_came(_harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        let sent = message(BILLING, ORDERS);
        assert!(inbox.store(&sent).await.map_err(fail)?, "a new message is stored");
        let mut again = sent.clone();
        again.payload = b"another copy".to_vec();
        assert!(!inbox.store(&again).await.map_err(fail)?, "a redelivered id makes no second row");
        let kept = read(&*inbox, BILLING, sent.id).await?;
        let created = sent.created_at.ok_or_else(|| fail("the message has a creation time"))?;
        assert_eq!(kept.message.payload, sent.payload, "the first copy, byte for byte");
        assert_eq!(
            (&kept.message.headers, &kept.message.source, &kept.message.correlation_id),
            (&sent.headers, &sent.source, &sent.correlation_id)
        );
        assert_eq!((&kept.message.event_type, &kept.message.payload_type), (&sent.event_type, &sent.payload_type));
        assert!(kept.message.created_at.is_some_and(|at| close_to(at, created, Duration::from_millis(2))));
        assert_eq!((kept.status, kept.attempts, kept.claim_token), (InboxStatus::Received, 0, None));
        assert!(kept.available_at.is_some() && kept.processed_at.is_none());
        assert!(close_to(kept.received_at, Utc::now(), Duration::from_secs(60)), "the database's now");
        assert!(inbox.get("shipping", sent.id).await.map_err(fail)?.is_none(), "stored per consumer");
        let mut bare = message("shipping", ORDERS);
        bare.id = sent.id;
        (bare.payload_type, bare.correlation_id, bare.created_at) = (None, None, None);
        assert!(inbox.store(&bare).await.map_err(fail)?, "another consumer stores the same id");
        let kept = read(&*inbox, "shipping", sent.id).await?;
        assert_eq!((kept.message.payload_type, kept.message.correlation_id, kept.message.created_at), (None, None, None));
        Ok(())
    }

    async fn stored_claim_takes_due_messages_of_one_consumer_and_type_oldest_first(_harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        let orders = stored_messages(&*inbox, 3).await?;
        inbox.store(&message(BILLING, PAYMENTS)).await.map_err(fail)?;
        inbox.store(&message("shipping", ORDERS)).await.map_err(fail)?;
        let first = inbox.claim(BILLING, ORDERS, 2).await.map_err(fail)?;
        assert_eq!(ids(&first.messages), vec![orders[0].id, orders[1].id]);
        for claimed in &first.messages {
            assert_eq!((claimed.status, claimed.claim_token), (InboxStatus::Processing, Some(first.claim_token)));
            assert!(claimed.locked_at.is_some());
            assert_eq!(claimed.message.payload, orders[0].payload);
        }
        let second = inbox.claim(BILLING, ORDERS, 10).await.map_err(fail)?;
        assert_eq!(ids(&second.messages), vec![orders[2].id]);
        assert_ne!(second.claim_token, first.claim_token, "each claim has its own token");
        assert!(inbox.claim(BILLING, ORDERS, 10).await.map_err(fail)?.messages.is_empty(), "nothing left");
        assert!(inbox.claim(BILLING, ORDERS, 0).await.map_err(fail)?.messages.is_empty());
        assert_eq!(inbox.claim(BILLING, PAYMENTS, 10).await.map_err(fail)?.messages.len(), 1, "per type");
        assert_eq!(inbox.claim("shipping", ORDERS, 10).await.map_err(fail)?.messages.len(), 1, "per consumer");
        Ok(())
    }

    async fn stored_claims_running_at_once_never_share_a_message(_harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        let stored = stored_messages(&*inbox, 40).await?;
        let mut claimed = Vec::new();
        loop {
            let (first, second) = tokio::join!(inbox.claim(BILLING, ORDERS, 7), inbox.claim(BILLING, ORDERS, 7));
            let (first, second) = (first.map_err(fail)?, second.map_err(fail)?);
            if first.messages.is_empty() && second.messages.is_empty() {
                break;
            }
            claimed.extend(ids(&first.messages));
            claimed.extend(ids(&second.messages));
        }
        let distinct: HashSet<Uuid> = claimed.iter().copied().collect();
        assert_eq!(distinct.len(), claimed.len(), "no message claimed twice");
        assert_eq!(distinct, stored.iter().map(|message| message.id).collect(), "every message claimed");
        Ok(())
    }

    async fn stored_settles_are_fenced_by_the_claim_token(_harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        let [sent] = <[_; 1]>::try_from(stored_messages(&*inbox, 1).await?).map_err(|_| fail("one message"))?;
        let batch = inbox.claim(BILLING, ORDERS, 1).await.map_err(fail)?;
        let processed = InboxSettlement::Processed;
        assert!(!inbox.settle(BILLING, sent.id, Uuid::now_v7(), &processed).await.map_err(fail)?, "a stranger's token");
        assert!(!inbox.settle("shipping", sent.id, batch.claim_token, &processed).await.map_err(fail)?, "another consumer");
        assert_eq!(read(&*inbox, BILLING, sent.id).await?.status, InboxStatus::Processing, "a refused settle changes nothing");
        assert!(inbox.settle(BILLING, sent.id, batch.claim_token, &processed).await.map_err(fail)?);
        let done = read(&*inbox, BILLING, sent.id).await?;
        assert_eq!((done.status, done.attempts, done.claim_token, done.available_at), (InboxStatus::Processed, 0, None, None));
        assert!(done.processed_at.is_some() && done.locked_at.is_none());
        let retry = InboxSettlement::Retry { after: HOUR, error: "late".into() };
        assert!(!inbox.settle(BILLING, sent.id, batch.claim_token, &retry).await.map_err(fail)?, "settled once only");
        assert_eq!(read(&*inbox, BILLING, sent.id).await?.status, InboxStatus::Processed);
        Ok(())
    }

    async fn stored_retries_wait_their_backoff_and_failures_keep_the_error(harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        let [sent] = <[_; 1]>::try_from(stored_messages(&*inbox, 1).await?).map_err(|_| fail("one message"))?;
        let batch = inbox.claim(BILLING, ORDERS, 1).await.map_err(fail)?;
        let long = "é".repeat(2_000);
        let retry = InboxSettlement::Retry { after: HOUR, error: long.clone() };
        assert!(inbox.settle(BILLING, sent.id, batch.claim_token, &retry).await.map_err(fail)?);
        let waiting = read(&*inbox, BILLING, sent.id).await?;
        assert_eq!((waiting.status, waiting.attempts, waiting.claim_token), (InboxStatus::Received, 1, None));
        let due = waiting.available_at.ok_or_else(|| fail("a retry has a next attempt"))?;
        assert!(close_to(due, waiting.received_at + chrono::Duration::hours(1), Duration::from_secs(60)), "due in an hour: {due}");
        let kept_error = waiting.last_error.unwrap_or_default();
        assert_eq!(kept_error.chars().count(), oncebox_core::event::LAST_ERROR_MAX_CHARS, "cut, on a character boundary");
        assert!(inbox.claim(BILLING, ORDERS, 10).await.map_err(fail)?.messages.is_empty(), "not due before its time");

        harness.backdate(dialect, AgedTable::Inbox, &[sent.id], TWO_HOURS).await.map_err(fail)?;
        let again = inbox.claim(BILLING, ORDERS, 10).await.map_err(fail)?;
        assert_eq!(ids(&again.messages), vec![sent.id], "due once its time has come");
        assert_eq!(again.messages[0].attempts, 1, "a claim counts no attempt");
        let failed = InboxSettlement::Failed { error: "refused by the ledger".into() };
        assert!(inbox.settle(BILLING, sent.id, again.claim_token, &failed).await.map_err(fail)?);
        let given_up = read(&*inbox, BILLING, sent.id).await?;
        assert_eq!((given_up.status, given_up.attempts, given_up.available_at), (InboxStatus::Failed, 2, None));
        assert_eq!(given_up.last_error.as_deref(), Some("refused by the ledger"));
        harness.backdate(dialect, AgedTable::Inbox, &[sent.id], TWO_HOURS).await.map_err(fail)?;
        assert!(inbox.claim(BILLING, ORDERS, 10).await.map_err(fail)?.messages.is_empty(), "FAILED is never claimed");
        Ok(())
    }

    async fn stored_claims_whose_lease_ran_out_come_back_fenced_and_count_an_attempt(harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        let sent = stored_messages(&*inbox, 2).await?;
        let stale = inbox.claim(BILLING, ORDERS, 2).await.map_err(fail)?;
        assert_eq!(inbox.recover_stuck(BILLING, HOUR, 5).await.map_err(fail)?, 0, "within the lease");
        harness.backdate(dialect, AgedTable::Inbox, &[sent[0].id], TWO_HOURS).await.map_err(fail)?;
        assert_eq!(inbox.recover_stuck(BILLING, HOUR, 5).await.map_err(fail)?, 1, "only the old claim");
        let back = read(&*inbox, BILLING, sent[0].id).await?;
        assert_eq!((back.status, back.attempts, back.claim_token), (InboxStatus::Received, 1, None));
        assert_eq!(back.last_error.as_deref(), Some(LEASE_RAN_OUT));
        assert_eq!(read(&*inbox, BILLING, sent[1].id).await?.status, InboxStatus::Processing);

        let taken = inbox.claim(BILLING, ORDERS, 10).await.map_err(fail)?;
        assert_eq!(ids(&taken.messages), vec![sent[0].id], "due again at once");
        let processed = InboxSettlement::Processed;
        assert!(!inbox.settle(BILLING, sent[0].id, stale.claim_token, &processed).await.map_err(fail)?, "the late holder is refused");
        assert!(inbox.settle(BILLING, sent[0].id, taken.claim_token, &processed).await.map_err(fail)?);

        // A message whose runs never end: its lease runs out until its attempts do.
        harness.backdate(dialect, AgedTable::Inbox, &[sent[1].id], TWO_HOURS).await.map_err(fail)?;
        assert_eq!(inbox.recover_stuck(BILLING, HOUR, 2).await.map_err(fail)?, 1);
        let again = inbox.claim(BILLING, ORDERS, 10).await.map_err(fail)?;
        assert_eq!(ids(&again.messages), vec![sent[1].id]);
        harness.backdate(dialect, AgedTable::Inbox, &[sent[1].id], TWO_HOURS).await.map_err(fail)?;
        assert_eq!(inbox.recover_stuck(BILLING, HOUR, 2).await.map_err(fail)?, 1);
        let failed = read(&*inbox, BILLING, sent[1].id).await?;
        assert_eq!((failed.status, failed.attempts, failed.available_at), (InboxStatus::Failed, 2, None));
        assert_eq!(read(&*inbox, BILLING, sent[0].id).await?.status, InboxStatus::Processed, "settled rows stay");
        Ok(())
    }

    async fn stored_recovery_and_clean_up_touch_only_their_own_consumer(harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        // For each consumer: one message claimed long ago, one processed long ago.
        let mut ids = Vec::new();
        for consumer in [BILLING, "shipping"] {
            let (claimed, processed) = (message(consumer, ORDERS), message(consumer, ORDERS));
            inbox.store(&claimed).await.map_err(fail)?;
            inbox.store(&processed).await.map_err(fail)?;
            let batch = inbox.claim(consumer, ORDERS, 2).await.map_err(fail)?;
            let settled = inbox.settle(consumer, processed.id, batch.claim_token, &InboxSettlement::Processed);
            assert!(settled.await.map_err(fail)?);
            ids.extend([claimed.id, processed.id]);
        }
        harness.backdate(dialect, AgedTable::Inbox, &ids, TWO_HOURS).await.map_err(fail)?;
        assert_eq!(inbox.recover_stuck(BILLING, HOUR, 1).await.map_err(fail)?, 1, "billing's claim only");
        assert_eq!(inbox.delete_processed(BILLING, HOUR, 100).await.map_err(fail)?, 1, "billing's row only");
        assert_eq!(read(&*inbox, BILLING, ids[0]).await?.status, InboxStatus::Failed, "its last attempt");
        assert!(inbox.get(BILLING, ids[1]).await.map_err(fail)?.is_none());
        let shipping = read(&*inbox, "shipping", ids[2]).await?;
        assert_eq!((shipping.status, shipping.attempts), (InboxStatus::Processing, 0), "another consumer's claim stays");
        assert_eq!(read(&*inbox, "shipping", ids[3]).await?.status, InboxStatus::Processed, "and its processed row");
        Ok(())
    }

    async fn stored_transactional_finish_commits_or_rolls_back_with_the_effect(harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        let sent = stored_messages(&*inbox, 1).await?;
        let id = sent[0].id;
        let batch = inbox.claim(BILLING, ORDERS, 1).await.map_err(fail)?;
        let token = batch.claim_token;
        assert!(harness.finish_stored_in_transaction(dialect, BILLING, id, token, false).await.map_err(fail)?);
        assert_eq!(read(&*inbox, BILLING, id).await?.status, InboxStatus::Processing, "rolled back with the effect");
        let stranger = Uuid::now_v7();
        assert!(!harness.finish_stored_in_transaction(dialect, BILLING, id, stranger, true).await.map_err(fail)?);
        assert!(harness.finish_stored_in_transaction(dialect, BILLING, id, token, true).await.map_err(fail)?);
        let done = read(&*inbox, BILLING, id).await?;
        assert_eq!((done.status, done.claim_token), (InboxStatus::Processed, None));
        assert!(!harness.finish_stored_in_transaction(dialect, BILLING, id, token, true).await.map_err(fail)?, "once");
        Ok(())
    }

    async fn stored_clean_up_deletes_old_processed_messages_only_and_counts_by_status(harness, dialect) {
        let inbox = dialect.stored_inbox_dao();
        let sent = stored_messages(&*inbox, 4).await?;
        let batch = inbox.claim(BILLING, ORDERS, 3).await.map_err(fail)?;
        let token = batch.claim_token;
        inbox.settle(BILLING, sent[0].id, token, &InboxSettlement::Processed).await.map_err(fail)?;
        inbox.settle(BILLING, sent[1].id, token, &InboxSettlement::Failed { error: "no".into() }).await.map_err(fail)?;
        let counts = inbox.counts().await.map_err(fail)?;
        let count = |status| counts.iter().find(|count| count.status == status).map_or(0, |count| count.rows);
        assert_eq!(
            InboxStatus::ALL.map(count),
            [1, 1, 1, 1],
            "one RECEIVED, PROCESSING, PROCESSED and FAILED: {counts:?}"
        );
        assert!(counts.iter().all(|count| count.consumer == BILLING && count.event_type == ORDERS));
        assert_eq!(inbox.delete_processed(BILLING, HOUR, 100).await.map_err(fail)?, 0, "too young");
        let all: Vec<Uuid> = sent.iter().map(|message| message.id).collect();
        harness.backdate(dialect, AgedTable::Inbox, &all, TWO_HOURS).await.map_err(fail)?;
        assert_eq!(inbox.delete_processed(BILLING, HOUR, 0).await.map_err(fail)?, 0);
        assert_eq!(inbox.delete_processed(BILLING, HOUR, 100).await.map_err(fail)?, 1);
        assert!(inbox.get(BILLING, sent[0].id).await.map_err(fail)?.is_none(), "the processed one is gone");
        for kept in &sent[1..] {
            assert!(inbox.get(BILLING, kept.id).await.map_err(fail)?.is_some(), "unprocessed rows stay");
        }
        assert!(!inbox.store(&sent[1]).await.map_err(fail)?, "a kept id is still a duplicate");
        Ok(())
    }
}

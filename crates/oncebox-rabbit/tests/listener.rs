//! The inbox listener against a real broker (`ONCEBOX_AMQP_URL`) with the SQLite inbox.

#[path = "support/fixture.rs"]
mod fixture;
mod support;

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use oncebox_core::stored::InboxStatus;
use oncebox_rabbit::{DEFAULT_RETRY_MAX, DEFAULT_RETRY_MIN, ListenerOutcome};
use oncebox_testkit::case;
use oncebox_testkit::runner::{Case, Suite, TestResult, fail, server_missing};

use fixture::{EVENT_TYPE, Effect, Fixture, ListenerHarness, Setup, WAIT, message_for};
use support::{amqp_url, close_connections_named, connections_named, fresh_name};

async fn a_message_is_applied_once_and_a_redelivered_copy_changes_nothing(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture = Fixture::start(&harness, effect.clone(), 3).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 1);
    fixture.deliver(&sender, &message).await?;
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Applied { id: message.id });
    // The same event again, as the relay sends it after a lost confirm.
    fixture.deliver(&sender, &message).await?;
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Duplicate { id: message.id });
    assert_eq!(effect.calls.load(Ordering::SeqCst), 1, "the effect ran once");
    assert!(fixture.inbox.is_consumed(message.id).await.map_err(fail)?);
    fixture.finish().await
}

async fn a_transactional_handler_commits_its_effect_with_the_id_once_and_a_failed_run_leaves_nothing(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::failing_first(1));
    let setup = Setup { transactional: true, ..Setup::dead_lettered(3) };
    let mut fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 11);
    fixture.deliver(&sender, &message).await?;
    let first = fixture.next_outcome().await?;
    assert!(
        matches!(&first, ListenerOutcome::Retrying { id, attempts: 1, .. } if *id == message.id),
        "{first:?}"
    );
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Applied { id: message.id });
    // The same event again, as the relay sends it after a lost confirm.
    fixture.deliver(&sender, &message).await?;
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Duplicate { id: message.id });
    assert_eq!(
        effect.calls.load(Ordering::SeqCst),
        2,
        "the failed run and the applied one; not the duplicate"
    );
    assert_eq!(effect.applied.load(Ordering::SeqCst), 1);
    let rows: i64 = oncebox_sqlite::sqlx::query_scalar("SELECT COUNT(*) FROM effects WHERE event_id = ?")
        .bind(message.id.to_string())
        .fetch_one(fixture.dialect.pool())
        .await
        .map_err(fail)?;
    assert_eq!(rows, 1, "the failed run's row was rolled back with its inbox record");
    assert!(fixture.inbox.is_consumed(message.id).await.map_err(fail)?);
    fixture.finish().await
}

async fn a_durable_inbox_releases_the_broker_once_stored_and_applies_each_effect_once(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    // The first two handler runs fail after writing their effect row: retried from the stored
    // row, their rows rolled back.
    let effect = Arc::new(Effect::failing_first(2));
    let setup = Setup { durable: true, ..Setup::dead_lettered(3) };
    let mut fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let messages: Vec<_> = (0..10).map(|index| message_for(&fixture.exchange, 100 + index)).collect();
    for message in &messages {
        fixture.deliver(&sender, message).await?;
    }
    // The same event again, as the relay sends it after a lost confirm.
    fixture.deliver(&sender, &messages[0]).await?;
    let mut stored = HashSet::new();
    let mut duplicates = 0;
    while stored.len() < messages.len() || duplicates < 1 {
        match fixture.next_outcome().await? {
            ListenerOutcome::Applied { id } => assert!(stored.insert(id), "event {id} was stored twice"),
            ListenerOutcome::Duplicate { id } => {
                assert_eq!(id, messages[0].id);
                duplicates += 1;
            }
            other => return Err(fail(format!("unexpected outcome {other:?}"))),
        }
    }
    // Stopped, the listener hands back what it did not acknowledge: nothing.
    fixture.stop_listener().await?;
    assert!(fixture.queued_now().await?.is_none(), "every message was acknowledged once stored");

    let (inbox, _) = fixture.stored.as_ref().ok_or_else(|| fail("the fixture has a durable inbox"))?;
    let dao = inbox.dao().clone();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let counts = dao.counts().await.map_err(fail)?;
        let processed: u64 = counts
            .iter()
            .filter(|count| count.status == InboxStatus::Processed)
            .map(|count| count.rows)
            .sum();
        if processed == messages.len() as u64 {
            assert_eq!(counts.len(), 1, "nothing else is left: {counts:?}");
            break;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(fail(format!("not every stored message was processed: {counts:?}")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let effects: Vec<(String, i64)> =
        oncebox_sqlite::sqlx::query_as("SELECT event_id, COUNT(*) FROM effects GROUP BY event_id")
            .fetch_all(fixture.dialect.pool())
            .await
            .map_err(fail)?;
    assert_eq!(effects.len(), messages.len(), "an effect for each event");
    assert!(effects.iter().all(|(_, rows)| *rows == 1), "each effect once: {effects:?}");
    assert_eq!(effect.calls.load(Ordering::SeqCst), messages.len() + 2, "two failed runs, then one each");
    let mut attempts = 0;
    for message in &messages {
        let row = dao.get("billing", message.id).await.map_err(fail)?.ok_or_else(|| fail("a stored row"))?;
        attempts += row.attempts;
        assert_eq!(row.message.source, format!("exchange '{}' routing key '{EVENT_TYPE}'", fixture.exchange));
    }
    assert_eq!(attempts, 2, "the failed runs are counted in their rows");
    fixture.finish().await
}

async fn with_concurrency_a_busy_handler_does_not_hold_back_the_next_message(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    // The first run blocks until released: one at a time, the second message would wait behind it.
    let effect = Arc::new(Effect::holding_first_call());
    let setup = Setup { concurrency: Some(2), ..Setup::dead_lettered(3) };
    let mut fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let (first, second) = (message_for(&fixture.exchange, 31), message_for(&fixture.exchange, 32));
    fixture.deliver(&sender, &first).await?;
    tokio::time::timeout(WAIT, effect.entered.notified())
        .await
        .map_err(|_| fail("the first run never started"))?;
    fixture.deliver(&sender, &second).await?;
    assert_eq!(
        fixture.next_outcome().await?,
        ListenerOutcome::Applied { id: second.id },
        "handled beside the first"
    );
    effect.release.notify_one();
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Applied { id: first.id });
    assert_eq!(effect.applied.load(Ordering::SeqCst), 2, "each effect once");
    fixture.stop_listener().await?;
    assert!(fixture.queued_now().await?.is_none(), "both acknowledged");
    fixture.finish().await
}

async fn a_failed_effect_is_retried_after_a_pause_and_applied(harness: Arc<ListenerHarness>) -> TestResult {
    let effect = Arc::new(Effect::failing_first(1));
    let mut fixture = Fixture::start(&harness, effect.clone(), 3).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 2);
    fixture.deliver(&sender, &message).await?;
    let first = fixture.next_outcome().await?;
    assert!(
        matches!(&first, ListenerOutcome::Retrying { id, attempts: 1, retry_in, .. } if *id == message.id && *retry_in == DEFAULT_RETRY_MIN),
        "{first:?}"
    );
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Applied { id: message.id });
    assert_eq!(effect.calls.load(Ordering::SeqCst), 2);
    fixture.finish().await
}

async fn a_poison_message_is_rejected_to_the_dead_letter_exchange(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture = Fixture::start(&harness, effect.clone(), 3).await.map_err(fail)?;
    // Wait for the topology: a first good event goes through.
    let sender = fixture.sender().map_err(fail)?;
    let good = message_for(&fixture.exchange, 3);
    fixture.deliver(&sender, &good).await?;
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Applied { id: good.id });

    fixture.publish_raw(FieldTable::default(), b"{\"index\":4}").await?;
    let outcome = fixture.next_outcome().await?;
    match &outcome {
        ListenerOutcome::DeadLettered { id: None, reason, to } => {
            assert!(reason.contains("decode error") && reason.contains("oncebox_event_id"), "{reason}");
            // Declared by the listener: the exchange by name; declared elsewhere: the queue's.
            let named = format!("exchange '{}'", fixture.dead_letter_exchange);
            let queue = format!("the dead-letter exchange of queue '{}'", fixture.queue);
            assert!(*to == named || *to == queue, "{to}");
        }
        other => return Err(fail(format!("a message without an event id was not rejected: {other:?}"))),
    }
    assert!(fixture.dead_lettered().await?.is_some(), "the poison message never reached the DLX");

    let mut malformed = FieldTable::default();
    malformed
        .insert(ShortString::from("oncebox_event_id"), AMQPValue::LongString(LongString::from("not-a-uuid")));
    fixture.publish_raw(malformed, b"{\"index\":5}").await?;
    let outcome = fixture.next_outcome().await?;
    assert!(
        matches!(&outcome, ListenerOutcome::DeadLettered { id: None, reason, .. } if reason.contains("not-a-uuid")),
        "{outcome:?}"
    );
    assert!(fixture.dead_lettered().await?.is_some(), "the malformed message never reached the DLX");

    let mut undecodable = message_for(&fixture.exchange, 6);
    undecodable.payload = "{\"index\":\"six\"}".to_owned();
    fixture.deliver(&sender, &undecodable).await?;
    let outcome = fixture.next_outcome().await?;
    assert!(
        matches!(&outcome, ListenerOutcome::DeadLettered { id: Some(id), .. } if *id == undecodable.id),
        "{outcome:?}"
    );
    assert!(fixture.dead_lettered().await?.is_some(), "the undecodable message never reached the DLX");
    assert_eq!(effect.calls.load(Ordering::SeqCst), 1, "no effect ran for a poison message");
    assert!(!fixture.inbox.is_consumed(undecodable.id).await.map_err(fail)?);
    fixture.finish().await
}

async fn an_effect_that_keeps_failing_is_dead_lettered_after_max_attempts(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::failing_first(usize::MAX));
    let mut fixture = Fixture::start(&harness, effect.clone(), 3).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 7);
    fixture.deliver(&sender, &message).await?;
    for attempts in 1..=2 {
        let outcome = fixture.next_outcome().await?;
        assert!(
            matches!(&outcome, ListenerOutcome::Retrying { id, attempts: a, .. } if *id == message.id && *a == attempts),
            "{outcome:?}"
        );
    }
    let outcome = fixture.next_outcome().await?;
    assert!(
        matches!(&outcome, ListenerOutcome::DeadLettered { id: Some(id), .. } if *id == message.id),
        "{outcome:?}"
    );
    let dead =
        fixture.dead_lettered().await?.ok_or_else(|| fail("the failing event never reached the DLX"))?;
    assert_eq!(dead.delivery.data, message.payload.as_bytes());
    assert_eq!(effect.calls.load(Ordering::SeqCst), 3);
    assert!(!fixture.inbox.is_consumed(message.id).await.map_err(fail)?, "a failed effect is not recorded");
    fixture.finish().await
}

/// A database blip: the effect fails its first five calls. On a queue without a dead-letter
/// exchange and with the listener's default settings the event must still be applied, once, and
/// the handler's runs must be spaced by at least the backoff.
async fn a_brief_outage_does_not_lose_the_message_under_default_settings(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::failing_first(5));
    let mut fixture =
        Fixture::start_with(&harness, effect.clone(), Setup::plain_queue()).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 8);
    fixture.deliver(&sender, &message).await?;
    loop {
        match fixture.next_outcome().await? {
            ListenerOutcome::Applied { id } if id == message.id => break,
            ListenerOutcome::DeadLettered { id, reason, .. } => {
                return Err(fail(format!(
                    "event {id:?} was rejected without a dead-letter exchange, so RabbitMQ discarded it: {reason}"
                )));
            }
            ListenerOutcome::Retrying { .. } => {}
            other => return Err(fail(format!("unexpected outcome {other:?}"))),
        }
    }
    assert_eq!(effect.applied.load(Ordering::SeqCst), 1, "the effect happened exactly once");
    assert_eq!(effect.calls.load(Ordering::SeqCst), 6, "five failed runs and the one that succeeded");
    assert!(fixture.inbox.is_consumed(message.id).await.map_err(fail)?);
    let instants = effect.call_instants();
    for (failed_runs, pair) in (1u32..).zip(instants.windows(2)) {
        let gap = pair[1] - pair[0];
        let backoff = (DEFAULT_RETRY_MIN * 2u32.pow(failed_runs - 1)).min(DEFAULT_RETRY_MAX);
        assert!(
            gap >= backoff,
            "run {} came {gap:?} after the previous one, before the backoff {backoff:?}",
            failed_runs + 1
        );
    }
    fixture.finish().await
}

/// An effect that never succeeds, on a queue without a dead-letter exchange: once the attempts are
/// used up the message must not be discarded; after the listener stops it is back in the queue.
async fn a_message_that_keeps_failing_without_a_dead_letter_exchange_is_not_discarded(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::failing_first(usize::MAX));
    let setup = Setup {
        max_attempts: Some(2),
        retry_backoff: Some((Duration::from_millis(50), Duration::from_millis(200))),
        ..Setup::plain_queue()
    };
    let mut fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 9);
    fixture.deliver(&sender, &message).await?;
    // Well past the two attempts: the fourth run failed and a fifth is scheduled.
    loop {
        match fixture.next_outcome().await? {
            ListenerOutcome::Retrying { id, attempts, .. } if id == message.id && attempts >= 4 => break,
            ListenerOutcome::DeadLettered { id, reason, .. } => {
                return Err(fail(format!(
                    "event {id:?} was rejected without a dead-letter exchange, so RabbitMQ discarded it: {reason}"
                )));
            }
            ListenerOutcome::Applied { .. } | ListenerOutcome::Duplicate { .. } => {
                return Err(fail("an effect that always fails was acknowledged"));
            }
            _ => {}
        }
    }
    assert!(effect.calls.load(Ordering::SeqCst) >= 4);
    fixture.stop_listener().await?;
    let kept = fixture.queued().await?.ok_or_else(|| fail("the failing event is gone from the queue"))?;
    assert_eq!(kept.delivery.data, message.payload.as_bytes());
    assert_eq!(effect.applied.load(Ordering::SeqCst), 0);
    fixture.finish().await
}

/// A poison message (no event id) on a queue without a dead-letter exchange is held, not
/// discarded, and the messages after it are still handled.
async fn a_poison_message_without_a_dead_letter_exchange_is_held_not_discarded(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture =
        Fixture::start_with(&harness, effect.clone(), Setup::plain_queue()).await.map_err(fail)?;
    fixture.publish_raw(FieldTable::default(), b"{\"index\":10}").await?;
    match fixture.next_outcome().await? {
        ListenerOutcome::DeadLettered { reason, .. } => {
            return Err(fail(format!(
                "a poison message was rejected without a dead-letter exchange, so RabbitMQ discarded it: {reason}"
            )));
        }
        outcome => assert!(matches!(outcome, ListenerOutcome::Held { id: None, .. }), "{outcome:?}"),
    }
    let sender = fixture.sender().map_err(fail)?;
    let good = message_for(&fixture.exchange, 11);
    fixture.deliver(&sender, &good).await?;
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Applied { id: good.id });
    fixture.stop_listener().await?;
    let kept = fixture.queued().await?.ok_or_else(|| fail("the poison message is gone from the queue"))?;
    assert_eq!(kept.delivery.data, b"{\"index\":10}");
    fixture.finish().await
}

/// A quorum queue raises `x-delivery-count` each time a message returns to it, also when a
/// consumer's channel closes before any handler saw the message. Those returns must not count as
/// failed runs: the message, returned five times, still gets its `max_attempts` (3) runs and is
/// applied on the third instead of being dead-lettered at its first failure.
async fn returns_to_the_queue_without_a_failed_run_do_not_use_up_the_attempts(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::failing_first(2));
    let setup = Setup {
        max_attempts: Some(3),
        retry_backoff: Some((Duration::from_millis(50), Duration::from_millis(200))),
        quorum_dead_lettered: true,
        start_listener: false,
        ..Setup::plain_queue()
    };
    let mut fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 12);
    fixture.deliver(&sender, &message).await?;
    let count = fixture.return_to_queue(6).await?;
    assert!(count.is_some_and(|count| count >= 5), "the broker did not count the returns: {count:?}");
    fixture.start_listener();
    for attempts in 1..=2 {
        let outcome = fixture.next_outcome().await?;
        assert!(
            matches!(&outcome, ListenerOutcome::Retrying { id, attempts: a, .. } if *id == message.id && *a == attempts),
            "run {attempts}: {outcome:?}"
        );
    }
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Applied { id: message.id });
    assert_eq!(effect.calls.load(Ordering::SeqCst), 3);
    fixture.finish().await
}

/// The listener's connection is closed while a handler runs: the handler succeeds, but lapin
/// cannot acknowledge on the closed channel (`Ok(false)`). The listener must not report the event
/// applied; RabbitMQ delivers it again and the inbox acknowledges it as a duplicate.
async fn an_acknowledgement_lost_with_the_channel_is_not_reported_as_applied(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::holding_first_call());
    let name = fresh_name("listener");
    let setup = Setup { connection_name: Some(name.clone()), ..Setup::plain_queue() };
    let mut fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 13);
    fixture.deliver(&sender, &message).await?;
    tokio::time::timeout(fixture::WAIT, effect.entered.notified())
        .await
        .map_err(|_| fail("the handler never started"))?;
    let closed = close_connections_named(&name).map_err(fail)?;
    assert_eq!(closed, 1, "the listener's connection was not found");
    // Polled by hand: a closure passed to `eventually` that borrows `name` is not `Send` enough.
    let deadline = tokio::time::Instant::now() + fixture::WAIT;
    while !connections_named(&name).is_ok_and(|count| count == 0) {
        if tokio::time::Instant::now() >= deadline {
            return Err(fail("the broker kept the listener's connection"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    effect.release.notify_one();
    assert_eq!(
        fixture.next_outcome().await?,
        ListenerOutcome::Duplicate { id: message.id },
        "the acknowledgement never reached the broker, so the event came back"
    );
    assert_eq!(effect.applied.load(Ordering::SeqCst), 1, "the effect happened once");
    fixture.finish().await
}

/// Two listeners share a queue with `on_once`. A's effect is running (held) when A's connection
/// closes and RabbitMQ redelivers the event to B; B meets A's claim in flight and must wait, not
/// acknowledge a duplicate, because A's effect then fails and releases the claim. B's next run
/// applies the effect: once, never lost.
async fn a_redelivery_meeting_an_effect_in_flight_waits_for_it_and_applies_it_once(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect { hold_first_call: true, fail_first: 1, ..Effect::default() });
    let (first, second) = (fresh_name("listener-a"), fresh_name("listener-b"));
    let setup = Setup { connection_name: Some(first.clone()), ..Setup::plain_queue() };
    let fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 15);
    fixture.deliver(&sender, &message).await?;
    tokio::time::timeout(fixture::WAIT, effect.entered.notified())
        .await
        .map_err(|_| fail("A's effect never started"))?;
    let (b, mut b_outcomes) =
        fixture.start_another_listener(effect.clone(), &second, Duration::from_millis(200)).map_err(fail)?;
    // B must be consuming before A's connection closes, so the redelivery goes to B.
    let deadline = tokio::time::Instant::now() + fixture::WAIT;
    while fixture.consumers().await? < 2 {
        if tokio::time::Instant::now() >= deadline {
            return Err(fail("B never started consuming"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(close_connections_named(&first).map_err(fail)?, 1, "A's connection was not found");
    let verdict = tokio::time::timeout(fixture::WAIT, b_outcomes.recv())
        .await
        .map_err(|_| fail("B never received the redelivery"))?
        .map_err(fail)?;
    assert!(
        matches!(&verdict, ListenerOutcome::Retrying { id, attempts: 0, .. } if *id == message.id),
        "B must wait for A's effect, not settle the event: {verdict:?}"
    );
    effect.release.notify_one();
    let deadline = tokio::time::Instant::now() + fixture::WAIT;
    loop {
        match tokio::time::timeout_at(deadline, b_outcomes.recv()).await {
            Ok(Ok(ListenerOutcome::Applied { id })) if id == message.id => break,
            Ok(Ok(_)) => {}
            Ok(Err(error)) => return Err(fail(format!("B's outcomes: {error}"))),
            Err(_) => return Err(fail("the event was never applied after A's effect failed")),
        }
    }
    assert_eq!(effect.applied.load(Ordering::SeqCst), 1, "the effect happened once");
    assert_eq!(effect.calls.load(Ordering::SeqCst), 2, "A's failed run and B's run");
    b.stop().await?.map_err(fail)?;
    fixture.finish().await
}

/// The listener's connection is closed while a failed event waits for its retry (60 s): the
/// listener notices at once, reconnects, and the redelivered event is applied long before the wait
/// would have ended.
async fn a_channel_closed_during_a_retry_wait_is_noticed_before_the_wait_ends(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect::failing_first(1));
    let name = fresh_name("listener");
    let long = Duration::from_secs(60);
    let setup = Setup {
        connection_name: Some(name.clone()),
        retry_backoff: Some((long, long)),
        ..Setup::plain_queue()
    };
    let mut fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 14);
    fixture.deliver(&sender, &message).await?;
    let first = fixture.next_outcome().await?;
    assert!(
        matches!(&first, ListenerOutcome::Retrying { id, attempts: 1, retry_in, .. } if *id == message.id && *retry_in == long),
        "{first:?}"
    );
    let closed = close_connections_named(&name).map_err(fail)?;
    assert_eq!(closed, 1, "the listener's connection was not found");
    // `next_outcome` waits 20 s, a third of the retry wait.
    assert_eq!(fixture.next_outcome().await?, ListenerOutcome::Applied { id: message.id });
    assert_eq!(effect.calls.load(Ordering::SeqCst), 2);
    fixture.finish().await
}

/// A failed run is remembered across a redelivery to the same listener: after the first run
/// fails, the connection is closed while the retry waits; the redelivered message runs once more,
/// which is its second failed run of two allowed, and it is dead-lettered.
async fn failed_runs_are_counted_across_a_redelivery(harness: Arc<ListenerHarness>) -> TestResult {
    let effect = Arc::new(Effect::failing_first(usize::MAX));
    let name = fresh_name("listener");
    let long = Duration::from_secs(60);
    let setup = Setup {
        connection_name: Some(name.clone()),
        retry_backoff: Some((long, long)),
        ..Setup::dead_lettered(2)
    };
    let mut fixture = Fixture::start_with(&harness, effect.clone(), setup).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 15);
    fixture.deliver(&sender, &message).await?;
    let first = fixture.next_outcome().await?;
    assert!(
        matches!(&first, ListenerOutcome::Retrying { id, attempts: 1, .. } if *id == message.id),
        "{first:?}"
    );
    let closed = close_connections_named(&name).map_err(fail)?;
    assert_eq!(closed, 1, "the listener's connection was not found");
    // Counted from zero again, the redelivery would wait 60 s for a third run instead.
    let outcome = fixture.next_outcome().await?;
    assert!(
        matches!(&outcome, ListenerOutcome::DeadLettered { id: Some(id), .. } if *id == message.id),
        "the redelivered message did not carry its failed run: {outcome:?}"
    );
    assert_eq!(effect.calls.load(Ordering::SeqCst), 2);
    fixture.dead_lettered().await?.ok_or_else(|| fail("the failing event never reached the DLX"))?;
    fixture.finish().await
}

fn cases() -> Vec<Case<ListenerHarness>> {
    vec![
        case!(
            "a_redelivery_meeting_an_effect_in_flight_waits_for_it_and_applies_it_once",
            a_redelivery_meeting_an_effect_in_flight_waits_for_it_and_applies_it_once
        ),
        case!(
            "a_message_is_applied_once_and_a_redelivered_copy_changes_nothing",
            a_message_is_applied_once_and_a_redelivered_copy_changes_nothing
        ),
        case!(
            "a_failed_effect_is_retried_after_a_pause_and_applied",
            a_failed_effect_is_retried_after_a_pause_and_applied
        ),
        case!(
            "a_transactional_handler_commits_its_effect_with_the_id_once_and_a_failed_run_leaves_nothing",
            a_transactional_handler_commits_its_effect_with_the_id_once_and_a_failed_run_leaves_nothing
        ),
        case!(
            "a_durable_inbox_releases_the_broker_once_stored_and_applies_each_effect_once",
            a_durable_inbox_releases_the_broker_once_stored_and_applies_each_effect_once
        ),
        case!(
            "with_concurrency_a_busy_handler_does_not_hold_back_the_next_message",
            with_concurrency_a_busy_handler_does_not_hold_back_the_next_message
        ),
        case!(
            "a_poison_message_is_rejected_to_the_dead_letter_exchange",
            a_poison_message_is_rejected_to_the_dead_letter_exchange
        ),
        case!(
            "an_effect_that_keeps_failing_is_dead_lettered_after_max_attempts",
            an_effect_that_keeps_failing_is_dead_lettered_after_max_attempts
        ),
        case!("failed_runs_are_counted_across_a_redelivery", failed_runs_are_counted_across_a_redelivery),
        case!(
            "a_brief_outage_does_not_lose_the_message_under_default_settings",
            a_brief_outage_does_not_lose_the_message_under_default_settings
        ),
        case!(
            "a_message_that_keeps_failing_without_a_dead_letter_exchange_is_not_discarded",
            a_message_that_keeps_failing_without_a_dead_letter_exchange_is_not_discarded
        ),
        case!(
            "a_poison_message_without_a_dead_letter_exchange_is_held_not_discarded",
            a_poison_message_without_a_dead_letter_exchange_is_held_not_discarded
        ),
        case!(
            "returns_to_the_queue_without_a_failed_run_do_not_use_up_the_attempts",
            returns_to_the_queue_without_a_failed_run_do_not_use_up_the_attempts
        ),
        case!(
            "an_acknowledgement_lost_with_the_channel_is_not_reported_as_applied",
            an_acknowledgement_lost_with_the_channel_is_not_reported_as_applied
        ),
        case!(
            "a_channel_closed_during_a_retry_wait_is_noticed_before_the_wait_ends",
            a_channel_closed_during_a_retry_wait_is_noticed_before_the_wait_ends
        ),
    ]
}

fn main() -> ExitCode {
    let Some(url) = amqp_url() else {
        return server_missing("rabbit listener", support::URL_VARIABLE);
    };
    Suite::new().add("listener", Arc::new(ListenerHarness { url }), cases()).run()
}

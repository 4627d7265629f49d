//! The inbox listener against a real broker (`ONCEBOX_AMQP_URL`) with the SQLite inbox.

#[path = "support/fixture.rs"]
mod fixture;
mod support;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use oncebox_rabbit::ListenerOutcome;
use oncebox_testkit::case;
use oncebox_testkit::runner::{Case, Suite, TestResult, fail, server_missing};

use fixture::{Effect, Fixture, ListenerHarness, message_for};
use support::amqp_url;

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

async fn a_failed_effect_is_requeued_and_applied_on_redelivery(harness: Arc<ListenerHarness>) -> TestResult {
    let effect = Arc::new(Effect { calls: AtomicUsize::new(0), fail_first: 1 });
    let mut fixture = Fixture::start(&harness, effect.clone(), 3).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 2);
    fixture.deliver(&sender, &message).await?;
    let first = fixture.next_outcome().await?;
    assert!(
        matches!(&first, ListenerOutcome::Requeued { id, deliveries: 1, .. } if *id == message.id),
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
        ListenerOutcome::Rejected { id: None, reason } => {
            assert!(reason.contains("decode error") && reason.contains("oncebox_event_id"), "{reason}");
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
        matches!(&outcome, ListenerOutcome::Rejected { id: None, reason } if reason.contains("not-a-uuid")),
        "{outcome:?}"
    );
    assert!(fixture.dead_lettered().await?.is_some(), "the malformed message never reached the DLX");

    let mut undecodable = message_for(&fixture.exchange, 6);
    undecodable.payload = "{\"index\":\"six\"}".to_owned();
    fixture.deliver(&sender, &undecodable).await?;
    let outcome = fixture.next_outcome().await?;
    assert!(
        matches!(&outcome, ListenerOutcome::Rejected { id: Some(id), .. } if *id == undecodable.id),
        "{outcome:?}"
    );
    assert!(fixture.dead_lettered().await?.is_some(), "the undecodable message never reached the DLX");
    assert_eq!(effect.calls.load(Ordering::SeqCst), 1, "no effect ran for a poison message");
    assert!(!fixture.inbox.is_consumed(undecodable.id).await.map_err(fail)?);
    fixture.finish().await
}

async fn an_effect_that_keeps_failing_is_dead_lettered_after_max_deliveries(
    harness: Arc<ListenerHarness>,
) -> TestResult {
    let effect = Arc::new(Effect { calls: AtomicUsize::new(0), fail_first: usize::MAX });
    let mut fixture = Fixture::start(&harness, effect.clone(), 3).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let message = message_for(&fixture.exchange, 7);
    fixture.deliver(&sender, &message).await?;
    for deliveries in 1..=2 {
        let outcome = fixture.next_outcome().await?;
        assert!(
            matches!(&outcome, ListenerOutcome::Requeued { id, deliveries: d, .. } if *id == message.id && *d == deliveries),
            "{outcome:?}"
        );
    }
    let outcome = fixture.next_outcome().await?;
    assert!(
        matches!(&outcome, ListenerOutcome::Rejected { id: Some(id), .. } if *id == message.id),
        "{outcome:?}"
    );
    let dead =
        fixture.dead_lettered().await?.ok_or_else(|| fail("the failing event never reached the DLX"))?;
    assert_eq!(dead.delivery.data, message.payload.as_bytes());
    assert_eq!(effect.calls.load(Ordering::SeqCst), 3);
    assert!(!fixture.inbox.is_consumed(message.id).await.map_err(fail)?, "a failed effect is not recorded");
    fixture.finish().await
}

fn cases() -> Vec<Case<ListenerHarness>> {
    vec![
        case!(
            "a_message_is_applied_once_and_a_redelivered_copy_changes_nothing",
            a_message_is_applied_once_and_a_redelivered_copy_changes_nothing
        ),
        case!(
            "a_failed_effect_is_requeued_and_applied_on_redelivery",
            a_failed_effect_is_requeued_and_applied_on_redelivery
        ),
        case!(
            "a_poison_message_is_rejected_to_the_dead_letter_exchange",
            a_poison_message_is_rejected_to_the_dead_letter_exchange
        ),
        case!(
            "an_effect_that_keeps_failing_is_dead_lettered_after_max_deliveries",
            an_effect_that_keeps_failing_is_dead_lettered_after_max_deliveries
        ),
    ]
}

fn main() -> ExitCode {
    let Some(url) = amqp_url() else {
        return server_missing("rabbit listener", support::URL_VARIABLE);
    };
    Suite::new().add("listener", Arc::new(ListenerHarness { url }), cases()).run()
}

//! A RabbitMQ restart (`rabbitmqctl stop_app` / `start_app`) in the middle of a run: the sender's
//! failures are temporary, its retries succeed once the broker is back, and the listener resumes
//! and applies every event once. Its own binary, because the restart disturbs every connection.

#[path = "support/fixture.rs"]
mod fixture;
mod support;

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use oncebox_core::{Deadline, OutboundMessage, Sender};
use oncebox_rabbit::ListenerOutcome;
use oncebox_testkit::case;
use oncebox_testkit::runner::{Case, Suite, TestResult, fail, server_missing};
use uuid::Uuid;

use fixture::{Effect, Fixture, ListenerHarness, message_for};
use support::{StoppedBroker, amqp_url};

/// Sends `batch` like the relay does: failed messages again, until all are confirmed.
async fn send_until_confirmed(sender: &dyn Sender, batch: &[OutboundMessage]) -> TestResult {
    let mut pending: Vec<OutboundMessage> = batch.to_vec();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !pending.is_empty() {
        let results = sender.send(&pending, Deadline::after(Duration::from_secs(10))).await;
        let mut still = Vec::new();
        for (message, result) in pending.into_iter().zip(results) {
            if let Err(error) = result {
                if tokio::time::Instant::now() >= deadline {
                    return Err(fail(format!("{} still failing after the restart: {error}", message.id)));
                }
                still.push(message);
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

async fn await_applied(fixture: &mut Fixture, ids: &HashSet<Uuid>) -> TestResult {
    let mut applied = HashSet::new();
    while !ids.is_subset(&applied) {
        match fixture.next_outcome().await? {
            ListenerOutcome::Applied { id } => {
                assert!(applied.insert(id), "event {id} was applied twice");
            }
            ListenerOutcome::Duplicate { .. } => {}
            other => return Err(fail(format!("unexpected outcome {other:?}"))),
        }
    }
    Ok(())
}

async fn sender_and_listener_survive_a_broker_restart(harness: Arc<ListenerHarness>) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture = Fixture::start(&harness, effect.clone(), 5).await.map_err(fail)?;
    let sender = fixture.sender().map_err(fail)?;
    let before: Vec<OutboundMessage> = (0..5).map(|index| message_for(&fixture.exchange, index)).collect();
    // The first delivery also waits for the listener to declare its queue.
    fixture.deliver(&sender, &before[0]).await?;
    send_until_confirmed(&sender, &before[1..]).await?;
    await_applied(&mut fixture, &before.iter().map(|message| message.id).collect()).await?;

    let stopped = StoppedBroker::stop().map_err(fail)?;
    let during: Vec<OutboundMessage> = (5..10).map(|index| message_for(&fixture.exchange, index)).collect();
    let results = tokio::time::timeout(
        Duration::from_secs(30),
        sender.send(&during, Deadline::after(Duration::from_secs(10))),
    )
    .await
    .map_err(|_| fail("send while the broker is down hung"))?;
    for result in &results {
        let error = result.as_ref().err().ok_or_else(|| fail("a stopped broker confirmed a message"))?;
        assert!(error.is_temporary(), "a stopped broker is a temporary failure: {error}");
    }
    stopped.start().map_err(fail)?;

    send_until_confirmed(&sender, &during).await?;
    await_applied(&mut fixture, &during.iter().map(|message| message.id).collect()).await?;
    assert_eq!(effect.calls.load(Ordering::SeqCst), 10, "every event had its effect exactly once");
    sender.close().await.map_err(fail)?;
    fixture.finish().await
}

fn cases() -> Vec<Case<ListenerHarness>> {
    vec![case!("sender_and_listener_survive_a_broker_restart", sender_and_listener_survive_a_broker_restart)]
}

fn main() -> ExitCode {
    let Some(url) = amqp_url() else {
        return server_missing("rabbit restart", support::URL_VARIABLE);
    };
    Suite::new().add("restart", Arc::new(ListenerHarness { url }), cases()).run()
}

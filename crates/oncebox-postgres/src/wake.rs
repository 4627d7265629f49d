//! LISTEN/NOTIFY wake-ups: a dedicated listener connection that turns the writer's NOTIFYs into
//! [`WakeUp`] hints for the engine.

use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{Result, WakeSource, WakeUp};
use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tracing::{debug, warn};

use crate::error::SqlxResultExt;

/// First pause after the listener failed to reconnect; doubled per failure up to
/// [`MAX_RECONNECT_PAUSE`].
const FIRST_RECONNECT_PAUSE: Duration = Duration::from_millis(250);
/// Longest pause between reconnect attempts.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(30);

/// [`WakeSource`] over a `PgListener` on its own connection (never one of the relay's pooled
/// connections, which would be held forever). Each notification names an event type. Whenever the
/// connection was lost and re-established, it yields [`WakeUp::All`] once it listens again, because
/// notifications sent while it was away are gone for good: the pollers poll at once instead of
/// waiting for their next turn.
pub struct PgWakeSource {
    pool: PgPool,
    channel: String,
    listener: Option<PgListener>,
    pause: Duration,
}

impl std::fmt::Debug for PgWakeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgWakeSource").field("channel", &self.channel).finish_non_exhaustive()
    }
}

impl PgWakeSource {
    /// Listens on `channel` over a new connection made with `pool`'s connect options.
    pub async fn connect(pool: &PgPool, channel: &str) -> Result<Self> {
        // Two connections at most: a replacement can connect while a dead one is still closing.
        let listener_pool = PgPoolOptions::new()
            .max_connections(2)
            .min_connections(0)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(pool.connect_options().as_ref().clone());
        let listener = listen(&listener_pool, channel).await?;
        Ok(Self {
            pool: listener_pool,
            channel: channel.to_owned(),
            listener: Some(listener),
            pause: FIRST_RECONNECT_PAUSE,
        })
    }

    /// The channel listened on.
    pub fn channel(&self) -> &str {
        &self.channel
    }
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener> {
    let context = format!("listening on {channel}");
    let mut listener = PgListener::connect_with(pool).await.context(&context)?;
    // This pool belongs to the listener alone; closing it is never a reason to stop.
    listener.ignore_pool_close_event(true);
    listener.listen(channel).await.context(&context)?;
    Ok(listener)
}

#[async_trait]
impl WakeSource for PgWakeSource {
    async fn next(&mut self) -> Option<WakeUp> {
        loop {
            let Some(listener) = self.listener.as_mut() else {
                match listen(&self.pool, &self.channel).await {
                    Ok(listener) => {
                        debug!(channel = %self.channel, "wake-up listener reconnected");
                        self.listener = Some(listener);
                        self.pause = FIRST_RECONNECT_PAUSE;
                        return Some(WakeUp::All);
                    }
                    Err(error) => {
                        warn!(%error, pause = ?self.pause, "wake-up listener cannot reconnect; pollers poll on their schedules");
                        tokio::time::sleep(self.pause).await;
                        self.pause = (self.pause * 2).min(MAX_RECONNECT_PAUSE);
                        continue;
                    }
                }
            };
            match listener.try_recv().await {
                Ok(Some(notification)) => return Some(WakeUp::EventType(notification.payload().to_owned())),
                // The connection dropped and was re-established (listening again) before this
                // returned: whatever was notified in between is lost.
                Ok(None) => return Some(WakeUp::All),
                Err(sqlx::Error::PoolClosed) => return None,
                Err(error) => {
                    warn!(%error, "wake-up listener failed; reconnecting");
                    // A fresh listener rather than a retry on the old one, whose connection may be
                    // half dead.
                    self.listener = None;
                }
            }
        }
    }
}

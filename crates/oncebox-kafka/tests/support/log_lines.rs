//! What the crate under test logs, kept so a test can wait for a line it expects: a `tracing`
//! subscriber, installed once per test binary, that holds the INFO, WARN and ERROR events of
//! `oncebox_kafka` as text (`LEVEL message field=value …`). Cases of a binary run in parallel, so
//! a test picks its own lines by a field only it uses, such as its topic.

use std::fmt::{self, Write as _};
use std::sync::{Mutex, PoisonError};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Installs the recorder as the binary's global subscriber (once; later calls change nothing).
pub fn install() {
    let _ = tracing::subscriber::set_global_default(Recorder);
}

/// The lines logged so far that contain every one of `fragments`.
pub fn matching(fragments: &[&str]) -> Vec<String> {
    let lines = LINES.lock().unwrap_or_else(PoisonError::into_inner);
    lines.iter().filter(|line| fragments.iter().all(|fragment| line.contains(fragment))).cloned().collect()
}

struct Recorder;

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event()
            && *metadata.level() <= Level::INFO
            && metadata.target().starts_with("oncebox_kafka")
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = Line(event.metadata().level().to_string());
        event.record(&mut line);
        LINES.lock().unwrap_or_else(PoisonError::into_inner).push(line.0);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

struct Line(String);

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = match field.name() {
            "message" => write!(self.0, " {value:?}"),
            name => write!(self.0, " {name}={value:?}"),
        };
    }
}

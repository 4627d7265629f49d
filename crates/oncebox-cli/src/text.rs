//! Plain-text output: aligned columns and short forms of durations and times.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

/// Rows printed under a header, each column as wide as its widest cell.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(rows.iter().map(|row| line(row.iter().map(String::as_str).collect())));
    out.join("\n")
}

/// `3m 2s`, to the second (`0s` under one).
pub(crate) fn age(duration: Duration) -> String {
    humantime::format_duration(Duration::from_secs(duration.as_secs())).to_string()
}

/// An instant in RFC 3339, to the second, in UTC.
pub(crate) fn instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `text` on one line and at most `max` characters (with `…` when cut).
pub(crate) fn short(text: &str, max: usize) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_long_text_is_cut() {
        let rows =
            vec![vec!["order-created".to_owned(), "3".to_owned()], vec!["x".to_owned(), "12".to_owned()]];
        assert_eq!(table(&["type", "n"], &rows), "type           n\norder-created  3\nx              12");
        assert_eq!(short("broker\nsaid no", 20), "broker said no");
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(age(Duration::from_millis(182_400)), "3m 2s");
    }
}

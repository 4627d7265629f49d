//! Rules about the text of a dialect's statements, written once here and checked by every
//! dialect crate's unit tests (they need no server).
//!
//! The parsing is deliberately simple: `--` comments and quoted text are blanked, parentheses are
//! counted, and keywords are matched as whole words. It is meant for the dialects' own files, not
//! for SQL in general.

/// Checks that every `UPDATE` in `sql` re-checks the row's `status` in its own `WHERE` clause:
/// a claim, a recovery or a settle must never trust that a row it picked earlier (a cursor, a
/// `SELECT … FOR UPDATE`, a CTE, a list of ids) is still in the state it was picked in, or a
/// settled row could be claimed again or a delivered one turned back to PENDING.
///
/// A `status` predicate (`status =`, `status <>`, `status !=`, `status IN`, with or without a
/// table alias) anywhere in the clause counts, including in a subquery that picks the rows in the
/// same statement; one in the `SET` list, or in a CTE before the `UPDATE`, does not. `FOR UPDATE`
/// locking clauses are not statements. Returns what is wrong, naming the clause, or an error when
/// `sql` holds no `UPDATE` at all (the rule would prove nothing).
pub fn updates_check_status(sql: &str) -> Result<(), String> {
    let clauses = update_where_clauses(sql);
    if clauses.is_empty() {
        return Err("no UPDATE statement found".to_owned());
    }
    for clause in clauses {
        match clause {
            None => return Err("an UPDATE has no WHERE clause".to_owned()),
            Some(clause) if !names_status(&clause) => {
                return Err(format!("an UPDATE's WHERE clause names no status: WHERE {}", clause.trim()));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Panics when [`updates_check_status`] finds a problem in any of `statements` (name, text),
/// naming every statement at fault.
#[track_caller]
pub fn assert_updates_check_status<'a>(statements: impl IntoIterator<Item = (&'a str, &'a str)>) {
    let problems: Vec<String> = statements
        .into_iter()
        .filter_map(|(name, sql)| updates_check_status(sql).err().map(|problem| format!("{name}: {problem}")))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The `WHERE` clause of each `UPDATE` statement in `sql`, in order (`None` for an `UPDATE`
/// without one), with comments and the insides of quoted text blanked.
pub fn update_where_clauses(sql: &str) -> Vec<Option<String>> {
    let code = blank_comments_and_quotes(sql);
    let words = words(&code);
    let mut clauses = Vec::new();
    for (index, word) in words.iter().enumerate() {
        let follows_for = index.checked_sub(1).is_some_and(|before| words[before].is("FOR"));
        if word.is("UPDATE") && !follows_for {
            clauses.push(where_clause(&code, &words, word));
        }
    }
    clauses
}

/// A word of the statement: where it starts and ends, and how many parentheses enclose it.
struct Word<'a> {
    text: &'a str,
    start: usize,
    end: usize,
    depth: usize,
}

impl Word<'_> {
    fn is(&self, keyword: &str) -> bool {
        self.text.eq_ignore_ascii_case(keyword)
    }
}

/// `sql` with every `--` comment and the inside of every `'…'` text replaced by spaces, so that
/// neither can look like a keyword, a parenthesis or a predicate. Byte offsets are kept.
fn blank_comments_and_quotes(sql: &str) -> String {
    let mut code = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut comment = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if comment {
            if c == '\n' {
                comment = false;
                code.push(c);
            } else {
                code.extend(std::iter::repeat_n(' ', c.len_utf8()));
            }
        } else if c == '\'' {
            // `''` inside text toggles twice, which keeps the text quoted.
            quoted = !quoted;
            code.push(c);
        } else if quoted {
            code.extend(std::iter::repeat_n(' ', c.len_utf8()));
        } else if c == '-' && chars.peek() == Some(&'-') {
            comment = true;
            code.push(' ');
        } else {
            code.push(c);
        }
    }
    code
}

/// The words of `code` (runs of letters, digits and `_`) with their nesting depth.
fn words(code: &str) -> Vec<Word<'_>> {
    let mut words = Vec::new();
    let mut depth = 0usize;
    let mut start = None;
    for (at, c) in code.char_indices().chain([(code.len(), ' ')]) {
        let in_word = c.is_ascii_alphanumeric() || c == '_';
        match (in_word, start) {
            (true, None) => start = Some(at),
            (false, Some(from)) => {
                words.push(Word { text: &code[from..at], start: from, end: at, depth });
                start = None;
            }
            _ => {}
        }
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    words
}

/// The `WHERE` clause of the `UPDATE` statement starting with `update`, one of `words`: from
/// the first `WHERE` at the statement's own depth to the statement's end (`RETURNING`,
/// `ORDER BY`, `LIMIT`, a `;`, or the parenthesis that closes the statement).
fn where_clause(code: &str, words: &[Word<'_>], update: &Word<'_>) -> Option<String> {
    let end = statement_end(code, update.end, update.depth);
    let own = |word: &&Word<'_>| word.start >= update.end && word.end <= end && word.depth == update.depth;
    let start = words.iter().filter(own).find(|word| word.is("WHERE"))?.end;
    let end = words
        .iter()
        .filter(own)
        .filter(|word| word.start >= start)
        .find(|word| ["RETURNING", "ORDER", "LIMIT"].iter().any(|keyword| word.is(keyword)))
        .map_or(end, |word| word.start);
    Some(code[start..end].to_owned())
}

/// Where the statement at `depth` that goes on at `from` ends: at a `;` of its own, at the `)`
/// enclosing it, or at the end of `code`.
fn statement_end(code: &str, from: usize, depth: usize) -> usize {
    let mut level = depth;
    for (at, c) in code[from..].char_indices() {
        match c {
            '(' => level += 1,
            ')' | ';' if level == depth => return from + at,
            ')' => level -= 1,
            _ => {}
        }
    }
    code.len()
}

/// Whether `clause` holds a predicate on a column named `status` (not `dlq_status`).
fn names_status(clause: &str) -> bool {
    let words = words(clause);
    words.iter().any(|word| {
        if !word.is("status") {
            return false;
        }
        let rest = clause[word.end..].trim_start();
        let compared = ["=", "<>", "!="].iter().any(|operator| rest.starts_with(operator));
        let listed = rest.get(..2).is_some_and(|next| next.eq_ignore_ascii_case("IN"))
            && !rest[2..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        compared || listed
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Oracle's claim update before it re-checked the row: it trusts the cursor's ids.
    const TRUSTING_CLAIM: &str = "-- Marks the rows the claim's cursor locked (status = 'PENDING').
UPDATE t
SET status = 'IN_PROCESS', claim_token = :claim_token, updated_at = :claimed_at
WHERE id IN ({ids})";

    #[test]
    fn an_update_trusting_picked_ids_is_refused() {
        let problem = updates_check_status(TRUSTING_CLAIM).unwrap_err();
        assert!(problem.contains("WHERE id IN ({ids})"), "{problem}");
        // Neither the comment nor the SET list count as a re-check.
        let guarded = TRUSTING_CLAIM.replace("({ids})", "({ids}) AND status = 'PENDING'");
        assert_eq!(updates_check_status(&guarded), Ok(()));
    }

    #[test]
    fn predicates_with_aliases_and_lists_count() {
        for clause in ["e.status = 'IN_PROCESS'", "STATUS<>'X'", "status != 'X'", "t.status IN ('A', 'B')"] {
            let sql = format!("UPDATE t SET a = 1 WHERE id = 1 AND {clause}");
            assert_eq!(updates_check_status(&sql), Ok(()), "{clause}");
        }
        for clause in ["dlq_status = 'X'", "status_code = 1", "statusx IN (1)", "status INTERVAL"] {
            let sql = format!("UPDATE t SET status = 'X' WHERE {clause}");
            assert!(updates_check_status(&sql).is_err(), "{clause}");
        }
        assert!(updates_check_status("UPDATE t SET last_error = 'status = 1' WHERE id = 1").is_err());
    }

    #[test]
    fn a_cte_before_the_update_is_not_its_where_clause() {
        let sql = "WITH due AS (SELECT id FROM t WHERE status = 'PENDING' FOR UPDATE SKIP LOCKED)
                   UPDATE t AS e SET status = 'IN_PROCESS' FROM due WHERE e.id = due.id RETURNING e.status";
        let clauses = update_where_clauses(sql);
        assert_eq!(clauses.len(), 1, "FOR UPDATE is no statement");
        assert_eq!(clauses[0].as_deref().map(str::trim), Some("e.id = due.id"));
        assert!(updates_check_status(sql).is_err());
        let guarded = sql.replace("due.id RETURNING", "due.id AND e.status = 'PENDING' RETURNING");
        assert_eq!(updates_check_status(&guarded), Ok(()));
    }

    #[test]
    fn a_subquery_picking_the_rows_in_the_same_statement_counts() {
        let sql = "UPDATE t SET status = 'IN_PROCESS'
                   WHERE id IN (SELECT id FROM t WHERE status = 'PENDING' ORDER BY id LIMIT ?3)
                   RETURNING id";
        assert_eq!(updates_check_status(sql), Ok(()));
        // ORDER BY and LIMIT of the UPDATE itself end its clause.
        let clauses = update_where_clauses("UPDATE t SET a = 1 WHERE b = 2 ORDER BY c LIMIT 3");
        assert_eq!(clauses, [Some(" b = 2 ".to_owned())]);
    }

    #[test]
    fn every_update_of_a_text_is_checked_and_one_is_required() {
        let two = "UPDATE t SET a = 1 WHERE status = 'X'; UPDATE t SET a = 2 WHERE id = 1";
        assert_eq!(update_where_clauses(two).len(), 2);
        assert!(updates_check_status(two).is_err());
        assert!(updates_check_status("UPDATE t SET a = 1").unwrap_err().contains("no WHERE"));
        let select = "SELECT id FROM t WHERE status = 'PENDING' FOR UPDATE SKIP LOCKED";
        assert!(updates_check_status(select).unwrap_err().contains("no UPDATE"));
    }

    #[test]
    #[should_panic(expected = "claim_update: an UPDATE's WHERE clause names no status")]
    fn the_assertion_names_each_statement_at_fault() {
        assert_updates_check_status([
            ("settle", "UPDATE t SET a = 1 WHERE status = 'X'"),
            ("claim_update", TRUSTING_CLAIM),
        ]);
    }
}

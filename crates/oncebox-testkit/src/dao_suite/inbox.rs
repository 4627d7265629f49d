//! The inbox.

use super::*;

dao_cases! {
    // Inbox.

    async fn inbox_records_a_single_id_once(_harness, dialect) {
        let inbox = dialect.inbox_dao();
        let id = Uuid::now_v7();
        assert!(inbox.record("billing", id).await.map_err(fail)?, "a new id is recorded");
        assert!(!inbox.record("billing", id).await.map_err(fail)?, "a duplicate is reported");
        assert_eq!(inbox.consumed("billing", &[id, Uuid::now_v7()]).await.map_err(fail)?, vec![id]);
        Ok(())
    }

    async fn inbox_batch_keeps_order_and_filters_duplicates(_harness, dialect) {
        let inbox = dialect.inbox_dao();
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        assert!(inbox.record("billing", ids[1]).await.map_err(fail)?);
        // Out of id order, with a known id and a duplicate inside the input.
        let input = vec![ids[4], ids[1], ids[0], ids[4], ids[3], ids[2], ids[0]];
        let new = inbox.record_many("billing", &input).await.map_err(fail)?;
        assert_eq!(new, vec![ids[4], ids[0], ids[3], ids[2]], "new ids in input order, each once");
        assert!(inbox.record_many("billing", &input).await.map_err(fail)?.is_empty(), "all known now");
        assert!(inbox.record_many("billing", &[]).await.map_err(fail)?.is_empty());
        let consumed = inbox.consumed("billing", &[ids[2], Uuid::now_v7(), ids[1]]).await.map_err(fail)?;
        assert_eq!(consumed, vec![ids[2], ids[1]]);
        assert!(inbox.consumed("billing", &[]).await.map_err(fail)?.is_empty());
        Ok(())
    }

    async fn inbox_look_ups_of_long_id_lists_find_every_recorded_id(_harness, dialect) {
        // Past the 4,096 ids a MySQL statement takes: the list is split, and the last chunk's
        // placeholders are padded with its last id.
        let inbox = dialect.inbox_dao();
        let ids: Vec<Uuid> = (0..5_000).map(|_| Uuid::now_v7()).collect();
        let recorded = [ids[4_999], ids[0], ids[4_096], ids[4_095]];
        inbox.record_many("billing", &recorded).await.map_err(fail)?;
        let found = inbox.consumed("billing", &ids).await.map_err(fail)?;
        assert_eq!(found, vec![ids[0], ids[4_095], ids[4_096], ids[4_999]], "every recorded id, in input order");
        Ok(())
    }

    async fn inbox_consumers_are_independent(_harness, dialect) {
        let inbox = dialect.inbox_dao();
        let id = Uuid::now_v7();
        assert!(inbox.record("billing", id).await.map_err(fail)?);
        assert!(inbox.record("shipping", id).await.map_err(fail)?, "another consumer sees the id as new");
        assert_eq!(inbox.record_many("audit", &[id]).await.map_err(fail)?, vec![id]);
        let other = Uuid::now_v7();
        let InboxClaim::Taken(token) = inbox.claim("billing", other, HOUR).await.map_err(fail)? else {
            return Err(fail("a new id is taken"));
        };
        let shipping = inbox.claim("shipping", other, HOUR).await.map_err(fail)?;
        assert!(matches!(shipping, InboxClaim::Taken(_)), "claims are per consumer: {shipping:?}");
        assert!(inbox.release("billing", other, token).await.map_err(fail)?);
        Ok(())
    }

    async fn inbox_transactional_record_follows_the_transaction(harness, dialect) {
        let inbox = dialect.inbox_dao();
        let rolled_back = [Uuid::now_v7(), Uuid::now_v7()];
        let new = harness.record_in_transaction(dialect, "billing", &rolled_back, false).await.map_err(fail)?;
        assert_eq!(new, rolled_back.to_vec(), "inside the transaction both ids were new");
        assert!(inbox.consumed("billing", &rolled_back).await.map_err(fail)?.is_empty(), "rollback forgets them");

        let known = Uuid::now_v7();
        assert!(inbox.record("billing", known).await.map_err(fail)?);
        let committed = [Uuid::now_v7(), known];
        let new = harness.record_in_transaction(dialect, "billing", &committed, true).await.map_err(fail)?;
        assert_eq!(new, vec![committed[0]], "a committed id already known is a duplicate");
        assert_eq!(inbox.consumed("billing", &committed).await.map_err(fail)?, committed.to_vec());
        assert!(inbox.record("billing", rolled_back[0]).await.map_err(fail)?, "a rolled-back id is still new");
        Ok(())
    }

    async fn inbox_claim_is_held_while_in_flight_then_done_once_finished(_harness, dialect) {
        let inbox = dialect.inbox_dao();
        let id = Uuid::now_v7();
        let InboxClaim::Taken(token) = inbox.claim("mailer", id, HOUR).await.map_err(fail)? else {
            return Err(fail("a new id is taken"));
        };
        assert_eq!(inbox.claim("mailer", id, HOUR).await.map_err(fail)?, InboxClaim::Held, "in flight within its lease");
        assert!(inbox.consumed("mailer", &[id]).await.map_err(fail)?.is_empty(), "a claim in flight is not consumed");
        assert!(!inbox.finish("mailer", id, Uuid::new_v4()).await.map_err(fail)?, "another token changes nothing");
        assert!(inbox.finish("mailer", id, token).await.map_err(fail)?);
        assert_eq!(inbox.consumed("mailer", &[id]).await.map_err(fail)?, vec![id]);
        assert_eq!(inbox.claim("mailer", id, Duration::ZERO).await.map_err(fail)?, InboxClaim::Done, "applied, never taken over");
        assert!(!inbox.release("mailer", id, token).await.map_err(fail)?, "an applied record is never released");
        assert!(!inbox.record("mailer", id).await.map_err(fail)?, "a transactional record sees it too");
        Ok(())
    }

    async fn inbox_released_claim_is_new_again(_harness, dialect) {
        let inbox = dialect.inbox_dao();
        let id = Uuid::now_v7();
        let InboxClaim::Taken(token) = inbox.claim("mailer", id, HOUR).await.map_err(fail)? else {
            return Err(fail("a new id is taken"));
        };
        assert!(!inbox.release("mailer", id, Uuid::new_v4()).await.map_err(fail)?, "another token changes nothing");
        assert!(inbox.release("mailer", id, token).await.map_err(fail)?);
        assert!(!inbox.release("mailer", id, token).await.map_err(fail)?, "nothing left to release");
        let again = inbox.claim("mailer", id, HOUR).await.map_err(fail)?;
        assert!(matches!(again, InboxClaim::Taken(new) if new != token), "a released id is claimed anew: {again:?}");
        Ok(())
    }

    async fn inbox_claim_past_its_lease_is_taken_over_and_fences_the_old_holder(harness, dialect) {
        let inbox = dialect.inbox_dao();
        let id = Uuid::now_v7();
        let InboxClaim::Taken(stalled) = inbox.claim("mailer", id, HOUR).await.map_err(fail)? else {
            return Err(fail("a new id is taken"));
        };
        harness.backdate(dialect, AgedTable::Consumed, &[id], TWO_HOURS).await.map_err(fail)?;
        let InboxClaim::Taken(fresh) = inbox.claim("mailer", id, HOUR).await.map_err(fail)? else {
            return Err(fail("a claim older than the lease is taken over"));
        };
        assert_ne!(fresh, stalled);
        assert_eq!(inbox.claim("mailer", id, HOUR).await.map_err(fail)?, InboxClaim::Held, "the new claim's lease runs from the take-over");
        assert!(!inbox.finish("mailer", id, stalled).await.map_err(fail)?, "the stalled holder is fenced");
        assert!(!inbox.release("mailer", id, stalled).await.map_err(fail)?, "the stalled holder is fenced");
        assert!(inbox.finish("mailer", id, fresh).await.map_err(fail)?);
        assert_eq!(inbox.consumed("mailer", &[id]).await.map_err(fail)?, vec![id]);
        Ok(())
    }

    async fn inbox_clean_up_spares_a_claim_taken_over_after_the_ttl(harness, dialect) {
        // A claim made before the clean-up TTL and taken over now is a new claim: deleting it
        // mid-effect would let a third delivery claim the id afresh and run the effect again.
        let inbox = dialect.inbox_dao();
        let id = Uuid::now_v7();
        let InboxClaim::Taken(_) = inbox.claim("mailer", id, HOUR).await.map_err(fail)? else {
            return Err(fail("a new id is taken"));
        };
        harness.backdate(dialect, AgedTable::Consumed, &[id], TWO_HOURS).await.map_err(fail)?;
        let InboxClaim::Taken(fresh) = inbox.claim("mailer", id, HOUR).await.map_err(fail)? else {
            return Err(fail("a claim older than the lease is taken over"));
        };
        assert_eq!(inbox.delete_older_than(HOUR, 10).await.map_err(fail)?, 0, "the taken-over claim is young");
        assert_eq!(inbox.claim("mailer", id, HOUR).await.map_err(fail)?, InboxClaim::Held);
        assert!(inbox.finish("mailer", id, fresh).await.map_err(fail)?);
        Ok(())
    }

    async fn create_schema_adds_claims_to_an_older_inbox_table(harness, dialect) {
        // An inbox table as an oncebox without migration 0006 left it, holding a record.
        for column in ["locked_at", "claim_token", "status"] {
            harness.execute_sql(dialect, &format!("ALTER TABLE {{consumed}} DROP COLUMN {column}")).await.map_err(fail)?;
        }
        let inbox = dialect.inbox_dao();
        let (known, new) = (Uuid::now_v7(), Uuid::now_v7());
        assert!(inbox.record("billing", known).await.map_err(fail)?);
        assert!(inbox.claim("billing", new, HOUR).await.is_err(), "a claim needs the claim columns");

        let everything = SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true };
        dialect.create_schema(everything).await.map_err(fail)?;
        dialect.create_schema(everything).await.map_err(fail)?;
        assert_eq!(inbox.claim("billing", known, HOUR).await.map_err(fail)?, InboxClaim::Done, "an older record counts as applied");
        assert!(matches!(inbox.claim("billing", new, HOUR).await.map_err(fail)?, InboxClaim::Taken(_)));
        Ok(())
    }

    async fn inbox_clean_up_deletes_old_records_in_batches(harness, dialect) {
        let inbox = dialect.inbox_dao();
        let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
        inbox.record_many("billing", &ids[..3]).await.map_err(fail)?;
        inbox.record("shipping", ids[3]).await.map_err(fail)?;
        harness
            .backdate(dialect, AgedTable::Consumed, &[ids[0], ids[1], ids[3]], TWO_HOURS)
            .await
            .map_err(fail)?;
        assert_eq!(inbox.delete_older_than(HOUR, 2).await.map_err(fail)?, 2, "at most `limit` rows per call");
        assert_eq!(inbox.delete_older_than(HOUR, 2).await.map_err(fail)?, 1, "over all consumers");
        assert_eq!(inbox.delete_older_than(HOUR, 2).await.map_err(fail)?, 0);
        assert_eq!(inbox.consumed("billing", &ids).await.map_err(fail)?, vec![ids[2]], "the young record stays");
        assert!(inbox.consumed("shipping", &ids).await.map_err(fail)?.is_empty());
        Ok(())
    }
}

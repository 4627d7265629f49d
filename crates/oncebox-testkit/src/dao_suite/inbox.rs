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
        assert!(inbox.forget("billing", id).await.map_err(fail)?);
        assert_eq!(inbox.consumed("shipping", &[id]).await.map_err(fail)?, vec![id], "forget is per consumer");
        assert!(inbox.consumed("billing", &[id]).await.map_err(fail)?.is_empty());
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

    async fn inbox_forget_removes_a_record(_harness, dialect) {
        let inbox = dialect.inbox_dao();
        let id = Uuid::now_v7();
        assert!(inbox.record("mailer", id).await.map_err(fail)?);
        assert!(inbox.forget("mailer", id).await.map_err(fail)?, "forget reports a removed record");
        assert!(inbox.consumed("mailer", &[id]).await.map_err(fail)?.is_empty());
        assert!(!inbox.forget("mailer", id).await.map_err(fail)?, "nothing left to forget");
        assert!(inbox.record("mailer", id).await.map_err(fail)?, "a forgotten id is new again");
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

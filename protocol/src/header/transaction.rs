//! END_TRANSACTION (37) and CHECK_TRANSACTION_STATE (39) headers (protocol
//! reference 2.3.10 and 2.3.11).
//!
//! # Invariants
//!
//! - `commitOrRollback` values are the `MessageSysFlag` transaction types; unknown values pass through.

use super::custom_header;

/// `commitOrRollback`: unknown state, ignored by the broker.
pub const TRANSACTION_NOT_TYPE: i32 = 0;
/// `commitOrRollback`: commit (`MessageSysFlag.TRANSACTION_COMMIT_TYPE`).
pub const TRANSACTION_COMMIT_TYPE: i32 = 8;
/// `commitOrRollback`: roll back (`MessageSysFlag.TRANSACTION_ROLLBACK_TYPE`).
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 12;

custom_header! {
    /// `EndTransactionRequestHeader` (producer to broker, one-way).
    pub struct EndTransactionRequestHeader {
        /// `topic` (5.x).
        topic: optional String = "topic",
        /// `producerGroup`: must equal the half message's `PGROUP`.
        producer_group: required String = "producerGroup",
        /// `tranStateTableOffset`: queue offset of the half message.
        tran_state_table_offset: required i64 = "tranStateTableOffset",
        /// `commitLogOffset` of the half message.
        commit_log_offset: required i64 = "commitLogOffset",
        /// `commitOrRollback`: 0, 8 or 12.
        commit_or_rollback: required i32 = "commitOrRollback",
        /// `fromTransactionCheck`: answering a check-back.
        from_transaction_check: optional bool = "fromTransactionCheck",
        /// `msgId`.
        msg_id: required String = "msgId",
        /// `transactionId`.
        transaction_id: optional String = "transactionId",
        /// `bname`.
        broker_name: optional String = "bname",
    }
}

custom_header! {
    /// `CheckTransactionStateRequestHeader` (broker to producer, one-way).
    pub struct CheckTransactionStateRequestHeader {
        /// `topic`: the real topic.
        topic: optional String = "topic",
        /// `tranStateTableOffset`: half-queue offset.
        tran_state_table_offset: required i64 = "tranStateTableOffset",
        /// `commitLogOffset` of the half message.
        commit_log_offset: required i64 = "commitLogOffset",
        /// `msgId` (`UNIQ_KEY`).
        msg_id: optional String = "msgId",
        /// `transactionId` (`UNIQ_KEY`).
        transaction_id: optional String = "transactionId",
        /// `offsetMsgId`: offset id of the half message.
        offset_msg_id: optional String = "offsetMsgId",
        /// `bname`: the broker's name.
        broker_name: optional String = "bname",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::CustomHeader;

    #[test]
    fn end_transaction_round_trips_through_ext_fields() {
        let header = EndTransactionRequestHeader {
            producer_group: "pg".into(),
            tran_state_table_offset: 5,
            commit_log_offset: 4096,
            commit_or_rollback: TRANSACTION_COMMIT_TYPE,
            from_transaction_check: Some(true),
            msg_id: "id".into(),
            ..Default::default()
        };
        let ext = header.to_ext_fields();
        assert_eq!(ext.get("commitOrRollback"), Some("8"));
        assert_eq!(ext.get("topic"), None);
        assert_eq!(EndTransactionRequestHeader::from_ext(&ext).unwrap(), header);
    }

    #[test]
    fn check_transaction_state_needs_both_offsets() {
        let header = CheckTransactionStateRequestHeader {
            tran_state_table_offset: 1,
            commit_log_offset: 2,
            broker_name: Some("b".into()),
            ..Default::default()
        };
        let mut ext = header.to_ext_fields();
        assert_eq!(
            CheckTransactionStateRequestHeader::from_ext(&ext).unwrap(),
            header
        );
        ext.remove("commitLogOffset");
        assert!(CheckTransactionStateRequestHeader::from_ext(&ext).is_err());
    }
}

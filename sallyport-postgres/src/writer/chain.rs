//! The chain: a batch's records linked on from the head, and the end of a batch that
//! appends (its record inserts and its signed head).

use deadpool_postgres::Client;
use futures_util::future::join_all;
use sallyport_core::journal::{AuditRecord, ChainHead, chain_hash};

use crate::error::PostgresError;
use crate::shared::Shared;
use crate::sql;
use sallyport_core::journal::batch::Write;

/// A record chained: its operation's index, its event as stored, and the record.
pub(super) type Chained = (usize, String, AuditRecord);

/// A chain's end: the last record's sequence number and hash.
pub(crate) type ChainEnd = (i64, String);

/// The records of the operations at `appending`, chained on from the head at `seq`, `hash`;
/// and the chain's new end.
pub(super) fn chain(
    shard: &str,
    ops: &[Write],
    appending: &[usize],
    mut seq: i64,
    mut hash: String,
) -> Result<(Vec<Chained>, Option<ChainEnd>), PostgresError> {
    let mut records = Vec::with_capacity(appending.len());
    for &i in appending {
        let Some(event) = ops[i].event() else {
            continue;
        };
        let json = serde_json::to_string(event)
            .map_err(|e| PostgresError::own(format!("cannot serialize an audit event: {e}")))?;
        seq += 1;
        let next = chain_hash(&hash, seq.cast_unsigned(), &json);
        records.push((
            i,
            json,
            AuditRecord {
                shard: shard.to_owned(),
                seq: seq.cast_unsigned(),
                prev_hash: std::mem::replace(&mut hash, next.clone()),
                hash: next,
                event: event.clone(),
            },
        ));
    }
    Ok((records, Some((seq, hash))))
}

/// The end of a batch that appends: its record inserts and its signed head, prepared (how
/// the head moves is the caller's: set under its lock, or compare-and-set).
pub(super) struct Tail {
    insert: Option<tokio_postgres::Statement>,
    insert_signed: Option<tokio_postgres::Statement>,
    signed: Option<sallyport_core::journal::SignedHead>,
    /// The shard the records and the signed head go to.
    shard: String,
    pub(super) chain_end: Option<ChainEnd>,
}

impl Tail {
    /// The statements a batch ending the chain at `chain_end` needs, and its head signed.
    pub(super) async fn prepare(
        shared: &Shared,
        client: &Client,
        records: &[Chained],
        chain_end: Option<ChainEnd>,
        at: &str,
    ) -> Result<Self, PostgresError> {
        let pg = |e: tokio_postgres::Error| shared.redactor.postgres(&e);
        let prepare_if = |needed: bool, sql: &'static str| async move {
            if needed {
                client.prepare_cached(sql).await.map(Some)
            } else {
                Ok(None)
            }
        };
        let signed = match (&chain_end, &shared.signing_key) {
            (Some((seq, hash)), Some(key)) => Some(key.sign(
                &ChainHead {
                    count: seq.cast_unsigned(),
                    hash: hash.clone(),
                },
                at.to_owned(),
            )),
            _ => None,
        };
        Ok(Self {
            insert: prepare_if(!records.is_empty(), sql::INSERT_RECORD)
                .await
                .map_err(pg)?,
            insert_signed: prepare_if(signed.is_some(), sql::INSERT_SIGNED_HEAD)
                .await
                .map_err(pg)?,
            signed,
            shard: shared.shard.clone(),
            chain_end,
        })
    }

    /// Inserts the records, each statement sent without waiting for the one before.
    pub(super) async fn insert_records(
        &self,
        client: &Client,
        records: &[Chained],
    ) -> Result<(), tokio_postgres::Error> {
        let shard = self.shard.as_str();
        let Some(insert) = &self.insert else {
            return Ok(());
        };
        let inserted = records.iter().map(|(_, json, record)| async move {
            let seq = record.seq.cast_signed();
            client
                .execute(
                    insert,
                    &[
                        &seq,
                        &record.event.receipt_id.as_str(),
                        &record.event.attempt_id.as_str(),
                        &record.prev_hash,
                        &record.hash,
                        json,
                        &shard,
                    ],
                )
                .await
        });
        for result in join_all(inserted).await {
            result?;
        }
        Ok(())
    }

    /// Writes the signed head, when the journal signs.
    pub(super) async fn insert_signed(&self, client: &Client) -> Result<(), tokio_postgres::Error> {
        if let (Some(statement), Some(signed), Some((seq, _))) =
            (&self.insert_signed, &self.signed, &self.chain_end)
        {
            client
                .execute(
                    statement,
                    &[
                        seq,
                        &signed.hash,
                        &signed.key_id,
                        &signed.signature,
                        &signed.signed_at,
                        &self.shard,
                    ],
                )
                .await?;
        }
        Ok(())
    }
}

//! Remembered approvals in the database ([`sallyport_core::approval::remember_under`]),
//! shared by every executor process on it (`sallyport_remembered_approvals`, migration 6).
//!
//! A revocation is a compare-and-set in one statement: the row is updated only while it is
//! not revoked (`WHERE NOT revoked`), so of two processes revoking at once exactly one
//! updates it and the other reads it back revoked.

use std::sync::Arc;

use sallyport_core::approval::{RememberedApproval, RememberedId, Revocation, Revoked};
use sallyport_core::journal::JournalError;

use crate::shared::Shared;

const INSERT: &str = "
INSERT INTO sallyport_remembered_approvals (remembered_id, action, created_at_ms, revoked, body)
VALUES ($1, $2, $3, $4, $5)";

const LIST: &str = "
SELECT body FROM sallyport_remembered_approvals
WHERE $1::TEXT IS NULL OR action = $1
ORDER BY created_at_ms DESC, remembered_id DESC";

const GET: &str = "SELECT body FROM sallyport_remembered_approvals WHERE remembered_id = $1";

const REVOKE: &str = "
UPDATE sallyport_remembered_approvals SET revoked = true, body = $2
WHERE remembered_id = $1 AND NOT revoked";

/// The journal's remembered approvals.
pub(crate) struct PgRemembered {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PgRemembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgRemembered")
            .field("target", &self.shared.target)
            .finish_non_exhaustive()
    }
}

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn parse(body: &str) -> Result<RememberedApproval, JournalError> {
    serde_json::from_str(body).map_err(|e| JournalError::Read(Box::new(e)))
}

impl PgRemembered {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn read_failed(&self, e: &tokio_postgres::Error) -> JournalError {
        JournalError::Read(Box::new(self.shared.redactor.postgres(e)))
    }

    fn write_failed(&self, e: &tokio_postgres::Error) -> JournalError {
        if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
            return JournalError::DuplicateKey;
        }
        JournalError::Write(Box::new(self.shared.redactor.postgres(e)))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, JournalError> {
        self.shared
            .pool
            .get()
            .await
            .map_err(|e| JournalError::Read(Box::new(self.shared.redactor.other(&e))))
    }

    pub(crate) async fn store(&self, r: &RememberedApproval) -> Result<(), JournalError> {
        let body = serde_json::to_string(r).map_err(|e| JournalError::Write(Box::new(e)))?;
        let client = self.client().await?;
        client
            .execute(
                INSERT,
                &[
                    &r.remembered_id.as_str(),
                    &r.action,
                    &ms(r.created_at_ms),
                    &r.revoked.is_some(),
                    &body,
                ],
            )
            .await
            .map_err(|e| self.write_failed(&e))?;
        Ok(())
    }

    pub(crate) async fn list(
        &self,
        action: Option<&str>,
    ) -> Result<Vec<RememberedApproval>, JournalError> {
        let client = self.client().await?;
        let rows = client
            .query(LIST, &[&action])
            .await
            .map_err(|e| self.read_failed(&e))?;
        rows.iter()
            .map(|row| parse(row.get::<_, &str>(0)))
            .collect()
    }

    async fn get(
        &self,
        client: &deadpool_postgres::Object,
        id: &RememberedId,
    ) -> Result<Option<RememberedApproval>, JournalError> {
        let row = client
            .query_opt(GET, &[&id.as_str()])
            .await
            .map_err(|e| self.read_failed(&e))?;
        row.map(|row| parse(row.get::<_, &str>(0))).transpose()
    }

    pub(crate) async fn revoke(
        &self,
        id: &RememberedId,
        revocation: &Revocation,
    ) -> Result<Revoked, JournalError> {
        let client = self.client().await?;
        let Some(current) = self.get(&client, id).await? else {
            return Ok(Revoked::NotFound);
        };
        let mut next = current.clone();
        if !next.revoke(revocation) {
            return Ok(Revoked::Unchanged(current));
        }
        let body = serde_json::to_string(&next).map_err(|e| JournalError::Write(Box::new(e)))?;
        let updated = client
            .execute(REVOKE, &[&id.as_str(), &body])
            .await
            .map_err(|e| self.write_failed(&e))?;
        if updated == 1 {
            return Ok(Revoked::Applied(next));
        }
        // Another process revoked it between the read and the update.
        Ok(match self.get(&client, id).await? {
            Some(now) => Revoked::Unchanged(now),
            None => Revoked::NotFound,
        })
    }
}

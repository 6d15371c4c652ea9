//! The types of the store's operator backup and restore ([`super::MaintenanceStore`]): what
//! a backup reads, one row of it in the backend-neutral form, and what a restore did.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{TenantId, UserId};

/// What [`Store::backup`] reads: the whole store, one tenant, or one user of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupScope {
    Store,
    Tenant(TenantId),
    /// The user's rows only (no keys, no agents).
    User(TenantId, UserId),
}

/// One row of a backup: the table and its columns in the backend-neutral representation
/// (timestamps RFC 3339, ids as strings, JSON as JSON, booleans as booleans, vectors as
/// base64 of little-endian f32). Backend-internal columns (change counters) are left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupRow {
    pub table: String,
    pub row: serde_json::Map<String, serde_json::Value>,
}

/// What a restore did, per table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Rows written.
    pub restored: BTreeMap<String, u64>,
    /// Rows already present (same key), left as they are; with them, the events of a
    /// memory that was already present.
    pub skipped: BTreeMap<String, u64>,
    /// API keys not copied because the rows were restored into another tenant (a key
    /// belongs to the tenant it was made for).
    pub keys_not_copied: u64,
}

/// Carried across the batches of one restore.
#[derive(Debug, Clone, Default)]
pub struct RestoreState {
    /// Every row goes into this tenant instead of its own.
    pub target: Option<TenantId>,
    pub report: RestoreReport,
}

//! API keys: generation (printed once), hashing (SHA-256: keys are 238-bit random strings, so
//! a slow password hash buys nothing), and the `engram keys` operations.

use engram_core::engine::Operator;
use engram_core::model::{KeyRole, TenantId};
use engram_core::store::ApiKey;
use rand::Rng;
use sha2::{Digest, Sha256};

const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// The stored form of a secret.
pub fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Create a key; returns its record and the secret (shown once, never stored).
pub async fn create(
    operator: &Operator,
    tenant: TenantId,
    role: KeyRole,
) -> engram_core::Result<(ApiKey, String)> {
    let mut rng = rand::rng();
    let body: String =
        (0..40).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    let secret = format!("engram_{body}");
    let id = format!("key_{}", hex::encode(rng.random::<[u8; 6]>()));
    let key = ApiKey {
        id,
        tenant,
        role,
        prefix: secret[..14].to_string(),
        created_at: engram_core::model::now(),
        revoked_at: None,
    };
    operator.create_key(&key, &hash(&secret)).await?;
    Ok((key, secret))
}

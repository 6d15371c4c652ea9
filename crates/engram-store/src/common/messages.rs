//! The [`engram_core::store::MessageStore`] methods that are the same statement and the same
//! logic on both backends: reading the transcript and the conversation state extraction
//! keeps. Appending, search and vectors stay with each backend (locking and indexes differ).

use engram_core::error::{Error, Result};
use engram_core::model::{AgentId, ConversationId, Job, Message, MessageId, TenantId, UserId};
use engram_core::store::{ConversationInfo, TranscriptFilter};

use super::Arg::{Id, Int, Json, OptJson, OptText, Text, Ts};
use time::OffsetDateTime;

use super::rows::{self, Columns};
use super::{Arg, Backend, limit};

/// A message's columns but the backend's own ([`Backend::message_index`]), in the order
/// of [`message_args`].
const INSERT_COLS: &str = "tenant_id, id, conversation_id, user_id, agent_id, seq, role, \
     content, tool_name, tool_args, tool_result, turn_id, metadata, created_at";

/// Append messages to their conversation (every message of a batch goes to the first
/// one's conversation, user and agent), creating it if new, and enqueue `jobs` in the same
/// transaction; the messages as stored, with their numbers.
pub(crate) async fn append<B: Backend>(
    b: &B,
    tenant: &TenantId,
    messages: Vec<Message>,
    jobs: &[Job],
) -> Result<Vec<Message>> {
    let Some(first) = messages.first() else { return Ok(vec![]) };
    let (conv, user) = (first.conversation_id.clone(), first.user_id.clone());
    let agent = first.agent_id.clone();
    let now = OffsetDateTime::now_utc();
    // A new conversation starts with its first message: an imported history keeps its own
    // start, not the day it was stored.
    let started = messages.iter().map(|m| m.created_at).min().unwrap_or(now).min(now);
    let mut tx = b.begin_write().await?;
    // Creates the conversation or locks its row until commit (PostgreSQL; SQLite has one
    // writer): one appender at a time.
    let r = B::tx_opt(
        &mut tx,
        "INSERT INTO conversations (tenant_id, id, user_id, agent_id, last_seq, created_at, updated_at) \
         VALUES (?, ?, ?, ?, 0, ?, ?) \
         ON CONFLICT (tenant_id, id) DO UPDATE SET updated_at = excluded.updated_at \
         RETURNING user_id, agent_id, last_seq",
        &[
            Text(tenant.as_str()),
            Text(conv.as_str()),
            Text(user.as_str()),
            OptText(agent.as_ref().map(AgentId::as_str)),
            Ts(started),
            Ts(now),
        ],
    )
    .await?
    .ok_or_else(|| Error::internal("database: conversation upsert returned no row"))?;
    if r.text("user_id")? != user.as_str() {
        return Err(Error::Conflict(format!("conversation '{conv}' belongs to another user")));
    }
    check_conversation_agent(&conv, r.opt_text("agent_id")?.as_deref(), &messages)?;
    let seq = r.int("last_seq")?;
    let out = insert_after::<B>(&mut tx, tenant, &conv, &user, messages, seq, now).await?;
    for job in jobs {
        super::jobs::enqueue_in::<B>(&mut tx, job).await?;
    }
    B::commit(tx).await?;
    Ok(out)
}

/// Write `messages` as the next ones of conversation `conv` of `user` (the last so far is
/// number `seq`) inside `tx`, numbering them, and move the conversation's counter; the
/// messages as stored.
async fn insert_after<B: Backend>(
    tx: &mut B::Tx,
    tenant: &TenantId,
    conv: &ConversationId,
    user: &UserId,
    messages: Vec<Message>,
    mut seq: i64,
    now: OffsetDateTime,
) -> Result<Vec<Message>> {
    let mut out = Vec::with_capacity(messages.len());
    for mut m in messages {
        seq += 1;
        m.seq = seq;
        let (cols, values, index) = B::message_index(&m);
        let marks = vec!["?"; INSERT_COLS.split(", ").count()].join(", ");
        let sql = format!("INSERT INTO messages ({INSERT_COLS}{cols}) VALUES ({marks}{values})");
        let mut args = message_args(tenant, conv, user, &m, seq);
        args.extend(index);
        B::tx_run(tx, &sql, &args).await.map_err(|e| {
            if B::is_duplicate(&e) {
                return Error::Conflict(format!("message {} already exists", m.id));
            }
            B::fault(e)
        })?;
        out.push(m);
    }
    // The days the batch's relative dates point to (`engram_core::when`).
    record_dates::<B>(tx, tenant, &out).await?;
    // The speakers the batch names, once each (`engram_core::speaker`).
    let mut speakers: Vec<&str> =
        out.iter().filter_map(|m| engram_core::speaker::label(&m.content)).collect();
    speakers.sort_unstable();
    speakers.dedup();
    for name in speakers {
        B::tx_run(
            tx,
            "INSERT INTO speakers (tenant_id, user_id, name) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            &[Text(tenant.as_str()), Text(user.as_str()), Text(name)],
        )
        .await
        .map_err(B::fault)?;
    }
    B::tx_run(
        tx,
        "UPDATE conversations SET last_seq = ?, updated_at = ? WHERE tenant_id = ? AND id = ?",
        &[Int(seq), Ts(now), Text(tenant.as_str()), Text(conv.as_str())],
    )
    .await
    .map_err(B::fault)?;
    Ok(out)
}

/// The first and last day message `m`'s relative dates point to, as midnights UTC.
fn said_days(m: &Message) -> Option<(OffsetDateTime, OffsetDateTime)> {
    let spans = engram_core::when::relative_spans(&m.content, m.created_at);
    let from = spans.iter().map(|s| s.start).min()?;
    let to = spans.iter().map(|s| s.end).max()?;
    Some((from.midnight().assume_utc(), to.midnight().assume_utc()))
}

/// Record in `message_dates` the days each of `messages` names (those that name none have
/// no row); rows already there are kept. The number of rows written.
async fn record_dates<B: Backend>(
    tx: &mut B::Tx,
    tenant: &TenantId,
    messages: &[Message],
) -> Result<u64> {
    let mut n = 0;
    for m in messages {
        let Some((from, to)) = said_days(m) else { continue };
        n += B::tx_run(
            tx,
            "INSERT INTO message_dates (tenant_id, message_id, user_id, said_from, said_to) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            &[Text(tenant.as_str()), Id(m.id.0), Text(m.user_id.as_str()), Ts(from), Ts(to)],
        )
        .await
        .map_err(B::fault)?;
    }
    Ok(n)
}

/// [`MessageStore::index_message_dates`].
///
/// [`MessageStore::index_message_dates`]: engram_core::store::MessageStore::index_message_dates
pub(crate) async fn index_dates<B: Backend>(
    b: &B,
    tenant: &TenantId,
    messages: &[Message],
) -> Result<u64> {
    let mut tx = b.begin_write().await?;
    let n = record_dates::<B>(&mut tx, tenant, messages).await?;
    B::commit(tx).await?;
    Ok(n)
}

/// [`MessageStore::messages_said_about`].
///
/// [`MessageStore::messages_said_about`]: engram_core::store::MessageStore::messages_said_about
pub(crate) async fn said_about<B: Backend>(
    b: &B,
    tenant: &TenantId,
    f: &TranscriptFilter,
    from: OffsetDateTime,
    to: OffsetDateTime,
    n: usize,
) -> Result<Vec<Message>> {
    let mut sql = "SELECT m.* FROM message_dates d JOIN messages m \
                   ON m.tenant_id = d.tenant_id AND m.id = d.message_id \
                   WHERE d.tenant_id = ? AND d.user_id = ? AND d.said_from <= ? AND d.said_to >= ?"
        .to_string();
    let mut args = vec![Text(tenant.as_str()), Text(f.user.as_str()), Ts(to), Ts(from)];
    in_window(&mut sql, &mut args, f);
    sql.push_str(&format!(" ORDER BY m.created_at DESC, m.id DESC LIMIT {}", limit(n)));
    let rows = b.read_all(&sql, &args).await?;
    rows.iter().map(rows::message).collect()
}

/// The values of [`INSERT_COLS`] for message `m`, appended to conversation `conv` of `user`
/// as number `seq`.
fn message_args<'a>(
    tenant: &'a TenantId,
    conv: &'a ConversationId,
    user: &'a UserId,
    m: &'a Message,
    seq: i64,
) -> Vec<Arg<'a>> {
    vec![
        Text(tenant.as_str()),
        Id(m.id.0),
        Text(conv.as_str()),
        Text(user.as_str()),
        OptText(m.agent_id.as_ref().map(AgentId::as_str)),
        Int(seq),
        Text(m.role.as_str()),
        Text(&m.content),
        OptText(m.tool_name.as_deref()),
        OptJson(m.tool_args.as_ref()),
        OptText(m.tool_result.as_deref()),
        OptText(m.turn_id.as_deref()),
        Json(&m.metadata),
        Ts(m.created_at),
    ]
}

/// One conversation of a tenant, for the shared reads and writes of its state.
pub(crate) struct Conversation<'a, B> {
    b: &'a B,
    tenant: &'a TenantId,
    id: &'a ConversationId,
}

impl<'a, B: Backend> Conversation<'a, B> {
    pub(crate) fn new(b: &'a B, tenant: &'a TenantId, id: &'a ConversationId) -> Self {
        Conversation { b, tenant, id }
    }

    /// The conversation's key, the first two values of each statement below.
    fn key(&self) -> [Arg<'a>; 2] {
        [Text(self.tenant.as_str()), Text(self.id.as_str())]
    }

    /// Up to `n` messages after number `after_seq`, in order.
    pub(crate) async fn list(&self, after_seq: i64, n: usize) -> Result<Vec<Message>> {
        let sql = format!(
            "SELECT * FROM messages WHERE tenant_id = ? AND conversation_id = ? \
             AND seq > ? ORDER BY seq LIMIT {}",
            limit(n)
        );
        let [tenant, conv] = self.key();
        let rows = self.b.read_all(&sql, &[tenant, conv, Int(after_seq)]).await?;
        rows.iter().map(rows::message).collect()
    }

    /// Every message, in order.
    pub(crate) async fn messages(&self) -> Result<Vec<Message>> {
        let sql = "SELECT * FROM messages WHERE tenant_id = ? AND conversation_id = ? ORDER BY seq";
        let rows = self.b.read_all(sql, &self.key()).await?;
        rows.iter().map(rows::message).collect()
    }

    /// The conversation as listed, if it exists.
    pub(crate) async fn info(&self) -> Result<Option<ConversationInfo>> {
        let sql =
            format!("SELECT {CONVERSATION_COLS} FROM conversations WHERE tenant_id = ? AND id = ?");
        let row = self.b.read_opt(&sql, &self.key()).await?;
        row.as_ref().map(conversation_info).transpose()
    }

    /// The user and agent the conversation belongs to, if it exists.
    pub(crate) async fn owner(&self) -> Result<Option<(UserId, Option<AgentId>)>> {
        let sql = "SELECT user_id, agent_id FROM conversations WHERE tenant_id = ? AND id = ?";
        let Some(r) = self.b.read_opt(sql, &self.key()).await? else { return Ok(None) };
        let agent = r.opt_text("agent_id")?.map(AgentId::parse).transpose()?;
        Ok(Some((UserId::parse(r.text("user_id")?)?, agent)))
    }

    /// Up to `n` messages with content and no vector of `model_id`: (id, seq).
    pub(crate) async fn needing_vectors(
        &self,
        model_id: &str,
        n: usize,
    ) -> Result<Vec<(MessageId, i64)>> {
        let sql = format!(
            "SELECT id, seq FROM messages WHERE tenant_id = ? AND conversation_id = ? \
             AND content != '' AND (embedding IS NULL OR embedding_model IS DISTINCT FROM ?) \
             ORDER BY seq LIMIT {}",
            limit(n)
        );
        let [tenant, conv] = self.key();
        let rows = self.b.read_all(&sql, &[tenant, conv, Text(model_id)]).await?;
        rows.iter().map(|r| Ok((MessageId(r.id("id")?), r.int("seq")?))).collect()
    }

    /// Where extraction stopped, if it ran.
    pub(crate) async fn extraction_cursor(&self) -> Result<Option<String>> {
        let sql =
            "SELECT last_hash FROM extraction_cursors WHERE tenant_id = ? AND conversation_id = ?";
        let row = self.b.read_opt(sql, &self.key()).await?;
        row.map(|r| r.text("last_hash")).transpose()
    }

    /// The rolling summary and the user turns it covers (`(None, 0)` before the first).
    pub(crate) async fn rolling_summary(&self) -> Result<(Option<String>, i64)> {
        let sql = "SELECT rolling_summary, summary_user_turns FROM conversations \
                   WHERE tenant_id = ? AND id = ?";
        match self.b.read_opt(sql, &self.key()).await? {
            Some(r) => Ok((r.opt_text("rolling_summary")?, r.int("summary_user_turns")?)),
            None => Ok((None, 0)),
        }
    }

    pub(crate) async fn set_rolling_summary(&self, summary: &str, user_turns: i64) -> Result<()> {
        let sql = "UPDATE conversations SET rolling_summary = ?, summary_user_turns = ? \
                   WHERE tenant_id = ? AND id = ?";
        let [tenant, conv] = self.key();
        self.b.write(sql, &[Text(summary), Int(user_turns), tenant, conv]).await?;
        Ok(())
    }
}

/// Conversations of a tenant (of one user), most recently updated first, after `before`
/// (the update time and id of the last one of the previous page).
/// What a listed conversation reads.
const CONVERSATION_COLS: &str =
    "id, user_id, agent_id, last_seq, summarized_seq, created_at, updated_at";

pub(crate) async fn list_conversations<B: Backend>(
    b: &B,
    tenant: &TenantId,
    user: Option<&UserId>,
    before: Option<(OffsetDateTime, &ConversationId)>,
    n: usize,
) -> Result<Vec<ConversationInfo>> {
    let mut sql = format!("SELECT {CONVERSATION_COLS} FROM conversations WHERE tenant_id = ?");
    let mut args = vec![Text(tenant.as_str())];
    if let Some(u) = user {
        sql.push_str(" AND user_id = ?");
        args.push(Text(u.as_str()));
    }
    if let Some((at, id)) = before {
        sql.push_str(&format!(
            " AND (updated_at < ? OR (updated_at = ? AND id{0} > ?{0}))",
            B::BYTE_ORDER
        ));
        args.extend([Ts(at), Ts(at), Text(id.as_str())]);
    }
    sql.push_str(&format!(" ORDER BY updated_at DESC, id{} LIMIT {}", B::BYTE_ORDER, limit(n)));
    let rows = b.read_all(&sql, &args).await?;
    rows.iter().map(conversation_info).collect()
}

/// Conversations of `agent` with more than `unsummarized` messages no summary covers, most
/// recently updated first.
pub(crate) async fn conversations_to_compact<B: Backend>(
    b: &B,
    tenant: &TenantId,
    agent: &AgentId,
    unsummarized: i64,
    n: usize,
) -> Result<Vec<ConversationInfo>> {
    let sql = format!(
        "SELECT {CONVERSATION_COLS} FROM conversations WHERE tenant_id = ? AND agent_id = ? \
         AND last_seq - summarized_seq > ? ORDER BY updated_at DESC, id{} LIMIT {}",
        B::BYTE_ORDER,
        limit(n)
    );
    let args = [Text(tenant.as_str()), Text(agent.as_str()), Int(unsummarized)];
    let rows = b.read_all(&sql, &args).await?;
    rows.iter().map(conversation_info).collect()
}

/// The columns of a conversation listed by [`CONVERSATION_COLS`].
fn conversation_info<R: Columns>(r: &R) -> Result<ConversationInfo> {
    Ok(ConversationInfo {
        id: ConversationId::parse(r.text("id")?)?,
        user_id: UserId::parse(r.text("user_id")?)?,
        agent_id: r.opt_text("agent_id")?.map(AgentId::parse).transpose()?,
        messages: r.int("last_seq")?,
        summarized_seq: r.int("summarized_seq")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
    })
}

pub(crate) async fn get<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: MessageId,
) -> Result<Option<Message>> {
    let row = b
        .read_opt(
            "SELECT * FROM messages WHERE tenant_id = ? AND id = ?",
            &[Text(tenant.as_str()), Id(id.0)],
        )
        .await?;
    row.as_ref().map(rows::message).transpose()
}

/// The messages of a tenant among `ids`, in any order.
pub(crate) async fn get_many<B: Backend>(
    b: &B,
    tenant: &TenantId,
    ids: &[MessageId],
) -> Result<Vec<Message>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let ids = Arg::Ids(ids.iter().map(|i| i.0).collect());
    super::by_ids(b, "SELECT * FROM messages", tenant.as_str(), ids, rows::message).await
}

/// Add `delta` to a message's rating; the new rating.
pub(crate) async fn rate<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: MessageId,
    delta: i64,
) -> Result<i64> {
    let r = b
        .write_opt(
            "UPDATE messages SET rating = rating + ? WHERE tenant_id = ? AND id = ? RETURNING rating",
            &[Int(delta), Text(tenant.as_str()), Id(id.0)],
        )
        .await?
        .ok_or_else(|| Error::not_found(format!("message {id}")))?;
    r.int("rating")
}

/// The conversations with messages needing a vector of `model_id`.
pub(crate) async fn conversations_needing_vectors<B: Backend>(
    b: &B,
    tenant: &TenantId,
    model_id: &str,
    n: usize,
) -> Result<Vec<ConversationId>> {
    let sql = format!(
        "SELECT DISTINCT conversation_id FROM messages WHERE tenant_id = ? AND content != '' \
         AND (embedding IS NULL OR embedding_model IS DISTINCT FROM ?) ORDER BY 1 LIMIT {}",
        limit(n)
    );
    let rows = b.read_all(&sql, &[Text(tenant.as_str()), Text(model_id)]).await?;
    rows.iter().map(|r| ConversationId::parse(r.text("conversation_id")?)).collect()
}

/// Refuse an append whose messages name another agent than the one that started the
/// conversation (both backends, inside the append's transaction, so two agents racing to
/// start one conversation id cannot both write into it).
fn check_conversation_agent(
    conv: &ConversationId,
    owner_agent: Option<&str>,
    messages: &[Message],
) -> Result<()> {
    let Some(owner) = owner_agent else { return Ok(()) };
    if messages.iter().any(|m| m.agent_id.as_ref().is_some_and(|a| a.as_str() != owner)) {
        return Err(Error::Conflict(format!("conversation '{conv}' belongs to another agent")));
    }
    Ok(())
}

/// Narrow `sql` (a WHERE clause being built) to the filter's time window.
fn in_window<'a>(sql: &mut String, args: &mut Vec<Arg<'a>>, f: &TranscriptFilter) {
    if let Some(t) = f.since {
        sql.push_str(" AND created_at >= ?");
        args.push(Ts(t));
    }
    if let Some(t) = f.until {
        sql.push_str(" AND created_at < ?");
        args.push(Ts(t));
    }
}

/// A page of a user's messages in a time window, newest first ([`MessageStore::scan_messages`]).
///
/// [`MessageStore::scan_messages`]: engram_core::store::MessageStore::scan_messages
pub(crate) async fn scan<B: Backend>(
    b: &B,
    tenant: &TenantId,
    f: &TranscriptFilter,
    before: Option<(OffsetDateTime, MessageId)>,
    n: usize,
) -> Result<Vec<Message>> {
    let mut sql = "SELECT * FROM messages WHERE tenant_id = ? AND user_id = ?".to_string();
    let mut args = vec![Text(tenant.as_str()), Text(f.user.as_str())];
    in_window(&mut sql, &mut args, f);
    if let Some((at, id)) = before {
        sql.push_str(" AND (created_at < ? OR (created_at = ? AND id < ?))");
        args.extend([Ts(at), Ts(at), Id(id.0)]);
    }
    sql.push_str(&format!(" ORDER BY created_at DESC, id DESC LIMIT {}", limit(n)));
    let rows = b.read_all(&sql, &args).await?;
    rows.iter().map(rows::message).collect()
}

/// [`MessageStore::unembedded_messages`].
///
/// [`MessageStore::unembedded_messages`]: engram_core::store::MessageStore::unembedded_messages
pub(crate) async fn unembedded<B: Backend>(
    b: &B,
    tenant: &TenantId,
    f: &TranscriptFilter,
    model_id: &str,
) -> Result<u64> {
    let mut sql = "SELECT count(*) AS n FROM messages WHERE tenant_id = ? AND user_id = ? \
                   AND content != '' AND (embedding IS NULL OR embedding_model IS DISTINCT FROM ?)"
        .to_string();
    let mut args = vec![Text(tenant.as_str()), Text(f.user.as_str()), Text(model_id)];
    in_window(&mut sql, &mut args, f);
    let row = b.read_opt(&sql, &args).await?;
    Ok(row.map(|r| r.int("n")).transpose()?.unwrap_or(0).max(0) as u64)
}

/// The speakers of the user's messages (see `MessageStore::speakers`).
pub(crate) async fn speakers<B: Backend>(
    b: &B,
    tenant: &TenantId,
    user: &UserId,
) -> Result<Vec<String>> {
    let sql = "SELECT name FROM speakers WHERE tenant_id = ? AND user_id = ? ORDER BY name";
    let rows = b.read_all(sql, &[Text(tenant.as_str()), Text(user.as_str())]).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let name = r.text("name")?;
        // Rows of the migration's backfill are candidates; the label rule decides.
        if engram_core::speaker::label(&format!("{name}: ")) == Some(name.as_str()) {
            out.push(name);
        }
    }
    Ok(out)
}

/// Count a search's return of these messages and summaries (one statement per table).
pub(crate) async fn touch<B: Backend>(
    b: &B,
    tenant: &TenantId,
    messages: &[MessageId],
    summaries: &[engram_core::model::SummaryId],
    at: OffsetDateTime,
) -> Result<()> {
    let lists = [
        ("messages", messages.iter().map(|m| m.0).collect::<std::collections::BTreeSet<_>>()),
        ("summaries", summaries.iter().map(|s| s.0).collect()),
    ];
    for (table, ids) in lists {
        if ids.is_empty() {
            continue;
        }
        let sql = format!(
            "UPDATE {table} SET access_count = access_count + 1, last_accessed_at = ? \
             WHERE tenant_id = ? AND id{}",
            B::IN_LIST
        );
        b.write(&sql, &[Ts(at), Text(tenant.as_str()), Arg::Ids(ids.into_iter().collect())])
            .await?;
    }
    Ok(())
}

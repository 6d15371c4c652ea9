//! Who sees what: the caller's view (tenant, user, agent and its memory pool) resolved once
//! per request, and the visibility checks every operation applies to rows, ids inside rows,
//! conversations and messages. A row the caller may not see is reported exactly like a row
//! that does not exist.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::model::{
    Agent, AgentId, ConversationId, KeyRole, Kind, Memory, MemoryId, MessageId, Principal,
    TenantId, UserId, default_pool,
};
use crate::store::MemoryFilter;

use super::Engine;

/// The `(user, agent)` a batch item names; items with the same key share a [`View`].
pub(super) type ViewKey = (Option<UserId>, Option<AgentId>);

/// The memory-visibility view of a caller for one request.
pub(super) struct View {
    pub(super) tenant: TenantId,
    pub(super) user: Option<UserId>,
    pub(super) agent: Option<AgentId>,
    /// The pool of `agent`, if any.
    pub(super) pool: Option<String>,
    /// `agent`'s settings, read once for the whole request (pool, PII policy, dedup
    /// threshold); None when the agent has none or there is no agent.
    pub(super) settings: Option<Agent>,
}

/// Whom a request acts for: an admin key for what it names; an agent key for its agent
/// (naming another agent is forbidden) and any user; a user key for its user (naming another
/// user is forbidden) and any agent.
pub(super) fn acting_for(
    p: &Principal,
    user: Option<&UserId>,
    agent: Option<&AgentId>,
) -> Result<(Option<UserId>, Option<AgentId>)> {
    Ok(match &p.role {
        KeyRole::Admin => (user.cloned(), agent.cloned()),
        KeyRole::Agent(bound) => {
            if let Some(a) = agent
                && a != bound
            {
                return Err(Error::Forbidden(format!(
                    "this key is bound to agent '{bound}' and cannot act for agent '{a}'"
                )));
            }
            (user.cloned(), Some(bound.clone()))
        }
        KeyRole::User(bound) => {
            if let Some(u) = user
                && u != bound
            {
                return Err(Error::Forbidden(format!(
                    "this key is bound to user '{bound}' and cannot act for user '{u}'"
                )));
            }
            (Some(bound.clone()), agent.cloned())
        }
    })
}

impl Engine {
    /// Resolve who may see what for a request naming `user` and `agent`.
    pub(super) async fn view(
        &self,
        p: &Principal,
        user: Option<&UserId>,
        agent: Option<&AgentId>,
        user_required: bool,
    ) -> Result<View> {
        let (user, agent) = acting_for(p, user, agent)?;
        if user_required && user.is_none() {
            return Err(Error::invalid("user_id", "user_id is required"));
        }
        let settings = match &agent {
            Some(a) => self.svc.store.get_agent(&p.tenant, a).await?,
            None => None,
        };
        let pool =
            agent.as_ref().map(|a| settings.as_ref().map_or_else(|| default_pool(a), Agent::pool));
        Ok(View { tenant: p.tenant.clone(), user, agent, pool, settings })
    }

    /// The memory pools of several agents with one store call (agents without settings
    /// have their default pool).
    pub(super) async fn pools_of(
        &self,
        tenant: &TenantId,
        agents: &[AgentId],
    ) -> Result<std::collections::HashMap<AgentId, String>> {
        let mut distinct: Vec<AgentId> = agents.to_vec();
        distinct.sort();
        distinct.dedup();
        let mut out: std::collections::HashMap<AgentId, String> =
            distinct.iter().map(|a| (a.clone(), default_pool(a))).collect();
        if !distinct.is_empty() {
            for a in self.svc.store.get_agents(tenant, &distinct).await? {
                out.insert(a.id.clone(), a.pool());
            }
        }
        Ok(out)
    }

    pub(super) async fn pool_of(&self, tenant: &TenantId, agent: &AgentId) -> Result<String> {
        Ok(match self.svc.store.get_agent(tenant, agent).await? {
            Some(a) => a.pool(),
            None => default_pool(agent),
        })
    }

    pub(super) fn filter(&self, v: &View) -> MemoryFilter {
        MemoryFilter { user_id: v.user.clone(), pool: v.pool.clone(), ..Default::default() }
    }

    /// May the caller see this row? (Same rule as the store filter.)
    pub(super) async fn visible(&self, p: &Principal, m: &Memory) -> Result<bool> {
        let pool = self.caller_pool(p).await?;
        Ok(Self::sees(p, pool.as_deref(), m))
    }

    /// The memory pool of an agent key (one agent read); None for other roles. Resolve it
    /// once before checking many rows with [`Engine::sees`].
    pub(super) async fn caller_pool(&self, p: &Principal) -> Result<Option<String>> {
        match &p.role {
            KeyRole::Agent(a) => Ok(Some(self.pool_of(&p.tenant, a).await?)),
            KeyRole::Admin | KeyRole::User(_) => Ok(None),
        }
    }

    /// The visibility rule, with the caller's pool already resolved ([`Engine::caller_pool`]).
    pub(super) fn sees(p: &Principal, caller_pool: Option<&str>, m: &Memory) -> bool {
        match &p.role {
            KeyRole::Admin => true,
            KeyRole::User(u) => &m.user_id == u,
            KeyRole::Agent(_) => {
                m.kind == Kind::Shared || m.pool.is_none() || m.pool.as_deref() == caller_pool
            }
        }
    }

    pub(super) async fn load_visible(&self, p: &Principal, id: MemoryId) -> Result<Memory> {
        match self.svc.store.get_memory(&p.tenant, id).await? {
            Some(m) if self.visible(p, &m).await? => Ok(m),
            _ => Err(Error::not_found(format!("memory {id}"))),
        }
    }

    /// Is the row `id` visible to the caller? (An unknown id is not.)
    pub(super) async fn id_visible(&self, p: &Principal, id: MemoryId) -> Result<bool> {
        Ok(match self.svc.store.get_memory(&p.tenant, id).await? {
            Some(m) => self.visible(p, &m).await?,
            None => false,
        })
    }

    /// Clear the `superseded_by` of rows whose successor the caller cannot see: a private
    /// successor's id is none of the caller's business (issue 10: ids inside other rows).
    /// Admin keys see every row, and a successor always belongs to its predecessor's user,
    /// so only agent keys can have something to hide.
    pub(super) async fn hide_invisible_successors(
        &self,
        p: &Principal,
        rows: &mut [Memory],
    ) -> Result<()> {
        if !matches!(p.role, KeyRole::Agent(_)) {
            return Ok(());
        }
        let ids: Vec<MemoryId> = rows.iter().filter_map(|m| m.superseded_by).collect();
        if ids.is_empty() {
            return Ok(());
        }
        let pool = self.caller_pool(p).await?;
        let seen: HashSet<MemoryId> = self
            .svc
            .store
            .get_memories(&p.tenant, &ids)
            .await?
            .into_iter()
            .filter(|s| Self::sees(p, pool.as_deref(), s))
            .map(|s| s.id)
            .collect();
        for m in rows {
            if m.superseded_by.is_some_and(|s| !seen.contains(&s)) {
                m.superseded_by = None;
            }
        }
        Ok(())
    }

    pub(super) fn require_admin(p: &Principal, what: &str) -> Result<()> {
        match &p.role {
            KeyRole::Admin => Ok(()),
            KeyRole::Agent(_) | KeyRole::User(_) => {
                Err(Error::Forbidden(format!("{what} needs an admin key")))
            }
        }
    }

    pub(super) fn authorize_user_admin(&self, p: &Principal, user: &UserId) -> Result<()> {
        match &p.role {
            KeyRole::Admin => Ok(()),
            KeyRole::User(u) if u == user => Ok(()),
            KeyRole::User(_) | KeyRole::Agent(_) => {
                Err(Error::Forbidden("only an admin key or the user's own key can do this".into()))
            }
        }
    }

    /// May the caller read this conversation? Admin: any; a user key: its user's; an agent
    /// key: those of its pool and those started without an agent. Unknown: no.
    pub(super) async fn conversation_visible(
        &self,
        p: &Principal,
        conversation: &ConversationId,
    ) -> Result<bool> {
        let Some((owner, agent)) =
            self.svc.store.conversation_owner(&p.tenant, conversation).await?
        else {
            return Ok(false);
        };
        self.may_read_conversation(p, &owner, agent.as_ref()).await
    }

    /// May the caller read a conversation of `owner` written through `agent`? An admin
    /// key: any; a user key: its own; an agent key: those of its pool and those written
    /// without an agent.
    pub(super) async fn may_read_conversation(
        &self,
        p: &Principal,
        owner: &UserId,
        agent: Option<&AgentId>,
    ) -> Result<bool> {
        Ok(match &p.role {
            KeyRole::Admin => true,
            KeyRole::User(u) => u == owner,
            KeyRole::Agent(a) => match agent {
                Some(owner_agent) => {
                    self.pool_of(&p.tenant, owner_agent).await?
                        == self.pool_of(&p.tenant, a).await?
                }
                None => true,
            },
        })
    }

    /// May the caller see the message with this id (text form, as events keep it)?
    pub(super) async fn message_visible(&self, p: &Principal, id: &str) -> Result<bool> {
        let Ok(id) = MessageId::parse(id) else { return Ok(false) };
        match self.svc.store.get_message(&p.tenant, id).await? {
            Some(m) => self.conversation_visible(p, &m.conversation_id).await,
            None => Ok(false),
        }
    }
}

impl Engine {
    /// Whether `user_id` (and `agent_id`) may add to `conversation`: the check
    /// [`Engine::append_messages`] makes, for a caller (the memory proxy) that must know
    /// before paying for an upstream call whose turn it would then fail to save. Whether the
    /// conversation exists already.
    pub async fn check_append(
        &self,
        p: &Principal,
        conversation: &ConversationId,
        user_id: Option<&UserId>,
        agent_id: Option<&AgentId>,
    ) -> Result<bool> {
        let mut v = self.view(p, user_id, agent_id, true).await?;
        let user =
            v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
        self.continue_as_owner(&mut v, &user, conversation).await
    }

    /// A conversation belongs to the user and the agent that started it (a `proxy:` id to
    /// the user it names). Whether the conversation exists already.
    pub(super) async fn continue_as_owner(
        &self,
        v: &mut View,
        user: &UserId,
        conversation: &ConversationId,
    ) -> Result<bool> {
        conversation.check_proxy_owner(user)?;
        // A conversation belongs to the user and the agent that started it: another agent
        // may not add to it (issue 10: it would feed that agent's private extraction), and
        // a caller that names no agent continues it as its agent.
        let found = self.svc.store.conversation_owner(&v.tenant, conversation).await?;
        if let Some((owner, conv_agent)) = &found {
            if owner != user {
                return Err(Error::Conflict(format!(
                    "conversation '{conversation}' belongs to another user"
                )));
            }
            match (conv_agent, &v.agent) {
                (Some(c), Some(a)) if c != a => {
                    return Err(Error::Conflict(format!(
                        "conversation '{conversation}' belongs to another agent"
                    )));
                }
                (Some(c), None) => {
                    v.settings = self.svc.store.get_agent(&v.tenant, c).await?;
                    v.pool = Some(v.settings.as_ref().map_or_else(|| default_pool(c), Agent::pool));
                    v.agent = conv_agent.clone();
                }
                (Some(_) | None, Some(_)) | (None, None) => {}
            }
        }
        Ok(found.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Source, SourceKind};

    fn principal(role: KeyRole) -> Principal {
        Principal { tenant: TenantId::default_tenant(), role }
    }
    fn user(s: &str) -> UserId {
        UserId::parse(s).unwrap()
    }
    fn agent(s: &str) -> AgentId {
        AgentId::parse(s).unwrap()
    }
    fn row(owner: &str, kind: Kind, pool: Option<&str>) -> Memory {
        Memory {
            kind,
            pool: pool.map(str::to_string),
            ..Memory::new(
                TenantId::default_tenant(),
                user(owner),
                "The user lives in Porto.".into(),
                Source { kind: SourceKind::Manual, conversation_id: None, message_ids: vec![] },
                crate::model::now(),
            )
        }
    }

    #[test]
    fn keys_act_only_for_what_they_are_bound_to() {
        let admin = principal(KeyRole::Admin);
        assert_eq!(
            acting_for(&admin, Some(&user("u")), Some(&agent("a"))).unwrap(),
            (Some(user("u")), Some(agent("a")))
        );
        assert_eq!(acting_for(&admin, None, None).unwrap(), (None, None));
        let bot = principal(KeyRole::Agent(agent("a")));
        assert_eq!(
            acting_for(&bot, Some(&user("u")), None).unwrap(),
            (Some(user("u")), Some(agent("a"))),
            "an agent key acts for its agent without naming it"
        );
        let e = acting_for(&bot, None, Some(&agent("b"))).unwrap_err();
        assert!(matches!(e, Error::Forbidden(ref m) if m.contains("bound to agent 'a'")), "{e}");
        let me = principal(KeyRole::User(user("u")));
        assert_eq!(
            acting_for(&me, None, Some(&agent("a"))).unwrap(),
            (Some(user("u")), Some(agent("a")))
        );
        let e = acting_for(&me, Some(&user("v")), None).unwrap_err();
        assert!(matches!(e, Error::Forbidden(ref m) if m.contains("bound to user 'u'")), "{e}");
    }

    #[test]
    fn who_sees_which_row() {
        let private = row("u", Kind::Knowledge, Some("agent:a"));
        let shared = row("u", Kind::Shared, Some("agent:a"));
        let unpooled = row("u", Kind::Knowledge, None);
        let other_user = row("v", Kind::Knowledge, None);
        let admin = principal(KeyRole::Admin);
        for m in [&private, &shared, &unpooled, &other_user] {
            assert!(Engine::sees(&admin, None, m));
        }
        let me = principal(KeyRole::User(user("u")));
        assert!(Engine::sees(&me, None, &private));
        assert!(!Engine::sees(&me, None, &other_user));
        let a = principal(KeyRole::Agent(agent("a")));
        let b = principal(KeyRole::Agent(agent("b")));
        assert!(Engine::sees(&a, Some("agent:a"), &private));
        assert!(!Engine::sees(&b, Some("agent:b"), &private), "another pool's private fact");
        assert!(Engine::sees(&b, Some("agent:b"), &shared), "a shared fact is seen by every agent");
        assert!(Engine::sees(&b, Some("agent:b"), &unpooled), "a fact written without an agent");
        assert!(Engine::sees(&b, Some("cluster:x"), &other_user), "agents see every user's facts");
    }

    #[test]
    fn admin_only_operations() {
        assert!(Engine::require_admin(&principal(KeyRole::Admin), "stats").is_ok());
        for role in [KeyRole::Agent(agent("a")), KeyRole::User(user("u"))] {
            let e = Engine::require_admin(&principal(role), "stats").unwrap_err();
            assert_eq!(
                e.to_string(),
                Error::Forbidden("stats needs an admin key".into()).to_string()
            );
        }
    }
}

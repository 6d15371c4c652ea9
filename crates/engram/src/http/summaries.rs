//! `/v1/summaries/{id}`: one summary of the DAG with its children or source messages.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use engram_core::model::SummaryId;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiPath, ApiResult, ErrorBody};
use super::{AppState, Auth};
use crate::api::dto::{MessageDto, SummaryDto};

/// A summary with what it covers.
#[derive(Debug, Serialize, ToSchema)]
pub struct SummaryResponse {
    pub summary: SummaryDto,
    /// The summaries one level down it was written from (a branch, a root), oldest first.
    pub children: Vec<SummaryDto>,
    /// The messages it was written from (a leaf), in order.
    pub messages: Vec<MessageDto>,
}

/// A summary of the DAG with its children (a branch, a root) or source messages (a leaf).
#[utoipa::path(get, path = "/v1/summaries/{id}",
    responses((status = 200, body = SummaryResponse), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn get(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<SummaryResponse>> {
    let id = SummaryId::parse(&id)?;
    let v = st.engine.summary(&p, id).await?;
    Ok(Json(SummaryResponse {
        summary: (&v.summary).into(),
        children: v.children.iter().map(Into::into).collect(),
        messages: v.messages.iter().map(Into::into).collect(),
    }))
}

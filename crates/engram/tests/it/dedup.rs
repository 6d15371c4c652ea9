//! Dedup keeps what is new: a fact that embeds close to a stored one but says something else
//! (a changed number, a negation, other words) is added, never swallowed as a confirmation.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{Backend, Server};

async fn a_similar_fact_with_a_new_value_or_a_negation_is_added(backend: Backend) {
    let s = Server::on(backend).await;
    let budget = s.remember("u", "The user's grocery budget is 440 euros per month.").await;
    s.remember("u", "The user likes coffee.").await;
    for (content, why) in [
        ("The user's grocery budget is 1060 euros per month.", "a new amount"),
        ("The user does not like coffee.", "a negation"),
    ] {
        let (st, b) = s.post("/v1/memories", json!({ "content": content, "user_id": "u" })).await;
        assert_eq!((st, b["decision"].as_str()), (StatusCode::CREATED, Some("ADD")), "{why}: {b}");
    }
    // The restated original is still confirmed.
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user's grocery budget is 440 euros per month", "user_id": "u" }),
        )
        .await;
    assert_eq!((st, b["decision"].as_str()), (StatusCode::OK, Some("NONE")), "{b}");
    assert_eq!(b["memory"]["id"], budget.as_str());
    let (_, list) = s.get("/v1/memories?user_id=u").await;
    assert_eq!(list["memories"].as_array().unwrap().len(), 4, "{list}");
}

on_both_backends!(a_similar_fact_with_a_new_value_or_a_negation_is_added);

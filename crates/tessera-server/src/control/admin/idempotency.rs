//! A client creation retried with its `Idempotency-Key` (draft-ietf-httpapi-idempotency-
//! key-header): the first answer, secret included, is kept sealed with the master key for
//! a day ([`crate::registrar::IDEMPOTENCY_WINDOW`]), and a retry by the same admin client
//! with the same key and the same body gets it again instead of a second client; the same
//! key with another body is 422.

use axum::extract::{FromRequest, Request};
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;
use tessera_proto::admin as api;
use tessera_store::IdempotentAnswer;

use super::extract::{parse_json, read_body};
use crate::control::problem::Problem;
use crate::AppState;

/// The context the remembered answers are sealed under.
const SEALED_ANSWER: &str = "tessera idempotent answer";

/// A JSON body (as [`super::extract::ApiJson`] reads it) with the request's
/// `Idempotency-Key`, if any, and the SHA-256 of the body as sent, which tells a retry
/// from another request under the same key.
#[derive(Debug)]
pub(crate) struct Idempotent<T> {
    /// The key: 1 to 255 visible ASCII characters.
    key: Option<String>,
    /// The body.
    pub(crate) input: T,
    fingerprint: Vec<u8>,
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Idempotent<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, _: &S) -> Result<Self, Problem> {
        let (parts, body) = request.into_parts();
        let key = idempotency_key(&parts.headers)?;
        let bytes = read_body(body).await?;
        let input = parse_json(&parts.headers, &bytes)?;
        let fingerprint = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &bytes)
            .as_ref()
            .to_vec();
        Ok(Self {
            key,
            input,
            fingerprint,
        })
    }
}

impl<T> Idempotent<T> {
    /// The answer an earlier request of `owner` with this key got, if there was one.
    pub(crate) async fn earlier(
        &self,
        state: &AppState,
        owner: &str,
    ) -> Result<Option<api::ClientWithSecret>, Problem> {
        let Some(key) = &self.key else {
            return Ok(None);
        };
        match state.store().idempotent_answer(owner, key).await? {
            Some(first) => self.replay(state, &first).map(Some),
            None => Ok(None),
        }
    }

    /// What to remember of `answer` with the creation, when a key came: sealed.
    pub(crate) fn remember(
        &self,
        state: &AppState,
        owner: &str,
        answer: &api::ClientWithSecret,
    ) -> Option<IdempotentAnswer> {
        self.key.as_ref().map(|key| IdempotentAnswer {
            owner: owner.to_owned(),
            key: key.clone(),
            fingerprint: self.fingerprint.clone(),
            answer: state.secrets().seal(
                SEALED_ANSWER,
                &serde_json::to_vec(answer).unwrap_or_default(),
            ),
            created_at: state.clock().now(),
        })
    }

    /// The first answer again, if this retry is the same request: 422 if not.
    pub(crate) fn replay(
        &self,
        state: &AppState,
        first: &IdempotentAnswer,
    ) -> Result<api::ClientWithSecret, Problem> {
        if first.fingerprint != self.fingerprint {
            return Err(Problem::idempotency_key_reused());
        }
        let opened = state
            .secrets()
            .open(SEALED_ANSWER, &first.answer)
            .map_err(|e| Problem::unavailable(&e))?;
        serde_json::from_slice(&opened).map_err(|e| Problem::unavailable(&e))
    }
}

/// The `Idempotency-Key` header: one value of 1 to 255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let key = value.to_str().ok().map(str::trim).filter(|k| {
        (1..=255).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
    });
    match (key, values.next()) {
        (Some(key), None) => Ok(Some(key.to_owned())),
        _ => Err(Problem::invalid_parameter(
            "Idempotency-Key",
            "Idempotency-Key must be one value of 1 to 255 visible ASCII characters",
        )),
    }
}

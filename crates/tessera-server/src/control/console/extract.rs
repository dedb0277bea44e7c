//! What a console handler takes and what it answers: the request's [`Session`] (else the
//! way to the sign-in page), a [`Form`] posted by that session's pages (its CSRF token
//! checked), and a [`Page`] to show. A refusal is a [`Fail`], itself a page or a redirect.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::Markup;

use super::session::{self, Session};
use super::view::{self, Section};
use super::{field, read_form, Console, Fail};

impl FromRequestParts<Console> for Session {
    type Rejection = Fail;

    /// The live session the request's cookie names, or [`Fail::SignIn`].
    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Fail> {
        let mut session = console.session(&parts.headers)?;
        session.origin = session::Origin::of(&parts.extensions, &parts.headers);
        Ok(session)
    }
}

impl OptionalFromRequestParts<Console> for Session {
    type Rejection = std::convert::Infallible;

    /// The live session, if the request has one (the sign-in page).
    async fn from_request_parts(
        parts: &mut Parts,
        console: &Console,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(console.session(&parts.headers).ok())
    }
}

/// A form posted by a session's own pages: the session, the id its cookie holds (for the
/// message on the next page, or signing out) and the fields, once the synchronizer token in
/// field `csrf` is the session's (else [`Fail::Csrf`]).
#[derive(Debug)]
pub(super) struct Form {
    pub(super) session: Session,
    /// The session cookie's value.
    pub(super) id: String,
    fields: Vec<(String, String)>,
}

impl Form {
    /// The first value of field `name`.
    pub(super) fn field(&self, name: &str) -> Option<&str> {
        field(&self.fields, name)
    }

    /// All fields.
    pub(super) fn fields(&self) -> &[(String, String)] {
        &self.fields
    }
}

impl FromRequest<Console> for Form {
    type Rejection = Fail;

    async fn from_request(request: Request, console: &Console) -> Result<Self, Fail> {
        // The body first, then the session, as when handlers took `Bytes`: a body too
        // large is refused as axum refuses it.
        let headers = request.headers().clone();
        let signing_out = request.uri().path() == "/console/sign-out";
        let origin = session::Origin::of(request.extensions(), &headers);
        let body = Bytes::from_request(request, console)
            .await
            .map_err(Fail::Body)?;
        let mut session = console.session(&headers)?;
        session.origin = origin;
        let id = session::cookie(&headers, session::COOKIE)
            .unwrap_or_default()
            .to_owned();
        let fields = match read_form(&body) {
            Ok(fields) => fields,
            Err(why) => return Err(Fail::BadRequest(Some(Box::new(session)), why)),
        };
        match field(&fields, "csrf") {
            // A read-only sign-in is shown no form that changes anything; one posted all
            // the same is refused here, before the admin API is asked.
            Some(token)
                if session::same(token, &session.csrf) && !session.write && !signing_out =>
            {
                Err(Fail::ReadOnly(Box::new(session)))
            }
            Some(token) if session::same(token, &session.csrf) => Ok(Self {
                session,
                id,
                fields,
            }),
            _ => Err(Fail::Csrf(Some(Box::new(session)))),
        }
    }
}

/// A page of the console: its title, its section in the navigation, the session it is
/// shown to and its body, in the frame every page shares ([`view::page`]).
#[derive(Debug)]
pub(super) struct Page {
    pub(super) title: String,
    pub(super) section: Section,
    pub(super) session: Session,
    pub(super) body: Markup,
}

impl Page {
    /// `body`, titled `title`, in `section`, for `session`.
    pub(super) fn new(
        title: impl Into<String>,
        section: Section,
        session: &Session,
        body: Markup,
    ) -> Self {
        Self {
            title: title.into(),
            section,
            session: session.clone(),
            body,
        }
    }
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        html(
            StatusCode::OK,
            view::page(&self.title, self.section, Some(&self.session), self.body),
        )
    }
}

/// An HTML answer.
pub(super) fn html(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

//! Who may call the API: bearer tokens with roles, a caller's own check, or (explicitly) anyone.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use oncebox_core::{Error, Result};
use subtle::ConstantTimeEq;

use crate::problem::Problem;

/// The shortest token secret accepted: 16 bytes of a random token are out of reach of guessing.
pub const MIN_SECRET_LEN: usize = 16;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// List, get and count.
    ReadOnly,
    /// Everything: also status changes and deletes.
    Operator,
}

impl Role {
    /// `read-only` or `operator`, as logged.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::ReadOnly => "read-only",
            Role::Operator => "operator",
        }
    }
}

/// The caller of one request, as an [`Authorize`] found it: a name for the log of manual actions
/// and a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Who it is, as written in the log line of every change it makes (never a secret).
    pub name: String,
    /// What it may do.
    pub role: Role,
}

/// Decides who sent a request from its headers; `None` refuses it with 401.
///
/// Implemented by [`BearerTokens`] and by any `Fn(&HeaderMap) -> Option<Principal>`, so a service
/// can check its own session cookie or a header set by its gateway.
pub trait Authorize: Send + Sync + 'static {
    /// The caller of a request with these headers, or `None` when it is not known.
    fn authorize(&self, headers: &HeaderMap) -> Option<Principal>;
}

impl<F> Authorize for F
where
    F: Fn(&HeaderMap) -> Option<Principal> + Send + Sync + 'static,
{
    fn authorize(&self, headers: &HeaderMap) -> Option<Principal> {
        self(headers)
    }
}

/// One token: a name (logged), a secret (never shown) and a role.
#[derive(Clone)]
pub struct ApiToken {
    name: String,
    secret: Vec<u8>,
    role: Role,
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("secret", &"<redacted>")
            .field("role", &self.role)
            .finish()
    }
}

impl ApiToken {
    /// A token called `name` whose bearer has `role`. Refused: a blank name or one with characters
    /// other than letters, digits, `-`, `_`, `.` and `@` (it is written in logs), and a secret
    /// shorter than [`MIN_SECRET_LEN`] bytes or with spaces or control characters.
    pub fn new(name: impl Into<String>, secret: impl Into<String>, role: Role) -> Result<Self> {
        let name = name.into();
        let secret = secret.into();
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c));
        if !name_ok {
            return Err(Error::invalid_input(format!(
                "DLQ API token name '{name}' must be 1 to 64 letters, digits, '-', '_', '.' or '@'"
            )));
        }
        if secret.len() < MIN_SECRET_LEN || secret.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::invalid_input(format!(
                "the secret of DLQ API token '{name}' must be at least {MIN_SECRET_LEN} bytes without \
                 spaces or control characters"
            )));
        }
        Ok(Self { name, secret: secret.into_bytes(), role })
    }

    /// The token's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The token's role.
    pub fn role(&self) -> Role {
        self.role
    }
}

/// `Authorization: Bearer <secret>` checked against a fixed set of tokens, each secret compared in
/// constant time (every token is compared, so the time does not tell which one came close).
#[derive(Debug, Clone)]
pub struct BearerTokens {
    tokens: Vec<ApiToken>,
}

impl BearerTokens {
    /// The set of `tokens`; refused when it is empty, when two share a name or a secret.
    pub fn new(tokens: impl IntoIterator<Item = ApiToken>) -> Result<Self> {
        let tokens: Vec<ApiToken> = tokens.into_iter().collect();
        if tokens.is_empty() {
            return Err(Error::invalid_input(
                "no DLQ API token given: give at least one, or build the API with DlqApi::unauthenticated",
            ));
        }
        for (at, token) in tokens.iter().enumerate() {
            for other in &tokens[at + 1..] {
                if token.name == other.name {
                    return Err(Error::invalid_input(format!(
                        "two DLQ API tokens are named '{}'",
                        token.name
                    )));
                }
                if token.secret == other.secret {
                    return Err(Error::invalid_input(format!(
                        "DLQ API tokens '{}' and '{}' share a secret",
                        token.name, other.name
                    )));
                }
            }
        }
        Ok(Self { tokens })
    }
}

impl Authorize for BearerTokens {
    fn authorize(&self, headers: &HeaderMap) -> Option<Principal> {
        let value = headers.get(header::AUTHORIZATION)?.as_bytes();
        let (scheme, secret) = value.split_at_checked(7)?;
        if !scheme.eq_ignore_ascii_case(b"bearer ") {
            return None;
        }
        let secret = secret.trim_ascii();
        let mut found = None;
        for token in &self.tokens {
            if bool::from(token.secret.as_slice().ct_eq(secret)) {
                found = Some(token);
            }
        }
        found.map(|token| Principal { name: token.name.clone(), role: token.role })
    }
}

/// The access rule the router was built with.
#[derive(Clone)]
pub(crate) enum Access {
    /// Every request must be authorized.
    Checked(Arc<dyn Authorize>),
    /// Anyone may do anything (built with `DlqApi::unauthenticated`).
    Open,
}

impl Access {
    fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        match self {
            Access::Checked(authorize) => authorize.authorize(headers),
            Access::Open => Some(Principal { name: "unauthenticated".to_owned(), role: Role::Operator }),
        }
    }
}

/// Middleware of the API routes: 401 for an unknown caller, 403 for a read-only caller of a
/// route that changes something; the caller is handed to the handler as a request extension.
pub(crate) async fn require(State(access): State<Access>, mut request: Request, next: Next) -> Response {
    let changes = !matches!(*request.method(), Method::GET | Method::HEAD);
    match access.principal(request.headers()) {
        None => {
            let mut response = Problem::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or unknown credentials: send 'Authorization: Bearer <token>'",
            )
            .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"oncebox-dlq\""),
            );
            response
        }
        Some(principal) if changes && principal.role == Role::ReadOnly => Problem::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("token '{}' is read-only: changing the DLQ needs an operator token", principal.name),
        )
        .into_response(),
        Some(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = header::HeaderValue::from_str(value) {
            headers.insert(header::AUTHORIZATION, value);
        }
        headers
    }

    fn tokens() -> BearerTokens {
        BearerTokens::new([
            ApiToken::new("ops", "operator-secret-0001", Role::Operator).expect("valid token"),
            ApiToken::new("viewer", "reader-secret-00001", Role::ReadOnly).expect("valid token"),
        ])
        .expect("distinct tokens")
    }

    #[test]
    fn a_bearer_token_names_its_principal_and_role() {
        let tokens = tokens();
        let ops = tokens.authorize(&headers("Bearer operator-secret-0001"));
        assert_eq!(ops, Some(Principal { name: "ops".into(), role: Role::Operator }));
        let viewer = tokens.authorize(&headers("bearer reader-secret-00001"));
        assert_eq!(viewer.map(|p| p.role), Some(Role::ReadOnly));
        for refused in ["Bearer operator-secret-000", "Basic operator-secret-0001", "Bearer", "", "Bearer  "]
        {
            assert_eq!(tokens.authorize(&headers(refused)), None, "{refused:?}");
        }
    }

    #[test]
    fn bad_tokens_are_refused_naming_what_is_wrong_and_secrets_stay_hidden() {
        let short = ApiToken::new("ops", "tiny-sec", Role::Operator).err().map(|e| e.to_string());
        assert!(
            short.as_deref().is_some_and(|e| e.contains("at least 16") && !e.contains("tiny-sec")),
            "{short:?}"
        );
        assert!(ApiToken::new("bad name", "operator-secret-0001", Role::Operator).is_err());
        let token = ApiToken::new("ops", "operator-secret-0001", Role::Operator).expect("valid token");
        let shown = format!("{token:?} {:?}", tokens());
        assert!(!shown.contains("operator-secret") && !shown.contains("reader-secret"), "{shown}");
        let twice = BearerTokens::new([token.clone(), token]).err().map(|e| e.to_string());
        assert!(twice.is_some_and(|e| e.contains("two DLQ API tokens are named 'ops'")));
        assert!(BearerTokens::new([]).is_err());
    }
}

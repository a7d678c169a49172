//! The HTTP face of [`Server`] (axum on tokio): routes, bearer-token
//! authentication, JSON bodies and errors, graceful shutdown. The endpoints
//! and their answers are `docs/serve.md`.

use std::{future::Future, sync::Arc};

use super::{ServeDriver, ServeError, Server};
use axum::{
    Json, Router,
    body::Bytes,
    extract::{DefaultBodyLimit, FromRequestParts, Path, State},
    http::{StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
    routing::{delete, get, post},
};
use serde::Deserialize;
use serde_json::json;

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(json!({ "error": self.message() }))).into_response()
    }
}

/// The authenticated tenant of a request (its index in the server).
pub struct Caller(usize);

/// 401 with the header RFC 6750 asks for.
fn unauthorized(why: &str) -> Response {
    let mut r = (StatusCode::UNAUTHORIZED, Json(json!({ "error": why }))).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    r
}

impl<D: ServeDriver> FromRequestParts<Arc<Server<D>>> for Caller {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        server: &Arc<Server<D>>,
    ) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(unauthorized("an Authorization: Bearer token is required"));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| unauthorized("the Authorization header is not a Bearer token"))?;
        match server.authenticate(token.trim()) {
            Some(t) => Ok(Caller(t)),
            None => Err(unauthorized("unknown token")),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewInstance {
    module: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Invoke {
    export: String,
    #[serde(default)]
    args: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Run {
    #[serde(default)]
    argv: Vec<String>,
    #[serde(default)]
    stdin: String,
}

/// The routes of `server`.
pub fn router<D: ServeDriver>(server: Arc<Server<D>>) -> Router {
    // Module uploads are capped by the configuration (413 past it); every
    // other body is small.
    let limit = server.config().module_bytes.max(1 << 20);
    Router::new()
        .route("/healthz", get(healthz::<D>))
        .route("/metrics", get(metrics::<D>))
        .route("/v1/whoami", get(whoami::<D>))
        .route("/v1/modules", post(upload::<D>).get(list_modules::<D>))
        .route("/v1/modules/{id}", delete(delete_module::<D>))
        .route("/v1/modules/{id}/run", post(run::<D>))
        .route(
            "/v1/instances",
            post(instantiate::<D>).get(list_instances::<D>),
        )
        .route("/v1/instances/{id}", delete(delete_instance::<D>))
        .route("/v1/instances/{id}/invoke", post(invoke::<D>))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(server)
}

/// 200 `ok`, or 503 naming each lost device (a faulted kernel loses its
/// device's context for the process: the server must restart, which a
/// liveness probe on this endpoint does).
async fn healthz<D: ServeDriver>(State(s): State<Arc<Server<D>>>) -> Response {
    let lost = s.probe_devices();
    if lost.is_empty() {
        return (StatusCode::OK, "ok\n").into_response();
    }
    let text: String = lost
        .iter()
        .map(|(d, why)| format!("device {d} lost: {why}\n"))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, text).into_response()
}

async fn metrics<D: ServeDriver>(State(s): State<Arc<Server<D>>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.scrape(),
    )
}

async fn whoami<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
) -> impl IntoResponse {
    let (name, device) = s.tenant(t);
    Json(json!({ "tenant": name, "device": device, "quota_in_use": s.usage(t) }))
}

async fn upload<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
    body: Bytes,
) -> Result<impl IntoResponse, ServeError> {
    let server = Arc::clone(&s);
    let info = s.off_http(move || server.upload(t, &body)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

async fn list_modules<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
) -> impl IntoResponse {
    Json(s.modules(t))
}

async fn delete_module<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
    Path(id): Path<u64>,
) -> Result<StatusCode, ServeError> {
    s.delete_module(t, id).map(|()| StatusCode::NO_CONTENT)
}

async fn instantiate<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
    Json(req): Json<NewInstance>,
) -> Result<impl IntoResponse, ServeError> {
    let server = Arc::clone(&s);
    let info = s
        .on_guest_runtime(async move { server.instantiate(t, req.module).await })
        .await?;
    Ok((StatusCode::CREATED, Json(info)))
}

async fn list_instances<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
) -> impl IntoResponse {
    Json(s.instances(t))
}

async fn delete_instance<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
    Path(id): Path<u64>,
) -> Result<StatusCode, ServeError> {
    s.delete_instance(t, id).map(|()| StatusCode::NO_CONTENT)
}

async fn invoke<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
    Path(id): Path<u64>,
    Json(req): Json<Invoke>,
) -> Result<impl IntoResponse, ServeError> {
    let slot = s.slot(t)?;
    let server = Arc::clone(&s);
    let results = s
        .on_guest_runtime(async move {
            let _slot = slot;
            server.invoke(t, id, &req.export, &req.args).await
        })
        .await?;
    Ok(Json(json!({ "results": results })))
}

async fn run<D: ServeDriver>(
    State(s): State<Arc<Server<D>>>,
    Caller(t): Caller,
    Path(id): Path<u64>,
    Json(req): Json<Run>,
) -> Result<impl IntoResponse, ServeError> {
    let slot = s.slot(t)?;
    let server = Arc::clone(&s);
    let outcome = s
        .on_guest_runtime(async move {
            let _slot = slot;
            server
                .run(t, id, req.argv, req.stdin.into_bytes().into())
                .await
        })
        .await?;
    Ok(Json(outcome))
}

/// Serves `server` on `listener` until `shutdown` completes; requests in
/// flight then finish (each bounded by the request timeout), new ones are
/// refused, and every instance is ended.
pub async fn serve<D: ServeDriver>(
    server: Arc<Server<D>>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(Arc::clone(&server));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    server.end_all();
    Ok(())
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down: finishing the requests in flight");
}

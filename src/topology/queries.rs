//! The `queries` section of a topology: where `run` serves interactive
//! queries, with which token, timeout and TLS (docs/queries.md).

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::types::HumanDuration;
use crate::secrets::Secret;

/// Where `run` serves interactive queries. `run --query-addr` and
/// `--query-advertised-addr` override these.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct QueriesConfig {
    /// `IP:PORT` to serve `GET /v1/stores/...` on, e.g. `0.0.0.0:8080`.
    #[serde(default)]
    pub addr: Option<std::net::SocketAddr>,
    /// `host:port` the other instances forward queries to, when `addr` is
    /// a wildcard address (`0.0.0.0`) they cannot reach. Defaults to
    /// `addr`.
    #[serde(default)]
    pub advertised_addr: Option<String>,
    /// A bearer token every query must carry (`Authorization: Bearer
    /// <token>`, else `401`), forwarded ones between instances included;
    /// every instance needs the same. Write `${file:/path}` or `${VAR}`
    /// rather than the token itself; shown as `***`. Without it any
    /// client that reaches the port is answered, and the port must be
    /// private.
    #[serde(default)]
    pub token: Option<Secret>,
    /// How long a query may take, the requests forwarded to other
    /// instances included, before it is answered `503` with `Retry-After`
    /// (`10s` by default). A request forwarded to another instance gives
    /// up after 5 s on its own.
    #[serde(default)]
    pub request_timeout: Option<HumanDuration>,
    /// Serve HTTPS instead of HTTP. Every instance needs the same setting:
    /// queries are forwarded between instances over HTTPS too, and each
    /// checks the other's certificate against `ca`.
    #[serde(default)]
    pub tls: Option<QueryTlsConfig>,
}

impl QueriesConfig {
    /// `request_timeout`, or its default.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
            .map_or(Duration::from_secs(10), |timeout| timeout.0)
    }
}

/// The query server's certificate, and whose certificates it trusts when
/// it forwards a query. Paths are relative to the directory streamfold
/// runs in; files are read when `run` starts.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct QueryTlsConfig {
    /// PEM file of this instance's certificate, then any intermediate
    /// certificates. It must name the host (or IP address) other
    /// instances reach it by (`advertised_addr`), as a subject
    /// alternative name.
    pub certificate: PathBuf,
    /// PEM file of the certificate's private key (PKCS#8, PKCS#1 or SEC1;
    /// not encrypted).
    pub key: PathBuf,
    /// PEM file of the certificate authorities that signed the other
    /// instances' certificates, checked when a query is forwarded to
    /// them. Defaults to the system's trusted authorities.
    #[serde(default)]
    pub ca: Option<PathBuf>,
}

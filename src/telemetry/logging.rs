//! Log setup: human-readable by default, JSON lines with `--log-format json`.

use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber. `RUST_LOG` overrides the default level
/// (`info` for streamfold, `warn` for everything else). Registered
/// credentials are masked in every line ([`crate::secrets`]).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,streamfold=info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::secrets::scrubbed_stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A second init (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

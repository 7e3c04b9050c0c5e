//! The `streamfold` command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use streamfold::exit_code::ExitClass;
use streamfold::runtime::RuntimeError;
use streamfold::runtime::settings::{RunOptions, default_instance_id};
use streamfold::secrets;
use streamfold::telemetry::logging::{self, LogFormat};
use streamfold::testkit;
use streamfold::topology::describe::{DescribeFormat, describe};
use streamfold::topology::{self, Topology};

/// Records become many small allocations (JSON values, keys); mimalloc
/// serves them markedly faster than glibc's allocator (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A Kafka Streams-style stateful stream processor: durable event folding,
/// exactly once.
#[derive(Parser)]
#[command(name = "streamfold", version, about)]
struct Cli {
    /// Log format on stderr: `text`, or `json` (one JSON object a line,
    /// fatal errors and topology diagnostics included). The level comes
    /// from `RUST_LOG` (default `warn,streamfold=info`).
    #[arg(long, global = true, value_enum, env = "STREAMFOLD_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a topology against Kafka until SIGINT/SIGTERM.
    Run(RunArgs),
    /// Validate topology files and report every error at once.
    Check(CheckArgs),
    /// Draw a topology, with the internal topics it will create.
    Describe(DescribeArgs),
    /// Run a topology offline against fixture records with a virtual clock
    /// and compare its outputs with the expected ones.
    Test(TestArgs),
    /// Start an application over (it must be stopped): delete its
    /// internal topics and consumer group, commit its source offsets from
    /// where to start, remove this host's local state.
    Reset(ResetArgs),
    /// Print the JSON Schema of the topology format (for editor completion).
    Schema,
    /// Work with the dead-letter topic.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
}

#[derive(Subcommand)]
enum DlqCommand {
    /// Send dead letters back to their source topics, from where the last
    /// replay stopped, exactly once.
    Replay(ReplayArgs),
}

// `streamfold run`'s arguments (the variant's doc comment is its help).
#[derive(clap::Args)]
struct RunArgs {
    topology: PathBuf,
    /// Overrides `kafka.bootstrap_servers`.
    #[arg(long, env = "STREAMFOLD_BOOTSTRAP_SERVERS")]
    bootstrap_servers: Option<String>,
    /// Names this instance (transactional id `<name>-<instance>`, static
    /// membership). Stable across restarts, unique per instance;
    /// defaults to the host name.
    #[arg(long, env = "STREAMFOLD_INSTANCE_ID")]
    instance_id: Option<String>,
    /// Overrides `processing.state_dir`.
    #[arg(long, env = "STREAMFOLD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Overrides `kafka.static_membership`: `--static-membership` (or
    /// `=true`) joins the group as a static member named by the instance
    /// id, so a restart within the session timeout keeps its tasks without
    /// a rebalance; `=false` joins as a dynamic member.
    #[arg(long, env = "STREAMFOLD_STATIC_MEMBERSHIP", num_args = 0..=1, default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    static_membership: Option<bool>,
    /// Overrides `processing.threads`: threads that process records
    /// (default: the number of cores).
    #[arg(long, env = "STREAMFOLD_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Serve Prometheus metrics (`/metrics`), liveness (`/healthz`) and
    /// readiness (`/readyz`) on this address (`0.0.0.0:9464`; see
    /// docs/operations.md).
    #[arg(long, env = "STREAMFOLD_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// How long the processing loop may go without a round before
    /// `/healthz` answers 503 (`90s`, `5m`).
    #[arg(long, env = "STREAMFOLD_STALL_TIMEOUT", value_parser = humantime::parse_duration, default_value = "2m")]
    stall_timeout: std::time::Duration,
    /// How long a run stopped by SIGTERM or SIGINT may take to finish its
    /// transaction and leave the group; past it, it exits at once with
    /// status 130, as on a second signal (the broker aborts the open
    /// transaction, which is processed again). Keep it below the
    /// supervisor's own limit (a pod's `terminationGracePeriodSeconds`).
    #[arg(long, env = "STREAMFOLD_STOP_TIMEOUT", value_parser = humantime::parse_duration, default_value = "45s")]
    stop_timeout: std::time::Duration,
    /// Serve interactive queries of the stores' committed state on this
    /// address (`0.0.0.0:8080`; see docs/queries.md). Off by default.
    #[arg(long, env = "STREAMFOLD_QUERY_ADDR")]
    query_addr: Option<SocketAddr>,
    /// The `host:port` other instances use to reach this one's query
    /// server (advertised on `<app>-query-endpoints`); defaults to
    /// `--query-addr`, which must then not be a wildcard address.
    #[arg(
        long,
        env = "STREAMFOLD_QUERY_ADVERTISED_ADDR",
        requires = "query_addr"
    )]
    query_advertised_addr: Option<String>,
    /// The bearer token every query must carry, instead of
    /// `queries.token`. Prefer the environment variable (from a Kubernetes
    /// Secret, say): a flag's value is visible to every local user in the
    /// process list.
    #[arg(long, env = "STREAMFOLD_QUERY_TOKEN", hide_env_values = true)]
    query_token: Option<String>,
    /// Any librdkafka property, applied last: `-X linger.ms=10`.
    #[arg(short = 'X', value_parser = parse_property)]
    property: Vec<(String, String)>,
    /// Testing aid: stamp every produced record with the header
    /// `streamfold.txn: <run id>:<transaction>`.
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true)]
    txn_header: bool,
    /// Testing aid: append `begin`, `committed` and `aborted <run
    /// id>:<transaction>` lines to this file, synced before the
    /// transaction sends anything and after it commits (implies
    /// `--txn-header`).
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true)]
    txn_journal: Option<PathBuf>,
    /// Testing aid: inject faults into the commit cycle (and startup
    /// and rebalances), `<point>:<abort|fatal|kill|freeze|rewind|offsetless>[@n]`, repeated or
    /// comma-separated (points: begin, batch, sent, offsets, commit, acked, committed, restore,
    /// timers, prepare, revoked).
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true, value_delimiter = ',')]
    inject_fault: Vec<streamfold::runtime::commit::Fault>,
}

// `streamfold check`'s arguments (the variant's doc comment is its help).
#[derive(clap::Args)]
struct CheckArgs {
    /// Topology files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Also connect to the cluster and check that it fits: source
    /// topics exist and this principal may describe them, sources are
    /// co-partitioned, existing internal topics agree.
    #[arg(long)]
    cluster: bool,
    /// Overrides `kafka.bootstrap_servers` (with `--cluster`).
    #[arg(long, env = "STREAMFOLD_BOOTSTRAP_SERVERS")]
    bootstrap_servers: Option<String>,
    /// Any librdkafka property (with `--cluster`): `-X security.protocol=ssl`.
    #[arg(short = 'X', value_parser = parse_property)]
    property: Vec<(String, String)>,
}

// `streamfold describe`'s arguments (the variant's doc comment is its help).
#[derive(clap::Args)]
struct DescribeArgs {
    file: PathBuf,
    #[arg(long, value_enum, default_value_t = DescribeFormat::Text)]
    format: DescribeFormat,
}

// `streamfold test`'s arguments (the variant's doc comment is its help).
#[derive(clap::Args)]
struct TestArgs {
    topology: PathBuf,
    /// A case folder (input.jsonl + expected/) or a folder of them.
    cases: PathBuf,
    /// Write the actual outputs as the expected ones instead of
    /// comparing (review the diff before committing).
    #[arg(long)]
    bless: bool,
}

// `streamfold reset`'s arguments (the variant's doc comment is its help).
#[derive(clap::Args)]
struct ResetArgs {
    /// The application's topology.
    topology: PathBuf,
    /// Where the sources start again: `earliest`, `latest`, or an RFC
    /// 3339 time (the first record at or after it).
    #[arg(long, default_value = "earliest")]
    to: streamfold::runtime::reset::ResetTo,
    /// Print the plan; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Overrides `processing.state_dir`.
    #[arg(long, env = "STREAMFOLD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Overrides `kafka.bootstrap_servers`.
    #[arg(long, env = "STREAMFOLD_BOOTSTRAP_SERVERS")]
    bootstrap_servers: Option<String>,
    /// Any librdkafka property: `-X security.protocol=ssl`.
    #[arg(short = 'X', value_parser = parse_property)]
    property: Vec<(String, String)>,
}

// `streamfold dlq replay`'s arguments (the variant's doc comment is its help).
#[derive(clap::Args)]
struct ReplayArgs {
    /// The topology whose dead-letter topic to replay.
    #[arg(required_unless_present = "topology_flag")]
    topology: Option<PathBuf>,
    /// The topology, as a flag (`--topology FILE`, the older spelling).
    #[arg(
        long = "topology",
        value_name = "FILE",
        hide = true,
        conflicts_with = "topology"
    )]
    topology_flag: Option<PathBuf>,
    /// jq condition on the letter (`.` is its value; `$key`,
    /// `$timestamp`, `$headers` include the `streamfold.dlq.*` headers):
    /// only letters it holds for are replayed.
    #[arg(long)]
    filter: Option<String>,
    /// Count what would be replayed; send nothing.
    #[arg(long)]
    dry_run: bool,
    /// Start from the beginning of the dead-letter topic instead of
    /// where the last replay stopped.
    #[arg(long)]
    from_beginning: bool,
    /// Overrides `kafka.bootstrap_servers`.
    #[arg(long, env = "STREAMFOLD_BOOTSTRAP_SERVERS")]
    bootstrap_servers: Option<String>,
    /// Any librdkafka property: `-X security.protocol=ssl`.
    #[arg(short = 'X', value_parser = parse_property)]
    property: Vec<(String, String)>,
}

/// glibc's malloc, which RocksDB and librdkafka use (streamfold's own
/// allocations go to mimalloc), gives each thread that meets contention an
/// arena of its own, up to 8 per core, and memory freed in one stays there.
/// With RocksDB's and librdkafka's threads that kept 28–85 MiB more resident
/// at 10M keys than two arenas do, at the same speed (BENCHMARKS.md,
/// "Memory with 10M keys"). `MALLOC_ARENA_MAX`, when set, still decides.
fn bound_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: called first thing in `main`, before any other thread
        // exists; `mallopt` only sets a tunable of the allocator.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// A mistake in the command's input (a flag's value), as opposed to a
/// failure while it ran: exits with [`ExitClass::Configuration`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ConfigurationError(String);

fn main() -> ExitCode {
    bound_malloc_arenas();
    let cli = Cli::parse();
    logging::init(cli.log_format);
    match run(cli.command, cli.log_format) {
        Ok(class) => exit(class),
        Err(e) => {
            let class = if let Some(error) = e.downcast_ref::<RuntimeError>() {
                ExitClass::of_runtime(error)
            } else if e.downcast_ref::<ConfigurationError>().is_some() {
                ExitClass::Configuration
            } else {
                ExitClass::Failure
            };
            let message = format!("{e:#}");
            let message = secrets::scrub(&message);
            match cli.log_format {
                LogFormat::Text => eprintln!("error: {message}"),
                LogFormat::Json => tracing::error!(
                    error = %message,
                    class = class.name(),
                    exit_code = class.code(),
                    "Fatal error; exiting."
                ),
            }
            exit(class)
        }
    }
}

fn exit(class: ExitClass) -> ExitCode {
    ExitCode::from(class.code())
}

fn parse_property(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected key=value, found `{text}`")),
    }
}

/// Sets `flag` on the first SIGINT/SIGTERM; exits at once on the second,
/// or when the run has not finished `stop_timeout` after the first (a
/// broker that stops answering can hold a commit, an abort or a full
/// producer queue for minutes). Either way the open transaction aborts and
/// is processed again, so nothing is lost: an exit here is a kill -9 as
/// far as the data goes.
fn watch_signals(flag: Arc<AtomicBool>, stop_timeout: std::time::Duration) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        runtime.block_on(async move {
            use tokio::signal::unix::{SignalKind, signal};
            // Both listeners live for the whole run, so a signal that
            // arrives while the other is being handled is not lost.
            let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
                return;
            };
            let mut next_signal = async || {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            };
            next_signal().await;
            // Two signals delivered together (the process was stopped when
            // they came) are two, not one clean stop.
            let together = tokio::time::timeout(std::time::Duration::ZERO, next_signal()).await.is_ok();
            if !together {
                tracing::info!(stop_timeout = %humantime::format_duration(stop_timeout), "Signal received: finishing the current transaction and leaving the group (again to exit at once).");
                flag.store(true, Ordering::Relaxed);
                streamfold::runtime::health::health().stopping();
                tokio::select! {
                    _ = next_signal() => {
                        tracing::warn!("Second signal: exiting now; the open transaction will be aborted and reprocessed.");
                    }
                    _ = tokio::time::sleep(stop_timeout) => {
                        tracing::warn!(stop_timeout = %humantime::format_duration(stop_timeout), "Not stopped within the stop timeout (the broker may not be answering): exiting now; the open transaction will be aborted and reprocessed.");
                    }
                }
            } else {
                tracing::warn!("Second signal: exiting now; the open transaction will be aborted and reprocessed.");
            }
            std::process::exit(i32::from(ExitClass::Interrupted.code()));
        });
    })?;
    Ok(())
}

/// Loads a topology or prints its diagnostics; warnings are printed
/// either way (as log events in JSON). The topology's credentials are
/// registered for masking.
fn load(path: &std::path::Path, format: LogFormat) -> Option<Topology> {
    let print = |d: &topology::Diagnostic, error: bool| match format {
        LogFormat::Text => eprintln!("{d}"),
        LogFormat::Json if error => tracing::error!(
            file = %path.display(),
            line = d.pos.line,
            column = d.pos.col,
            diagnostic = %d,
            "Invalid topology."
        ),
        LogFormat::Json => tracing::warn!(
            file = %path.display(),
            line = d.pos.line,
            column = d.pos.col,
            diagnostic = %d,
            "Topology warning."
        ),
    };
    match topology::load_file(path) {
        Ok(t) => {
            for credential in t.credentials() {
                secrets::register(credential);
            }
            for w in &t.warnings {
                print(w, false);
            }
            Some(t)
        }
        Err(diagnostics) => {
            for d in &diagnostics {
                print(d, true);
            }
            None
        }
    }
}

/// Whether librdkafka takes the topology's client settings; prints what
/// it refuses, at the setting's place in the file.
fn librdkafka_accepts(file: &std::path::Path, t: &Topology, log_format: LogFormat) -> bool {
    let problems = streamfold::runtime::properties_check::librdkafka_problems(t);
    if problems.is_empty() {
        return true;
    }
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let name = file.display().to_string();
    for problem in problems {
        let path: Vec<&str> = problem.path.iter().map(String::as_str).collect();
        let diagnostic = topology::Diagnostic::at_path(
            &name,
            &text,
            &path,
            format!("librdkafka: {}", problem.message),
        );
        match log_format {
            LogFormat::Text => eprintln!("{diagnostic}"),
            LogFormat::Json => tracing::error!(
                file = %name,
                line = diagnostic.pos.line,
                column = diagnostic.pos.col,
                diagnostic = %diagnostic,
                "Invalid topology."
            ),
        }
    }
    false
}

fn run(command: Command, log_format: LogFormat) -> anyhow::Result<ExitClass> {
    match command {
        Command::Run(args) => run_topology(args, log_format),
        Command::Check(args) => check(args, log_format),
        Command::Describe(DescribeArgs { file, format }) => {
            let Some(t) = load(&file, log_format) else {
                return Ok(ExitClass::Configuration);
            };
            print!("{}", describe(&t, format));
            Ok(ExitClass::Success)
        }
        Command::Test(args) => test_cases(args, log_format),
        Command::Dlq {
            command: DlqCommand::Replay(args),
        } => replay_dead_letters(args, log_format),
        Command::Reset(args) => reset_application(args, log_format),
        Command::Schema => {
            let schema = schemars::schema_for!(topology::model::TopologyFile);
            println!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(ExitClass::Success)
        }
    }
}

/// Run a topology until a signal stops it.
fn run_topology(args: RunArgs, log_format: LogFormat) -> anyhow::Result<ExitClass> {
    let RunArgs {
        topology,
        bootstrap_servers,
        instance_id,
        state_dir,
        static_membership,
        threads,
        metrics_addr,
        stall_timeout,
        stop_timeout,
        query_addr,
        query_advertised_addr,
        query_token,
        property,
        #[cfg(feature = "fault-injection")]
        txn_header,
        #[cfg(feature = "fault-injection")]
        txn_journal,
        #[cfg(feature = "fault-injection")]
        inject_fault,
    } = args;
    let Some(t) = load(&topology, log_format) else {
        return Ok(ExitClass::Configuration);
    };
    secrets::register_properties(property.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if let Some(token) = &query_token {
        secrets::register(token);
    }
    streamfold::runtime::health::health().set_stall_timeout(stall_timeout);
    if let Some(addr) = metrics_addr {
        streamfold::runtime::metrics::install(addr).map_err(ConfigurationError)?;
        streamfold::runtime::metrics::register_topology(&t);
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&shutdown), stop_timeout)?;
    let options = RunOptions {
        bootstrap_servers,
        instance_id: instance_id.unwrap_or_else(default_instance_id),
        state_dir,
        static_membership,
        threads: threads.map(usize::from),
        properties: property,
        #[cfg(feature = "fault-injection")]
        hooks: streamfold::runtime::commit::TestHooks {
            stamp: txn_header,
            journal: txn_journal,
            faults: inject_fault,
            ..Default::default()
        },
        #[cfg(not(feature = "fault-injection"))]
        hooks: streamfold::runtime::commit::TestHooks::default(),
        metrics_addr,
        query_addr,
        query_advertised_addr,
        query_token: query_token.map(secrets::Secret::new),
    };
    let admin = streamfold::runtime::settings::admin_config(&t, &options);
    if streamfold::runtime::admin::wait_for_sources(&t, &admin, &shutdown)?
        == streamfold::runtime::admin::SourcesWait::Stopped
    {
        return Ok(ExitClass::Success);
    }
    streamfold::runtime::engine::run(Arc::new(t), options, shutdown)?;
    Ok(ExitClass::Success)
}

/// Checks each file, and with `--cluster` the cluster it names.
fn check(args: CheckArgs, log_format: LogFormat) -> anyhow::Result<ExitClass> {
    let CheckArgs {
        files,
        cluster,
        bootstrap_servers,
        property,
    } = args;
    secrets::register_properties(property.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut failed = false;
    let mut unreachable = None;
    for file in &files {
        match load(file, log_format) {
            Some(t) if !librdkafka_accepts(file, &t, log_format) => failed = true,
            Some(t) => {
                println!(
                    "{}: ok ({} sources, {} nodes, {} sinks, {} internal topics{})",
                    file.display(),
                    t.sources.len(),
                    t.nodes.len(),
                    t.sinks.len(),
                    t.internal_topics().len(),
                    match t.warnings.len() {
                        0 => String::new(),
                        1 => ", 1 warning".to_string(),
                        n => format!(", {n} warnings"),
                    }
                );
                if cluster {
                    let options = RunOptions {
                        bootstrap_servers: bootstrap_servers.clone(),
                        instance_id: default_instance_id(),
                        properties: property.clone(),
                        ..RunOptions::default()
                    };
                    match streamfold::runtime::cluster_check::check_cluster(&t, &options) {
                        Ok(report) if report.problems.is_empty() => println!(
                            "  cluster: ok ({} partitions, {} of {} internal topics exist)",
                            report.partitions.unwrap_or_default(),
                            report.existing_internal,
                            t.internal_topics().len()
                        ),
                        Ok(report) => {
                            failed = true;
                            for problem in &report.problems {
                                eprintln!("{}: cluster: {problem}", file.display());
                            }
                        }
                        Err(error) => {
                            eprintln!("{}: cluster: {error}", file.display());
                            unreachable = Some(ExitClass::of_runtime(&error));
                        }
                    }
                }
                // Shows that `${VAR}`s resolved, passwords masked.
                if let Some(security) = &t.kafka.security {
                    println!("  kafka security: {}", security.summary());
                }
                if let Some(registry) = t.schema_registry() {
                    println!("  schema registry: {}", registry.summary());
                }
                if let Some(addr) = t.queries.addr {
                    let stores: Vec<String> = streamfold::runtime::query::queryable_stores(&t)
                        .into_iter()
                        .map(|s| s.name)
                        .collect();
                    println!(
                        "  queries: http://{addr}/v1/stores{} ({})",
                        t.queries
                            .advertised_addr
                            .as_ref()
                            .map(|a| format!(", advertised as {a}"))
                            .unwrap_or_default(),
                        if stores.is_empty() {
                            "no queryable store".to_string()
                        } else {
                            stores.join(", ")
                        }
                    );
                }
            }
            None => failed = true,
        }
    }
    Ok(match (failed, unreachable) {
        (true, _) => ExitClass::Configuration,
        (false, Some(class)) => class,
        (false, None) => ExitClass::Success,
    })
}

/// Runs the offline cases and prints a line per case.
fn test_cases(args: TestArgs, log_format: LogFormat) -> anyhow::Result<ExitClass> {
    let TestArgs {
        topology,
        cases,
        bless,
    } = args;
    let Some(t) = load(&topology, log_format) else {
        return Ok(ExitClass::Configuration);
    };
    let reports = testkit::run_cases(&Arc::new(t), &cases, bless)
        .with_context(|| format!("running the cases in {}", cases.display()))?;
    let failed = reports.iter().filter(|r| !r.passed()).count();
    for report in &reports {
        let status = if bless {
            "blessed"
        } else if report.passed() {
            "ok"
        } else {
            "FAIL"
        };
        println!(
            "{status:<7} {} ({} records in, {} out)",
            report.name, report.records_in, report.records_out
        );
        for line in report.folding_summary() {
            println!("        {line}");
        }
        for failure in &report.failures {
            for line in failure.lines() {
                println!("        {line}");
            }
        }
    }
    if bless {
        println!(
            "{} cases blessed: review the changes under their expected/ folders",
            reports.len()
        );
        return Ok(ExitClass::Success);
    }
    println!("{} passed, {failed} failed", reports.len() - failed);
    Ok(if failed > 0 {
        ExitClass::Failure
    } else {
        ExitClass::Success
    })
}

/// Sends dead letters back to their sources and says how many.
fn replay_dead_letters(args: ReplayArgs, log_format: LogFormat) -> anyhow::Result<ExitClass> {
    let ReplayArgs {
        topology,
        topology_flag,
        filter,
        dry_run,
        from_beginning,
        bootstrap_servers,
        property,
    } = args;
    // clap requires one of the two.
    let Some(topology) = topology.or(topology_flag) else {
        return Err(ConfigurationError("a topology file is required".into()).into());
    };
    let Some(t) = load(&topology, log_format) else {
        return Ok(ExitClass::Configuration);
    };
    secrets::register_properties(property.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let filter = match filter {
        Some(code) => Some(
            streamfold::operators::expr::Program::compile(&code, &[])
                .map_err(|e| ConfigurationError(format!("--filter: {e}")))?,
        ),
        None => None,
    };
    let options = RunOptions {
        bootstrap_servers,
        instance_id: default_instance_id(),
        properties: property,
        ..RunOptions::default()
    };
    let report = streamfold::runtime::replay::replay(
        &t,
        &options,
        streamfold::runtime::replay::ReplayOptions {
            filter,
            dry_run,
            from_beginning,
        },
    )?;
    let verb = if dry_run { "would replay" } else { "replayed" };
    println!(
        "{verb} {} of {} dead letters from {}",
        report.total_replayed(),
        report.read,
        t.dead_letter_topic
    );
    for (topic, n) in &report.replayed {
        println!("  {n} to {topic}");
    }
    if report.filtered_out > 0 {
        println!("  {} left out by the filter", report.filtered_out);
    }
    if report.filter_errors > 0 {
        println!(
            "  {} on which the filter failed (left in place)",
            report.filter_errors
        );
    }
    if report.no_origin > 0 {
        println!(
            "  {} without a source topic (raised by timers), not replayable",
            report.no_origin
        );
    }
    if report.truncated > 0 {
        println!(
            "  {} cut to fit the dead-letter topic (streamfold.dlq.truncated), not replayable",
            report.truncated
        );
    }
    Ok(ExitClass::Success)
}

/// Starts an application over, or prints the plan.
fn reset_application(args: ResetArgs, log_format: LogFormat) -> anyhow::Result<ExitClass> {
    let ResetArgs {
        topology,
        to,
        dry_run,
        state_dir,
        bootstrap_servers,
        property,
    } = args;
    let Some(t) = load(&topology, log_format) else {
        return Ok(ExitClass::Configuration);
    };
    secrets::register_properties(property.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let options = RunOptions {
        bootstrap_servers,
        instance_id: default_instance_id(),
        state_dir,
        properties: property,
        ..RunOptions::default()
    };
    use streamfold::runtime::reset::{ResetError, reset};
    match reset(&t, &options, to, dry_run) {
        Ok(plan) => {
            println!(
                "{} {}:",
                if dry_run { "Would reset" } else { "Reset" },
                plan.group
            );
            for line in plan.to_string().lines() {
                println!("  {line}");
            }
            Ok(ExitClass::Success)
        }
        Err(ResetError::Runtime(error)) => Err(error.into()),
        Err(error) => Err(error.into()),
    }
}

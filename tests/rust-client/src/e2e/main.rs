//! `rust-e2e`: end-to-end scenarios for a RocketMQ-compatible broker, driven by
//! `rocketmq-client-rust` 1.0.0 (the same program runs against Apache RocketMQ and ringmq).
//!
//! ```text
//! rust-e2e [--namesrv HOST:PORT] [--prefix PREFIX] [--timeout SECS] SCENARIO... | all | features | list
//! ```
//!
//! Each scenario sends over its own fresh topic (`<prefix>-<scenario>-topic`), consumes with
//! its own groups, and checks content, keys, tags and counts exactly; see `scenarios.rs`. The
//! default prefix is `rust-<unix seconds>-<pid>`, unique per run, so runs against a shared
//! broker never see each other's messages or offsets.
//!
//! `features` runs the message-feature scenarios (delay/timer, transactions, SQL92,
//! request-reply); they are not part of `all` either.
//!
//! `broker-restart-1` and `broker-restart-2` are not part of `all`: run them with one
//! `--prefix` and restart the broker in between (scripts/rust-client-tests.sh does).
//!
//! Output: one `PASS`/`FAIL` line per scenario, then `rust-e2e: N passed, N failed`.
//!
//! # Invariants
//!
//! * Exit code: 0 every scenario passed, 1 some failed, 2 the watchdog fired (`--timeout`,
//!   default [`RUN_TIMEOUT_DEFAULT`]), 64 usage error.
//! * Each scenario is bounded by [`SCENARIO_TIMEOUT`]; a scenario that hits it fails, the
//!   others still run.

mod check;
mod harness;
mod scenarios;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context as _;
use anyhow::anyhow;
use rocketmq_client_rust::ClientRuntime;
use rocketmq_client_rust::ClientRuntimeConfig;
use rocketmq_runtime::RuntimeConfig;
use rocketmq_runtime::RuntimeOwner;

/// Whole-run bound unless `--timeout` says otherwise.
const RUN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(600);
/// Bound on one scenario (its individual waits are bounded by `harness::WAIT_MAX`).
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(150);
/// Name server when `--namesrv` is not given.
const NAMESRV_DEFAULT: &str = "127.0.0.1:9876";
/// Longest prefix accepted (topic names are limited to 127 characters by RocketMQ).
const PREFIX_LEN_MAX: usize = 64;
/// Log filter for the client's own logging unless RUST_LOG is set.
const CLIENT_LOG_FILTER: &str = "warn";
/// Exit code of a usage error (BSD's EX_USAGE).
const EXIT_USAGE: u8 = 64;
/// Exit code when the watchdog ends the run.
const EXIT_WATCHDOG: i32 = 2;

const USAGE: &str = "usage: rust-e2e [--namesrv HOST:PORT] [--prefix PREFIX] [--timeout SECS] SCENARIO... | all | features | list";

/// Parsed command line.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    namesrv: String,
    prefix: String,
    timeout: Duration,
    scenarios: Vec<String>,
}

/// Parses the arguments after the program name; `default_prefix` is used without `--prefix`.
fn parse_args(args: &[String], default_prefix: &str) -> Result<Option<Args>, String> {
    let mut namesrv = NAMESRV_DEFAULT.to_string();
    let mut prefix = default_prefix.to_string();
    let mut timeout = RUN_TIMEOUT_DEFAULT;
    let mut scenarios = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |name: &str| {
            rest.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--namesrv" => namesrv = value("--namesrv")?,
            "--prefix" => prefix = value("--prefix")?,
            "--timeout" => {
                let text = value("--timeout")?;
                let seconds: u64 = text
                    .parse()
                    .map_err(|_| format!("--timeout {text:?} is not a number of seconds"))?;
                timeout = Duration::from_secs(seconds);
            }
            "list" => return Ok(None),
            "all" => scenarios.extend(scenarios::SCENARIOS.iter().map(|s| s.to_string())),
            "features" => scenarios.extend(scenarios::FEATURES.iter().map(|s| s.to_string())),
            name if scenarios::SCENARIOS.contains(&name)
                || scenarios::FEATURES.contains(&name)
                || scenarios::BROKER_RESTART_PHASES.contains(&name) =>
            {
                scenarios.push(name.to_string())
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if scenarios.is_empty() {
        return Err("no scenario given".to_string());
    }
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if prefix.is_empty() || prefix.len() > PREFIX_LEN_MAX || !prefix.chars().all(valid) {
        return Err(format!(
            "prefix {prefix:?} must be 1..={PREFIX_LEN_MAX} characters of [A-Za-z0-9_-]"
        ));
    }
    if !namesrv.contains(':') {
        return Err(format!("--namesrv {namesrv:?} is not HOST:PORT"));
    }
    Ok(Some(Args {
        namesrv,
        prefix,
        timeout,
        scenarios,
    }))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let default_prefix = format!("rust-{seconds}-{}", std::process::id());
    let args = match parse_args(&argv, &default_prefix) {
        Ok(Some(args)) => args,
        Ok(None) => {
            for name in scenarios::SCENARIOS {
                println!("{name}");
            }
            for name in scenarios::FEATURES {
                println!("{name} (in features, not in all)");
            }
            for name in scenarios::BROKER_RESTART_PHASES {
                println!("{name} (not in all: restart the broker between the two phases)");
            }
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("rust-e2e: {message}\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let timeout = args.timeout;
    std::thread::spawn(move || {
        std::thread::sleep(timeout);
        eprintln!(
            "rust-e2e: watchdog: the run exceeded {} s",
            timeout.as_secs()
        );
        std::process::exit(EXIT_WATCHDOG);
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("rust-e2e: cannot build the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let failed = runtime.block_on(run(&args));
    // The client runtime keeps background tasks; leave without waiting for them.
    std::process::exit(i32::from(failed != 0));
}

/// Runs the scenarios in order; returns how many failed.
async fn run(args: &Args) -> usize {
    println!(
        "[rust-e2e] name server {}, prefix {}, scenarios {}",
        args.namesrv,
        args.prefix,
        args.scenarios.join(" ")
    );
    let (owner, _telemetry, client_runtime) = match client_runtime() {
        Ok(parts) => parts,
        Err(e) => {
            println!("[rust-e2e] FAIL setup: {e:#}");
            println!("rust-e2e: 0 passed, {} failed", args.scenarios.len());
            return args.scenarios.len();
        }
    };
    let env = harness::Env {
        namesrv: args.namesrv.clone(),
        prefix: args.prefix.clone(),
        runtime: Arc::clone(&client_runtime),
    };
    let mut failed = Vec::new();
    for name in &args.scenarios {
        let started = Instant::now();
        let outcome = tokio::time::timeout(SCENARIO_TIMEOUT, scenarios::run(&env, name))
            .await
            .unwrap_or_else(|_| {
                Err(anyhow!(
                    "did not finish within {} s",
                    SCENARIO_TIMEOUT.as_secs()
                ))
            });
        let seconds = started.elapsed().as_secs_f64();
        match outcome {
            Ok(summary) => println!("[rust-e2e] PASS {name} ({seconds:.1} s): {summary}"),
            Err(e) => {
                println!("[rust-e2e] FAIL {name} ({seconds:.1} s): {e:#}");
                failed.push(name.clone());
            }
        }
    }
    let _ = tokio::time::timeout(harness::CALL_TIMEOUT, client_runtime.shutdown()).await;
    drop(owner);
    if !failed.is_empty() {
        println!("[rust-e2e] failed: {}", failed.join(" "));
    }
    println!(
        "rust-e2e: {} passed, {} failed",
        args.scenarios.len() - failed.len(),
        failed.len()
    );
    failed.len()
}

/// The client runtime, built the way the crate's examples build it.
fn client_runtime() -> anyhow::Result<(
    RuntimeOwner,
    rocketmq_observability::TelemetryRuntimeGuard,
    Arc<ClientRuntime>,
)> {
    let owner = RuntimeOwner::plan(RuntimeConfig {
        thread_name: "rust-e2e".to_string(),
        ..Default::default()
    })
    .map_err(|e| anyhow!("plan client runtime: {e}"))?
    .build()
    .map_err(|e| anyhow!("create client runtime: {e}"))?;
    let mut telemetry_config = rocketmq_observability::TelemetryBootstrapConfig::default();
    // The client logs to stderr; keep it to warnings (RUST_LOG still overrides) and plain text.
    telemetry_config.logging.filter = CLIENT_LOG_FILTER.to_string();
    telemetry_config.logging.console.ansi = false;
    let telemetry = rocketmq_observability::install_global(&telemetry_config)
        .map_err(|e| anyhow!("initialize telemetry: {e}"))?;
    let client_runtime = ClientRuntime::try_new(
        owner.root_context().component("client"),
        ClientRuntimeConfig::default(),
        telemetry.handle(),
    )
    .map_err(|e| anyhow!("{e}"))
    .context("client runtime")?;
    Ok((owner, telemetry, client_runtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn all_expands_to_every_scenario_with_defaults() {
        let args = parse_args(&strings(&["all"]), "rust-1-2").unwrap().unwrap();
        assert_eq!(args.scenarios.len(), scenarios::SCENARIOS.len());
        assert_eq!(args.namesrv, NAMESRV_DEFAULT);
        assert_eq!(args.prefix, "rust-1-2");
        assert_eq!(args.timeout, RUN_TIMEOUT_DEFAULT);
    }

    #[test]
    fn options_and_named_scenarios_are_read() {
        let argv = strings(&[
            "--namesrv",
            "127.0.0.1:24001",
            "--prefix",
            "rust-x",
            "--timeout",
            "90",
            "sync",
            "retry",
        ]);
        let args = parse_args(&argv, "unused").unwrap().unwrap();
        assert_eq!(args.namesrv, "127.0.0.1:24001");
        assert_eq!(args.prefix, "rust-x");
        assert_eq!(args.timeout, Duration::from_secs(90));
        assert_eq!(args.scenarios, strings(&["sync", "retry"]));
    }

    #[test]
    fn broker_restart_phases_are_named_not_in_all() {
        let all = parse_args(&strings(&["all"]), "p").unwrap().unwrap();
        assert!(
            !all.scenarios
                .iter()
                .any(|s| s.starts_with("broker-restart"))
        );
        let phases = parse_args(&strings(&["broker-restart-1"]), "p")
            .unwrap()
            .unwrap();
        assert_eq!(phases.scenarios, strings(&["broker-restart-1"]));
    }

    #[test]
    fn features_expands_to_the_feature_scenarios_which_all_leaves_out() {
        let features = parse_args(&strings(&["features"]), "p").unwrap().unwrap();
        assert_eq!(
            features.scenarios,
            strings(&["delay", "transaction", "sql92", "request-reply"])
        );
        let all = parse_args(&strings(&["all"]), "p").unwrap().unwrap();
        assert!(!all.scenarios.iter().any(|s| features.scenarios.contains(s)));
        let one = parse_args(&strings(&["sql92"]), "p").unwrap().unwrap();
        assert_eq!(one.scenarios, strings(&["sql92"]));
    }

    #[test]
    fn list_needs_no_scenario() {
        assert_eq!(parse_args(&strings(&["list"]), "p"), Ok(None));
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        for argv in [
            vec![],
            vec!["nope"],
            vec!["--namesrv"],
            vec!["--timeout", "soon", "sync"],
            vec!["--prefix", "has space", "sync"],
            vec!["--prefix", "", "sync"],
            vec!["--namesrv", "localhost", "sync"],
        ] {
            assert!(
                parse_args(&strings(&argv), "p").is_err(),
                "{argv:?} accepted"
            );
        }
    }
}

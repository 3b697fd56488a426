//! The `ringmq` binary.
//!
//! - `ringmq namesrv [--listen-port 9876] [--bind 127.0.0.1]` runs the name
//!   server alone, on the io_uring remoting server.
//! - `ringmq broker [-c FILE] [-n ADDR] [--print-config] [--KEY=VALUE ...]`
//!   (also plain `ringmq ...`) loads the broker configuration as `mqbroker`
//!   does. With `--print-config` it prints the effective configuration
//!   (with the changes UPDATE_BROKER_CONFIG kept in the store);
//!   without, it runs the broker (`shard::runtime`) until SIGTERM/SIGINT.
//!
//! `--KEY=VALUE` arguments whose key is not one of the flags above are
//! configuration overrides in RocketMQ's spelling (`--listenPort=10911`);
//! clap cannot describe "any other long flag", so they are taken out of the
//! argument list before clap parses the rest.
//!
//! Errors print their whole chain (`{:#}`) and exit with status 1.

use std::ffi::OsString;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use ringmq_broker::config::{
    BrokerConfig, ConfigEnvironment, NAMESRV_DIR_NAME, NAMESRV_LISTEN_PORT_DEFAULT, parse_override,
    pick_broker_ip1,
};
use ringmq_broker::namesrv::{NameServer, NameServerSettings};
use ringmq_broker::persist::ConfigFile;
use ringmq_broker::server::{NameServerHandler, Server, ServerConfig, open_kv_config, signal};

/// mimalloc instead of glibc's malloc: with glibc, a shard freeing a buffer
/// another shard allocated (a forwarded request's body, a response for a
/// connection of another shard) takes that shard's arena lock, and the
/// shards sat in `futex` on each other's arenas thousands of times a
/// second under load (docs/architecture.md, Allocation).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// ringmq: a RocketMQ-compatible message broker on io_uring.
#[derive(Parser)]
#[command(
    name = "ringmq",
    version,
    about,
    args_conflicts_with_subcommands = true,
    after_help = "Without a subcommand, ringmq runs `broker`. Broker configuration keys can be \
                  overridden with --KEY=VALUE in RocketMQ's spelling, e.g. --listenPort=10911."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    broker: BrokerArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker (the default).
    Broker(BrokerArgs),
    /// Run the name server alone.
    Namesrv(NamesrvArgs),
}

#[derive(Args, Default)]
struct BrokerArgs {
    /// broker.conf properties file, as `mqbroker -c`.
    #[arg(short = 'c', long = "config-file", value_name = "FILE")]
    config_file: Option<PathBuf>,
    /// Name server addresses (`host:port;host:port`), as `mqbroker -n`.
    #[arg(short = 'n', long = "namesrv-addr", value_name = "ADDR")]
    namesrv_addr: Option<String>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
}

#[derive(Args)]
struct NamesrvArgs {
    /// Port to listen on (0: let the kernel pick one; the boot line says which).
    #[arg(long, default_value_t = NAMESRV_LISTEN_PORT_DEFAULT)]
    listen_port: u16,
    /// Address to listen on (0.0.0.0 to serve other hosts).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// The KV configuration file, as Java's kvConfigPath (default
    /// $HOME/namesrv/kvConfig.json); it must be called kvConfig.json.
    #[arg(long, value_name = "PATH")]
    kv_config_path: Option<PathBuf>,
}

/// Long flags clap knows; any other `--name[=value]` of the broker is a
/// configuration override.
const CLAP_LONG_FLAGS: &[&str] = &[
    "help",
    "version",
    "config-file",
    "namesrv-addr",
    "print-config",
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ringmq: error: {}", error_chain(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, `a: b: c`, leaving out a cause its parent's
/// message already ends with (many errors here print their source).
fn error_chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if text.ends_with(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    text
}

fn run() -> anyhow::Result<()> {
    // Before any thread exists, so that every thread inherits the mask and
    // only the signal thread ever takes SIGTERM/SIGINT.
    signal::block_termination_signals().context("blocking SIGTERM and SIGINT")?;
    init_logging();
    let (arguments, overrides) = split_overrides(std::env::args_os().collect());
    let cli = Cli::parse_from(arguments);
    match cli.command {
        Some(Command::Namesrv(args)) => run_namesrv(&args),
        Some(Command::Broker(args)) => run_broker(&args, &overrides),
        None => run_broker(&cli.broker, &overrides),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Separates the broker's `--KEY=VALUE` overrides from what clap parses.
/// The name server's arguments are left alone.
fn split_overrides(arguments: Vec<OsString>) -> (Vec<OsString>, Vec<String>) {
    let is_namesrv = arguments.get(1).is_some_and(|first| first == "namesrv");
    if is_namesrv {
        return (arguments, Vec::new());
    }
    let mut kept = Vec::with_capacity(arguments.len());
    let mut overrides = Vec::new();
    for argument in arguments {
        let text = argument.to_str().unwrap_or_default();
        let name = text
            .strip_prefix("--")
            .map(|rest| rest.split_once('=').map_or(rest, |(name, _)| name));
        match name {
            Some(name) if !name.is_empty() && !CLAP_LONG_FLAGS.contains(&name) => {
                overrides.push(text.to_owned());
            }
            _ => kept.push(argument),
        }
    }
    (kept, overrides)
}

fn run_namesrv(args: &NamesrvArgs) -> anyhow::Result<()> {
    let listen_addr = SocketAddr::new(args.bind, args.listen_port);
    let kv_config_path = args.kv_config_path.clone().unwrap_or_else(|| {
        config_environment()
            .home_dir
            .join(NAMESRV_DIR_NAME)
            .join(ConfigFile::KvConfig.file_name())
    });
    let (kv_config, persister) = open_kv_config(&kv_config_path)
        .with_context(|| format!("opening {}", kv_config_path.display()))?;
    let handler = NameServerHandler::with_kv_persister(
        NameServer::with_kv_config(NameServerSettings::default(), kv_config),
        persister,
    );
    let server = Server::bind(ServerConfig::new(listen_addr), handler)
        .context("starting the name server")?;
    server.handler().wake_on_kv_written(server.waker());
    signal::spawn_signal_thread(server.shutdown_handle()).context("starting the signal thread")?;
    // Java's mqnamesrv prints this line; scripts and tests wait for it (and
    // read the port from it when started with --listen-port 0).
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "The Name Server boot success. serializeType=JSON, address {}",
        server.local_addr()
    )
    .and_then(|()| stdout.flush())
    .context("writing the boot line")?;
    drop(stdout);
    tracing::info!(addr = %server.local_addr(), kv_config = %kv_config_path.display(), "name server listening");
    let handler = server.run().context("running the name server")?;
    if let Some(persister) = handler.into_kv_persister() {
        persister
            .flush_and_stop()
            .with_context(|| format!("writing {}", kv_config_path.display()))?;
    }
    Ok(())
}

fn run_broker(args: &BrokerArgs, overrides: &[String]) -> anyhow::Result<()> {
    let pairs = overrides
        .iter()
        .map(|argument| parse_override(argument))
        .collect::<Result<Vec<_>, _>>()
        .context("reading the command line")?;
    let file = match &args.config_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the configuration file {}", path.display()))?;
            Some((path.display().to_string(), text))
        }
        None => None,
    };
    let env = config_environment();
    let config = BrokerConfig::load(
        &env,
        file.as_ref()
            .map(|(path, text)| (path.as_str(), text.as_str())),
        &pairs,
        args.namesrv_addr.as_deref(),
    )
    .context("loading the broker configuration")?;
    if args.print_config {
        // What the broker would run with, UPDATE_BROKER_CONFIG's changes
        // kept in the store included.
        let config = ringmq_broker::shard::runtime::effective_config(config)
            .context("applying the configuration changed at runtime")?;
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(config.print_config().as_bytes())
            .and_then(|()| stdout.flush())
            .context("printing the configuration")?;
        return Ok(());
    }
    ringmq_broker::shard::runtime::run(config).context("running the broker")
}

fn config_environment() -> ConfigEnvironment {
    let home_dir = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    let cpu_count = std::thread::available_parallelism()
        .map_or(1, |count| u32::try_from(count.get()).unwrap_or(u32::MAX));
    ConfigEnvironment {
        home_dir,
        cpu_count,
        broker_ip1: pick_broker_ip1(&interface_addrs()),
    }
}

/// The IP addresses of the machine's interfaces, in `getifaddrs` order
/// (empty when it fails: the default address is then 127.0.0.1).
fn interface_addrs() -> Vec<IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `list`, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut addrs = Vec::new();
    let mut cursor = list;
    while !cursor.is_null() {
        // SAFETY: `cursor` is a node of the list getifaddrs returned, which
        // stays valid until freeifaddrs.
        let node = unsafe { &*cursor };
        if !node.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr whose family field says
            // which concrete type it is.
            let family = i32::from(unsafe { (*node.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: AF_INET: the sockaddr is a sockaddr_in.
                let sin = unsafe { &*node.ifa_addr.cast::<libc::sockaddr_in>() };
                addrs.push(IpAddr::from(
                    u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                ));
            } else if family == libc::AF_INET6 {
                // SAFETY: AF_INET6: the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*node.ifa_addr.cast::<libc::sockaddr_in6>() };
                addrs.push(IpAddr::from(sin6.sin6_addr.s6_addr));
            }
        }
        cursor = node.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    addrs
}

#[cfg(test)]
mod tests {
    use super::error_chain;
    use ringmq_broker::persist::PersistError;

    #[test]
    fn error_chain_leaves_out_a_cause_its_parent_already_prints() {
        let persist = PersistError::Io {
            operation: "write",
            path: "/store/config/topics.json.tmp".into(),
            source: std::io::Error::from_raw_os_error(28),
        };
        let error = anyhow::Error::new(persist).context("running the broker");
        assert_eq!(
            error_chain(&error),
            "running the broker: write /store/config/topics.json.tmp: \
             No space left on device (os error 28)"
        );
        let plain = anyhow::anyhow!("no source").context("outer");
        assert_eq!(error_chain(&plain), "outer: no source");
    }
}

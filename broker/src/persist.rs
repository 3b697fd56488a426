//! The broker's config files under `<storePathRootDir>/config/`: loading them
//! at startup and writing them atomically from one background thread.
//!
//! [`ConfigDir`] is the synchronous part: [`ConfigDir::load`] reads a file,
//! falling back to its `.bak` as Java's `ConfigManager.load` does, and
//! [`ConfigDir::write_atomic`] replaces a file so that a crash at any point
//! leaves either the old or the new content in place:
//!
//! ```text
//! 1. write  <file>.tmp, fsync it        crash here: <file> is untouched, .tmp is ignored
//! 2. copy   <file> to <file>.bak, fsync crash here: <file> is untouched
//! 3. rename <file>.tmp over <file>      atomic (rename(2)): old or new, never a mix
//! 4. fsync  the directory               the rename itself is durable
//! ```
//!
//! Java's `MixAll.string2File` does steps 1–3 without the fsyncs and deletes
//! `<file>` before renaming, so a crash between the two leaves only the
//! `.bak`; here the rename replaces the file in one step.
//!
//! [`Persister`] owns the writing thread (`ringmq-persist`), because file I/O
//! must never run on a shard thread. Shards hand content to a
//! [`PersisterHandle`]: [`PersisterHandle::write`] for whole files and
//! [`PersisterHandle::offsets`] for one shard's share of
//! `consumerOffset.json`. Neither blocks on I/O: content goes into a slot (one
//! per file, one per shard for offsets) guarded by a mutex that the thread
//! holds only to swap slots, never while writing.
//! [`PersisterHandle::write`] returns a [`WriteTicket`]; its
//! [`TicketState`] says when that content (or newer content of the file) is
//! on disk, and [`PersisterHandle::on_batch_done`] wakes whoever waits for it
//! (shard 0 holds the answers of topic and group changes until then).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ringmq_broker::persist::{ConfigDir, ConfigFile, Persister};
//! use ringmq_broker::topic_config::{TopicConfigSettings, TopicConfigTable};
//!
//! let dir = ConfigDir::under_store_root(std::path::Path::new("/data/store"));
//! let mut topics = TopicConfigTable::new(TopicConfigSettings::default(), 0);
//! // The file, else its .bak when the file is missing, empty or undecodable.
//! dir.load_with(ConfigFile::Topics, |content| topics.load(content))?;
//! let persister = Persister::spawn(dir)?;
//! persister.write(ConfigFile::Topics, topics.encode_file()); // from any thread
//! persister.flush_and_stop()?; // on shutdown
//! # Ok(())
//! # }
//! ```
//!
//! # Invariants
//!
//! - Memory is bounded: at most one pending content per [`ConfigFile`] and one
//!   offset table per shard; newer content replaces older (coalescing).
//! - Content is never silently dropped: a failed write keeps its slot filled
//!   (unless newer content arrived) and is retried on the next wake-up or
//!   after [`PERSIST_RETRY_INTERVAL_MS`]; every failure is counted and the
//!   latest one kept in [`PersisterStatus::last_error`].
//! - `<file>.tmp` is never read; a leftover one is overwritten by the next
//!   write.
//! - An empty file counts as missing, and empty content is never written.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ringmq_protocol::json::{ConsumerOffsetFile, DataVersion, JSON_INPUT_SIZE_MAX};

/// Name of the config directory under the store root (Java's
/// `StorePathConfigHelper`: `<storePathRootDir>/config`).
pub const CONFIG_DIR_NAME: &str = "config";

/// Suffix of the previous content kept by every write (`MixAll.string2File`).
pub const BACKUP_SUFFIX: &str = ".bak";

/// Suffix of the file being written before it is renamed into place.
pub const TEMP_SUFFIX: &str = ".tmp";

/// Largest config file read: the JSON parser refuses anything larger anyway.
pub const CONFIG_FILE_SIZE_MAX: u64 = JSON_INPUT_SIZE_MAX as u64;

/// How long a failed write waits before it is retried when nothing new
/// arrives in the meantime.
pub const PERSIST_RETRY_INTERVAL_MS: u64 = 1_000;

/// Name of the persisting thread.
pub const PERSIST_THREAD_NAME: &str = "ringmq-persist";

const _: () = assert!(CONFIG_FILE_SIZE_MAX >= 1024 * 1024);
const _: () = assert!(PERSIST_RETRY_INTERVAL_MS > 0);

/// One of the broker's config files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigFile {
    /// `topics.json` (`TopicConfigManager`).
    Topics,
    /// `subscriptionGroup.json` (`SubscriptionGroupManager`).
    SubscriptionGroups,
    /// `consumerOffset.json` (`ConsumerOffsetManager`).
    ConsumerOffsets,
    /// `delayOffset.json` (`ScheduleMessageService`).
    DelayOffsets,
    /// `timerProgress.json` (ringmq: the timer wheel's progress; Java keeps
    /// its own timer log and checkpoint instead).
    TimerProgress,
    /// `kvConfig.json` (the name server's `KVConfigManager`), written by the
    /// name server's own persister into the directory of its
    /// `kvConfigPath`, not into a store's `config/`.
    KvConfig,
    /// `brokerConfigUpdates.properties` (ringmq): the keys UPDATE_BROKER_CONFIG
    /// changed, applied over the configuration file and the command line at
    /// the next start (Java rewrites its configuration file instead).
    BrokerConfigUpdates,
}

impl ConfigFile {
    /// Every config file, in slot order.
    pub const ALL: [ConfigFile; 7] = [
        ConfigFile::Topics,
        ConfigFile::SubscriptionGroups,
        ConfigFile::ConsumerOffsets,
        ConfigFile::DelayOffsets,
        ConfigFile::TimerProgress,
        ConfigFile::KvConfig,
        ConfigFile::BrokerConfigUpdates,
    ];

    /// The file's name as RocketMQ spells it.
    pub fn file_name(self) -> &'static str {
        match self {
            ConfigFile::Topics => "topics.json",
            ConfigFile::SubscriptionGroups => "subscriptionGroup.json",
            ConfigFile::ConsumerOffsets => "consumerOffset.json",
            ConfigFile::DelayOffsets => "delayOffset.json",
            ConfigFile::TimerProgress => "timerProgress.json",
            ConfigFile::KvConfig => "kvConfig.json",
            ConfigFile::BrokerConfigUpdates => "brokerConfigUpdates.properties",
        }
    }

    fn slot(self) -> usize {
        match self {
            ConfigFile::Topics => 0,
            ConfigFile::SubscriptionGroups => 1,
            ConfigFile::ConsumerOffsets => 2,
            ConfigFile::DelayOffsets => 3,
            ConfigFile::TimerProgress => 4,
            ConfigFile::KvConfig => 5,
            ConfigFile::BrokerConfigUpdates => 6,
        }
    }
}

/// A config file could not be read, decoded or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file system call failed; the error keeps the errno.
    #[error("{operation} {}: {source}", path.display())]
    Io {
        /// What was being done ("write", "fsync", "rename", ...).
        operation: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause, with its errno.
        #[source]
        source: io::Error,
    },
    /// A file larger than [`CONFIG_FILE_SIZE_MAX`].
    #[error("{} is {size} bytes, more than the {max}-byte limit", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// Empty content was handed to a write; an empty file would read as
    /// missing, so it is refused.
    #[error("refusing to write empty content to {}", path.display())]
    EmptyContent {
        /// The file that would have been written.
        path: PathBuf,
    },
    /// Neither the file nor its backup decodes.
    #[error("{} does not decode: {message}", path.display())]
    Decode {
        /// The last file tried (the `.bak` when there is one).
        path: PathBuf,
        /// The decoder's error.
        message: String,
    },
    /// The persist thread could not be started.
    #[error("starting the {PERSIST_THREAD_NAME} thread: {0}")]
    Spawn(#[source] io::Error),
    /// The persist thread panicked; what was pending is not on disk.
    #[error("the {PERSIST_THREAD_NAME} thread panicked; pending config files were not written")]
    WriterPanicked,
    /// `flush_and_stop` was already called through another handle.
    #[error("the {PERSIST_THREAD_NAME} thread was already stopped")]
    AlreadyStopped,
}

fn io_error(operation: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PersistError {
    let path = path.to_path_buf();
    move |source| PersistError::Io {
        operation,
        path,
        source,
    }
}

/// The `config/` directory of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigDir {
    path: PathBuf,
}

impl ConfigDir {
    /// The directory at `path`; nothing is touched until a load or write.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// `<store_root>/config`.
    pub fn under_store_root(store_root: &Path) -> Self {
        Self::new(store_root.join(CONFIG_DIR_NAME))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `file` in this directory.
    pub fn file_path(&self, file: ConfigFile) -> PathBuf {
        self.path.join(file.file_name())
    }

    /// The path of `file`'s backup (`<file>.bak`).
    pub fn backup_path(&self, file: ConfigFile) -> PathBuf {
        self.path
            .join(format!("{}{BACKUP_SUFFIX}", file.file_name()))
    }

    /// The path `file` is written to before the rename (`<file>.tmp`).
    pub fn temp_path(&self, file: ConfigFile) -> PathBuf {
        self.path.join(format!("{}{TEMP_SUFFIX}", file.file_name()))
    }

    /// The content of `file`, else of its `.bak`, else `None`. A file that
    /// exists but is empty counts as missing. `<file>.tmp` is never read: it
    /// may be a write cut short by a crash.
    ///
    /// # Errors
    ///
    /// [`PersistError::Io`] when a file exists but cannot be read (unlike
    /// Java, which then falls back to the `.bak`: loading older content and
    /// writing it back later would silently undo changes), and
    /// [`PersistError::TooLarge`].
    pub fn load(&self, file: ConfigFile) -> Result<Option<Vec<u8>>, PersistError> {
        if let Some(content) = read_if_present(&self.file_path(file))? {
            return Ok(Some(content));
        }
        read_if_present(&self.backup_path(file))
    }

    /// Loads `file` and decodes it with `decode`, as Java's
    /// `ConfigManager.load` does: the file, and if it is missing, empty or
    /// does not decode, its `.bak`. `Ok(None)` when neither exists.
    ///
    /// # Errors
    ///
    /// [`PersistError::Decode`] when the content found does not decode
    /// (naming the last file tried), and the errors of [`ConfigDir::load`].
    pub fn load_with<T, E: std::fmt::Display>(
        &self,
        file: ConfigFile,
        mut decode: impl FnMut(&[u8]) -> Result<T, E>,
    ) -> Result<Option<T>, PersistError> {
        let main_path = self.file_path(file);
        let mut failure = None;
        if let Some(content) = read_if_present(&main_path)? {
            match decode(&content) {
                Ok(value) => return Ok(Some(value)),
                Err(error) => {
                    tracing::warn!(
                        path = %main_path.display(),
                        %error,
                        "config file does not decode; trying its backup"
                    );
                    failure = Some((main_path, error.to_string()));
                }
            }
        }
        let backup_path = self.backup_path(file);
        match read_if_present(&backup_path)? {
            Some(content) => match decode(&content) {
                Ok(value) => {
                    tracing::warn!(path = %backup_path.display(), "loaded config from backup");
                    Ok(Some(value))
                }
                Err(error) => Err(PersistError::Decode {
                    path: backup_path,
                    message: error.to_string(),
                }),
            },
            None => match failure {
                Some((path, message)) => Err(PersistError::Decode { path, message }),
                None => Ok(None),
            },
        }
    }

    /// Replaces `file` with `content` so that a crash leaves the old or the
    /// new content: `<file>.tmp` written and fsynced, the previous non-empty
    /// content copied to `<file>.bak` and fsynced, the tmp renamed over the
    /// file, the directory fsynced. Creates the directory (and fsyncs its
    /// parent) if needed. A file that already holds `content` is left as
    /// it is.
    ///
    /// # Errors
    ///
    /// [`PersistError::EmptyContent`], or [`PersistError::Io`] naming the
    /// step and path that failed; the file then still holds its old content.
    pub fn write_atomic(&self, file: ConfigFile, content: &[u8]) -> Result<(), PersistError> {
        let path = self.file_path(file);
        if content.is_empty() {
            return Err(PersistError::EmptyContent { path });
        }
        let previous = read_if_present(&path)?;
        // The same content: nothing to write (the shutdown hands in every
        // file, changed or not; on a full disk the write would only fail).
        if previous.as_deref() == Some(content) {
            return Ok(());
        }
        self.ensure_dir()?;
        let temp_path = self.temp_path(file);
        write_synced(&temp_path, content)?;
        if let Some(previous) = previous {
            write_synced(&self.backup_path(file), &previous)?;
        }
        fs::rename(&temp_path, &path).map_err(io_error("rename tmp over", &path))?;
        sync_dir(&self.path)
    }

    fn ensure_dir(&self) -> Result<(), PersistError> {
        if self.path.is_dir() {
            return Ok(());
        }
        fs::create_dir_all(&self.path).map_err(io_error("create directory", &self.path))?;
        // The new directory's entry lives in its parent.
        match self.path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
            _ => Ok(()),
        }
    }
}

/// The whole file, or `None` when it is missing or empty.
fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    let mut handle = match File::open(path) {
        Ok(handle) => handle,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("open", path)(error)),
    };
    let size = handle.metadata().map_err(io_error("stat", path))?.len();
    if size > CONFIG_FILE_SIZE_MAX {
        return Err(PersistError::TooLarge {
            path: path.to_path_buf(),
            size,
            max: CONFIG_FILE_SIZE_MAX,
        });
    }
    let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // The size may change under us; never read past the limit.
    Read::by_ref(&mut handle)
        .take(CONFIG_FILE_SIZE_MAX + 1)
        .read_to_end(&mut content)
        .map_err(io_error("read", path))?;
    if content.len() as u64 > CONFIG_FILE_SIZE_MAX {
        return Err(PersistError::TooLarge {
            path: path.to_path_buf(),
            size: content.len() as u64,
            max: CONFIG_FILE_SIZE_MAX,
        });
    }
    Ok(if content.is_empty() {
        None
    } else {
        Some(content)
    })
}

fn write_synced(path: &Path, content: &[u8]) -> Result<(), PersistError> {
    let mut handle = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(io_error("create", path))?;
    handle.write_all(content).map_err(io_error("write", path))?;
    handle.sync_all().map_err(io_error("fsync", path))
}

fn sync_dir(path: &Path) -> Result<(), PersistError> {
    File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(io_error("fsync directory", path))
}

/// Merges shards' offset files into one: every shard's offsets (queue ids
/// are disjoint across shards; on overlap the later file wins, which the
/// persister iterates in shard id order) and the newest data version by
/// (counter, timestamp).
pub fn merge_offset_files<'a>(
    shards: impl IntoIterator<Item = &'a ConsumerOffsetFile>,
) -> ConsumerOffsetFile {
    let mut merged = ConsumerOffsetFile::default();
    for file in shards {
        for (key, queues) in &file.offset_table {
            merged
                .offset_table
                .entry(key.clone())
                .or_default()
                .extend(queues.iter().map(|(&queue_id, &offset)| (queue_id, offset)));
        }
        merged.data_version = newer_version(merged.data_version, file.data_version);
    }
    merged
}

fn newer_version(a: Option<DataVersion>, b: Option<DataVersion>) -> Option<DataVersion> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if (b.counter, b.timestamp) > (a.counter, a.timestamp) {
            b
        } else {
            a
        }),
        (a, None) => a,
        (None, b) => b,
    }
}

/// What the persist thread has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersisterStatus {
    /// Files written successfully.
    pub writes_completed: u64,
    /// Writes that failed (each retry counts again).
    pub write_errors: u64,
    /// Contents replaced by newer ones before they were written.
    pub writes_coalesced: u64,
    /// Contents handed in after the thread stopped; they are not written.
    pub writes_after_stop: u64,
    /// Files whose newest content is not on disk because its write failed.
    pub files_failing: usize,
    /// The latest write error, with path and errno.
    pub last_error: Option<String>,
}

/// One [`PersisterHandle::write`]: which file, and the hand-in's
/// generation. Ask [`PersisterHandle::ticket_state`] whether that content
/// (or newer content of the same file) is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTicket {
    file: ConfigFile,
    generation: u64,
}

impl WriteTicket {
    /// The file the ticket's content goes to.
    pub fn file(&self) -> ConfigFile {
        self.file
    }
}

/// Where a [`WriteTicket`]'s content is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketState {
    /// Not written yet.
    Pending,
    /// On disk (fsynced and renamed into place): that content or newer.
    Written,
    /// The latest attempt failed; the content stays pending and is retried.
    /// The error names the step, path and errno.
    Failed(String),
}

/// What a file's slot knows about its writes, by generation.
#[derive(Debug, Default, Clone)]
struct FileProgress {
    /// Newest generation on disk.
    written: u64,
    /// Newest generation whose write failed, and why.
    failed: Option<(u64, String)>,
}

/// Called by the persist thread after each batch it tried; see
/// [`PersisterHandle::on_batch_done`].
#[derive(Clone)]
struct BatchDone(Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for BatchDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchDone")
    }
}

/// Everything waiting for the thread, behind one mutex.
#[derive(Debug, Default)]
struct Pending {
    /// Content waiting per file, with the generation it was handed in at.
    files: [Option<(u64, Vec<u8>)>; ConfigFile::ALL.len()],
    progress: [FileProgress; ConfigFile::ALL.len()],
    batch_done: Option<BatchDone>,
    /// Latest offsets per shard; kept after writing, since every write of
    /// `consumerOffset.json` merges all shards.
    shard_offsets: BTreeMap<u16, Arc<ConsumerOffsetFile>>,
    offsets_dirty: bool,
    /// Bumped by every hand-in, so the thread tells new content from
    /// failed writes waiting for their retry.
    generation: u64,
    stopping: bool,
    status: PersisterStatus,
}

impl Pending {
    fn has_work(&self) -> bool {
        self.offsets_dirty || self.files.iter().any(Option::is_some)
    }
}

#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic while holding the lock leaves plain data behind, still
        // consistent slot by slot; keep persisting what can be persisted.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The persist thread's state: the directory it writes.
#[derive(Debug)]
pub struct Persister {
    dir: ConfigDir,
    shared: Arc<Shared>,
}

/// A batch taken from the slots: file contents with their generations, and
/// shard offsets to merge.
type Batch = (
    Vec<(ConfigFile, u64, Vec<u8>)>,
    Option<Vec<Arc<ConsumerOffsetFile>>>,
);

impl Persister {
    /// Starts the `ringmq-persist` thread writing into `dir`.
    ///
    /// # Errors
    ///
    /// [`PersistError::Spawn`] when the OS refuses a new thread.
    pub fn spawn(dir: ConfigDir) -> Result<PersisterHandle, PersistError> {
        let shared = Arc::new(Shared::default());
        let persister = Persister {
            dir,
            shared: Arc::clone(&shared),
        };
        let join = thread::Builder::new()
            .name(PERSIST_THREAD_NAME.to_owned())
            .spawn(move || persister.run())
            .map_err(PersistError::Spawn)?;
        Ok(PersisterHandle {
            inner: Arc::new(HandleInner {
                shared,
                join: Mutex::new(Some(join)),
            }),
        })
    }

    /// Writes until stopped; returns the first error of the final flush.
    fn run(self) -> Result<(), PersistError> {
        let retry = Duration::from_millis(PERSIST_RETRY_INTERVAL_MS);
        let mut seen_generation = 0;
        loop {
            let (batch, stopping) = {
                let mut pending = self.shared.lock();
                loop {
                    if pending.stopping {
                        break;
                    }
                    if pending.has_work() && pending.generation != seen_generation {
                        break;
                    }
                    if pending.has_work() {
                        // Only failed writes are left: retry them later.
                        let (guard, timeout) = self
                            .shared
                            .wake
                            .wait_timeout(pending, retry)
                            .unwrap_or_else(PoisonError::into_inner);
                        pending = guard;
                        if timeout.timed_out() {
                            break;
                        }
                    } else {
                        pending = self
                            .shared
                            .wake
                            .wait(pending)
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                }
                seen_generation = pending.generation;
                (take_batch(&mut pending), pending.stopping)
            };
            let result = self.write_batch(batch);
            let batch_done = self.shared.lock().batch_done.clone();
            if let Some(BatchDone(batch_done)) = batch_done {
                batch_done();
            }
            if stopping {
                return result;
            }
        }
    }

    /// Writes a batch; failed contents go back into their slots unless newer
    /// content arrived. Returns the first error.
    fn write_batch(&self, (files, offsets): Batch) -> Result<(), PersistError> {
        let mut outcomes = Vec::with_capacity(files.len() + 1);
        for (file, generation, content) in files {
            let result = self.dir.write_atomic(file, &content);
            outcomes.push((file, generation, content, result));
        }
        let offsets_result = offsets.map(|shards| {
            let merged = merge_offset_files(shards.iter().map(Arc::as_ref));
            let mut content = Vec::new();
            merged.write_pretty(&mut content);
            self.dir.write_atomic(ConfigFile::ConsumerOffsets, &content)
        });

        let mut first_error = None;
        let mut failures = 0;
        let mut pending = self.shared.lock();
        for (file, generation, content, result) in outcomes {
            match result {
                Ok(()) => {
                    pending.status.writes_completed += 1;
                    let progress = &mut pending.progress[file.slot()];
                    progress.written = progress.written.max(generation);
                }
                Err(error) => {
                    let slot = &mut pending.files[file.slot()];
                    if slot.is_none() {
                        *slot = Some((generation, content));
                    }
                    pending.progress[file.slot()].failed = Some((generation, error.to_string()));
                    record_failure(&mut pending.status, &error);
                    failures += 1;
                    first_error.get_or_insert(error);
                }
            }
        }
        match offsets_result {
            Some(Ok(())) => pending.status.writes_completed += 1,
            Some(Err(error)) => {
                pending.offsets_dirty = true;
                record_failure(&mut pending.status, &error);
                failures += 1;
                first_error.get_or_insert(error);
            }
            None => {}
        }
        pending.status.files_failing = failures;
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

fn take_batch(pending: &mut Pending) -> Batch {
    let files = ConfigFile::ALL
        .iter()
        .filter_map(|&file| {
            pending.files[file.slot()]
                .take()
                .map(|(generation, content)| (file, generation, content))
        })
        .collect();
    let offsets = if std::mem::take(&mut pending.offsets_dirty) {
        Some(pending.shard_offsets.values().cloned().collect())
    } else {
        None
    };
    (files, offsets)
}

fn record_failure(status: &mut PersisterStatus, error: &PersistError) {
    tracing::error!(%error, "config file write failed; it will be retried");
    status.write_errors += 1;
    status.last_error = Some(error.to_string());
}

#[derive(Debug)]
struct HandleInner {
    shared: Arc<Shared>,
    join: Mutex<Option<JoinHandle<Result<(), PersistError>>>>,
}

impl Drop for HandleInner {
    /// The last handle gone without `flush_and_stop`: let the thread write
    /// what is pending and end, detached.
    fn drop(&mut self) {
        let mut pending = self.shared.lock();
        pending.stopping = true;
        self.shared.wake.notify_one();
    }
}

/// Hands content to the persist thread; cheap to clone and send to shards.
#[derive(Debug, Clone)]
pub struct PersisterHandle {
    inner: Arc<HandleInner>,
}

impl PersisterHandle {
    /// Queues `content` as the next version of `file`; only the latest
    /// content per file is written. Never blocks on I/O.
    ///
    /// For [`ConfigFile::ConsumerOffsets`] use either this (one table for
    /// the whole broker) or [`PersisterHandle::offsets`], not both: the
    /// latest call decides the next write.
    ///
    /// The ticket tells when this content (or newer content of `file`) is
    /// on disk: a change acknowledged to a client is answered only then, as
    /// Java's managers persist before they answer. Content handed in after
    /// the thread stopped is not written; its ticket fails.
    pub fn write(&self, file: ConfigFile, content: Vec<u8>) -> WriteTicket {
        let mut pending = self.inner.shared.lock();
        pending.generation += 1;
        let generation = pending.generation;
        let ticket = WriteTicket { file, generation };
        if pending.stopping {
            pending.status.writes_after_stop += 1;
            pending.progress[file.slot()].failed =
                Some((generation, format!("{PERSIST_THREAD_NAME} has stopped")));
            tracing::warn!(
                file = file.file_name(),
                "config write after the persister stopped"
            );
            return ticket;
        }
        if file == ConfigFile::ConsumerOffsets {
            pending.offsets_dirty = false;
        }
        if pending.files[file.slot()]
            .replace((generation, content))
            .is_some()
        {
            pending.status.writes_coalesced += 1;
        }
        self.inner.shared.wake.notify_one();
        ticket
    }

    /// Whether `ticket`'s content is on disk yet.
    pub fn ticket_state(&self, ticket: WriteTicket) -> TicketState {
        let pending = self.inner.shared.lock();
        let progress = &pending.progress[ticket.file.slot()];
        if progress.written >= ticket.generation {
            return TicketState::Written;
        }
        match &progress.failed {
            Some((generation, error)) if *generation >= ticket.generation => {
                TicketState::Failed(error.clone())
            }
            _ => TicketState::Pending,
        }
    }

    /// Has the thread call `batch_done` after each batch it tried to write
    /// (from the thread, without the lock held): a shard holding answers
    /// for [`PersisterHandle::ticket_state`] wakes its ring with it.
    /// Replaces an earlier callback.
    pub fn on_batch_done(&self, batch_done: impl Fn() + Send + Sync + 'static) {
        self.inner.shared.lock().batch_done = Some(BatchDone(Arc::new(batch_done)));
    }

    /// Queues shard `shard`'s consumer offsets; `consumerOffset.json` is
    /// written as the merge of every shard's latest table with the newest
    /// data version. Never blocks on I/O.
    pub fn offsets(&self, shard: u16, file: ConsumerOffsetFile) {
        let mut pending = self.inner.shared.lock();
        if pending.stopping {
            pending.status.writes_after_stop += 1;
            tracing::warn!(shard, "consumer offsets after the persister stopped");
            return;
        }
        if pending.files[ConfigFile::ConsumerOffsets.slot()]
            .take()
            .is_some()
            || pending.offsets_dirty
        {
            pending.status.writes_coalesced += 1;
        }
        pending.shard_offsets.insert(shard, Arc::new(file));
        pending.offsets_dirty = true;
        pending.generation += 1;
        self.inner.shared.wake.notify_one();
    }

    /// The offsets shard `shard` loaded at start: part of every later
    /// merge, written only with the next change. Without it, the first
    /// write after a start that only some shards' commits prompt would
    /// leave out the others' offsets (until the shutdown wrote them all
    /// again; a crash in between lost them).
    pub fn seed_offsets(&self, shard: u16, file: ConsumerOffsetFile) {
        let mut pending = self.inner.shared.lock();
        pending
            .shard_offsets
            .entry(shard)
            .or_insert_with(|| Arc::new(file));
    }

    /// What the thread has done so far.
    pub fn status(&self) -> PersisterStatus {
        self.inner.shared.lock().status.clone()
    }

    /// Writes everything pending, stops the thread and waits for it. Content
    /// handed in afterwards (through other clones) is counted in
    /// [`PersisterStatus::writes_after_stop`] and not written.
    ///
    /// # Errors
    ///
    /// The first error of the final writes (that content is not on disk),
    /// [`PersistError::WriterPanicked`], or [`PersistError::AlreadyStopped`]
    /// when another clone stopped the thread already.
    pub fn flush_and_stop(self) -> Result<(), PersistError> {
        let join = self
            .inner
            .join
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(join) = join else {
            return Err(PersistError::AlreadyStopped);
        };
        {
            let mut pending = self.inner.shared.lock();
            pending.stopping = true;
            self.inner.shared.wake.notify_one();
        }
        join.join().map_err(|_| PersistError::WriterPanicked)?
    }
}

#[cfg(test)]
pub(crate) mod test_dir {
    //! A temporary directory for the tests of config files.

    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A directory under the system's temporary directory, removed when
    /// dropped.
    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        /// An empty directory named after `label` and this process.
        pub(crate) fn new(label: &str) -> TempDir {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let path = std::env::temp_dir().join(format!(
                "ringmq-test-{label}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_dir::TempDir;

    impl TempDir {
        fn config(&self) -> ConfigDir {
            ConfigDir::under_store_root(&self.0)
        }
    }

    fn offsets(entries: &[(&str, i32, i64)], counter: i64) -> ConsumerOffsetFile {
        let mut file = ConsumerOffsetFile {
            data_version: Some(DataVersion {
                timestamp: 1_700_000_000_000 + counter,
                counter,
                state_version: 0,
            }),
            ..ConsumerOffsetFile::default()
        };
        for &(key, queue_id, offset) in entries {
            file.offset_table
                .entry(key.to_owned())
                .or_default()
                .insert(queue_id, offset);
        }
        file
    }

    #[test]
    fn file_names_are_rocketmqs_plus_the_timer_progress_and_config_updates() {
        let names: Vec<_> = ConfigFile::ALL.iter().map(|f| f.file_name()).collect();
        assert_eq!(
            names,
            [
                "topics.json",
                "subscriptionGroup.json",
                "consumerOffset.json",
                "delayOffset.json",
                "timerProgress.json",
                "kvConfig.json",
                "brokerConfigUpdates.properties"
            ]
        );
        for (index, file) in ConfigFile::ALL.iter().enumerate() {
            assert_eq!(file.slot(), index);
        }
    }

    #[test]
    fn load_of_a_missing_file_is_none_and_write_creates_the_directory() {
        let temp = TempDir::new("missing");
        let dir = temp.config();
        assert_eq!(dir.load(ConfigFile::Topics).unwrap(), None);
        assert!(!dir.path().exists());
        dir.write_atomic(ConfigFile::Topics, b"{\"a\":1}").unwrap();
        assert_eq!(dir.path(), temp.0.join("config"));
        assert_eq!(
            dir.load(ConfigFile::Topics).unwrap().as_deref(),
            Some(&b"{\"a\":1}"[..])
        );
        assert!(!dir.temp_path(ConfigFile::Topics).exists());
        assert!(!dir.backup_path(ConfigFile::Topics).exists());
    }

    #[test]
    fn write_atomic_replaces_the_file_and_keeps_the_previous_content_as_bak() {
        let temp = TempDir::new("replace");
        let dir = temp.config();
        dir.write_atomic(ConfigFile::SubscriptionGroups, b"one")
            .unwrap();
        dir.write_atomic(ConfigFile::SubscriptionGroups, b"two")
            .unwrap();
        dir.write_atomic(ConfigFile::SubscriptionGroups, b"three")
            .unwrap();
        let main = fs::read(dir.file_path(ConfigFile::SubscriptionGroups)).unwrap();
        let backup = fs::read(dir.backup_path(ConfigFile::SubscriptionGroups)).unwrap();
        assert_eq!(main, b"three");
        assert_eq!(backup, b"two");
        assert!(!dir.temp_path(ConfigFile::SubscriptionGroups).exists());
    }

    #[test]
    fn write_atomic_of_the_content_the_file_holds_writes_nothing() {
        use std::os::unix::fs::MetadataExt;
        let temp = TempDir::new("unchanged");
        let dir = temp.config();
        let path = dir.file_path(ConfigFile::Topics);
        dir.write_atomic(ConfigFile::Topics, b"one").unwrap();
        dir.write_atomic(ConfigFile::Topics, b"two").unwrap();
        let inode = fs::metadata(&path).unwrap().ino();
        dir.write_atomic(ConfigFile::Topics, b"two").unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().ino(),
            inode,
            "not renamed over"
        );
        assert_eq!(
            fs::read(dir.backup_path(ConfigFile::Topics)).unwrap(),
            b"one",
            "the backup keeps the content before the last change"
        );
        dir.write_atomic(ConfigFile::Topics, b"three").unwrap();
        assert_ne!(fs::metadata(&path).unwrap().ino(), inode);
        assert_eq!(
            fs::read(dir.backup_path(ConfigFile::Topics)).unwrap(),
            b"two"
        );
    }

    #[test]
    fn load_falls_back_to_bak_when_the_file_is_missing_or_empty() {
        let temp = TempDir::new("bak");
        let dir = temp.config();
        dir.write_atomic(ConfigFile::ConsumerOffsets, b"old")
            .unwrap();
        dir.write_atomic(ConfigFile::ConsumerOffsets, b"new")
            .unwrap();
        let main = dir.file_path(ConfigFile::ConsumerOffsets);

        fs::write(&main, b"").unwrap();
        assert_eq!(
            dir.load(ConfigFile::ConsumerOffsets).unwrap().as_deref(),
            Some(&b"old"[..])
        );
        fs::remove_file(&main).unwrap();
        assert_eq!(
            dir.load(ConfigFile::ConsumerOffsets).unwrap().as_deref(),
            Some(&b"old"[..])
        );
        fs::write(dir.backup_path(ConfigFile::ConsumerOffsets), b"").unwrap();
        assert_eq!(dir.load(ConfigFile::ConsumerOffsets).unwrap(), None);
    }

    #[test]
    fn an_empty_file_does_not_overwrite_a_good_bak() {
        let temp = TempDir::new("emptymain");
        let dir = temp.config();
        dir.write_atomic(ConfigFile::Topics, b"v1").unwrap();
        dir.write_atomic(ConfigFile::Topics, b"v2").unwrap();
        fs::write(dir.file_path(ConfigFile::Topics), b"").unwrap();
        dir.write_atomic(ConfigFile::Topics, b"v3").unwrap();
        assert_eq!(
            fs::read(dir.backup_path(ConfigFile::Topics)).unwrap(),
            b"v1"
        );
        assert_eq!(fs::read(dir.file_path(ConfigFile::Topics)).unwrap(), b"v3");
    }

    #[test]
    fn a_crash_between_tmp_write_and_rename_loads_the_old_content() {
        let temp = TempDir::new("crash");
        let dir = temp.config();
        dir.write_atomic(ConfigFile::Topics, b"committed").unwrap();
        // What a crash after step 1 (and after step 2) leaves behind.
        fs::write(dir.temp_path(ConfigFile::Topics), b"{\"half\":").unwrap();
        fs::write(dir.backup_path(ConfigFile::Topics), b"committed").unwrap();
        assert_eq!(
            dir.load(ConfigFile::Topics).unwrap().as_deref(),
            Some(&b"committed"[..])
        );
        // The next write overwrites the leftover tmp.
        dir.write_atomic(ConfigFile::Topics, b"next").unwrap();
        assert_eq!(
            dir.load(ConfigFile::Topics).unwrap().as_deref(),
            Some(&b"next"[..])
        );
        assert!(!dir.temp_path(ConfigFile::Topics).exists());
    }

    #[test]
    fn write_atomic_refuses_empty_content() {
        let temp = TempDir::new("empty");
        let dir = temp.config();
        let error = dir.write_atomic(ConfigFile::Topics, b"").unwrap_err();
        assert!(
            matches!(error, PersistError::EmptyContent { .. }),
            "{error}"
        );
        assert!(!dir.file_path(ConfigFile::Topics).exists());
    }

    #[test]
    fn load_with_decodes_the_bak_when_the_file_does_not_decode() {
        let temp = TempDir::new("decode");
        let dir = temp.config();
        let parse = |bytes: &[u8]| ConsumerOffsetFile::from_json(bytes);
        assert_eq!(
            dir.load_with(ConfigFile::ConsumerOffsets, parse).unwrap(),
            None
        );

        let mut good = Vec::new();
        offsets(&[("T@g", 0, 7)], 1).write_pretty(&mut good);
        dir.write_atomic(ConfigFile::ConsumerOffsets, &good)
            .unwrap();
        dir.write_atomic(ConfigFile::ConsumerOffsets, b"{broken")
            .unwrap();
        let loaded = dir
            .load_with(ConfigFile::ConsumerOffsets, parse)
            .unwrap()
            .unwrap();
        assert_eq!(loaded.offset_table["T@g"][&0], 7);

        fs::write(dir.backup_path(ConfigFile::ConsumerOffsets), b"[").unwrap();
        let error = dir
            .load_with(ConfigFile::ConsumerOffsets, parse)
            .unwrap_err();
        match error {
            PersistError::Decode { path, .. } => {
                assert_eq!(path, dir.backup_path(ConfigFile::ConsumerOffsets));
            }
            other => panic!("expected a decode error, got {other}"),
        }
    }

    #[test]
    fn write_errors_name_the_path_and_keep_the_errno() {
        let temp = TempDir::new("errno");
        // A regular file where the directory should be: mkdir fails.
        fs::write(temp.0.join("config"), b"not a directory").unwrap();
        let error = temp
            .config()
            .write_atomic(ConfigFile::Topics, b"x")
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("config"), "{text}");
        match error {
            PersistError::Io { source, .. } => assert!(source.raw_os_error().is_some()),
            other => panic!("expected an I/O error, got {other}"),
        }
    }

    #[test]
    fn merge_offset_files_unions_shards_and_keeps_the_newest_data_version() {
        let shard0 = offsets(&[("T@g", 0, 10), ("T@g", 2, 12)], 3);
        let shard1 = offsets(&[("T@g", 1, 11), ("U@g", 1, 5)], 9);
        let merged = merge_offset_files([&shard0, &shard1]);
        assert_eq!(
            merged.offset_table["T@g"],
            BTreeMap::from([(0, 10), (1, 11), (2, 12)])
        );
        assert_eq!(merged.offset_table["U@g"], BTreeMap::from([(1, 5)]));
        assert_eq!(merged.data_version.map(|v| v.counter), Some(9));
        let reversed = merge_offset_files([&shard1, &shard0]);
        assert_eq!(reversed.data_version.map(|v| v.counter), Some(9));
    }

    #[test]
    fn stop_flushes_every_pending_write() {
        let temp = TempDir::new("stop");
        let dir = temp.config();
        let handle = Persister::spawn(dir.clone()).unwrap();
        handle.write(ConfigFile::Topics, b"topics".to_vec());
        handle.write(ConfigFile::SubscriptionGroups, b"groups".to_vec());
        handle.write(ConfigFile::DelayOffsets, b"delay".to_vec());
        handle.clone().flush_and_stop().unwrap();
        assert_eq!(
            fs::read(dir.file_path(ConfigFile::Topics)).unwrap(),
            b"topics"
        );
        assert_eq!(
            fs::read(dir.file_path(ConfigFile::SubscriptionGroups)).unwrap(),
            b"groups"
        );
        assert_eq!(
            fs::read(dir.file_path(ConfigFile::DelayOffsets)).unwrap(),
            b"delay"
        );
        // The remaining clone sees the stop.
        handle.write(ConfigFile::Topics, b"late".to_vec());
        assert_eq!(handle.status().writes_after_stop, 1);
        assert!(matches!(
            handle.flush_and_stop(),
            Err(PersistError::AlreadyStopped)
        ));
        assert_eq!(
            fs::read(dir.file_path(ConfigFile::Topics)).unwrap(),
            b"topics"
        );
    }

    #[test]
    fn the_writer_thread_is_named_ringmq_persist() {
        let temp = TempDir::new("name");
        let handle = Persister::spawn(temp.config()).unwrap();
        let thread_names = || -> Vec<String> {
            fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|task| fs::read_to_string(task.ok()?.path().join("comm")).ok())
                .map(|name| name.trim().to_owned())
                .collect()
        };
        // The thread names itself once it runs; wait for that, bounded.
        let mut names = thread_names();
        for _ in 0..2_000 {
            if names.iter().any(|name| name == PERSIST_THREAD_NAME) {
                break;
            }
            thread::sleep(Duration::from_millis(5));
            names = thread_names();
        }
        assert!(
            names.iter().any(|name| name == PERSIST_THREAD_NAME),
            "{names:?}"
        );
        handle.flush_and_stop().unwrap();
    }

    #[test]
    fn dropping_the_last_handle_still_writes_what_is_pending() {
        let temp = TempDir::new("drop");
        let dir = temp.config();
        let handle = Persister::spawn(dir.clone()).unwrap();
        handle.write(ConfigFile::Topics, b"dropped".to_vec());
        drop(handle);
        // The detached thread finishes on its own; wait for it, bounded.
        let path = dir.file_path(ConfigFile::Topics);
        for _ in 0..2_000 {
            if path.exists() {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(fs::read(&path).unwrap(), b"dropped");
    }

    #[test]
    fn writes_coalesce_to_the_latest_content_per_file() {
        let temp = TempDir::new("coalesce");
        let dir = temp.config();
        let handle = Persister::spawn(dir.clone()).unwrap();
        let versions = 100u32;
        for version in 0..versions {
            handle.write(ConfigFile::Topics, format!("v{version}").into_bytes());
        }
        let handle2 = handle.clone();
        handle.flush_and_stop().unwrap();
        let status = handle2.status();
        assert_eq!(fs::read(dir.file_path(ConfigFile::Topics)).unwrap(), b"v99");
        assert_eq!(
            status.writes_completed + status.writes_coalesced,
            u64::from(versions)
        );
        assert_eq!(status.write_errors, 0);
    }

    #[test]
    fn coalescing_keeps_only_the_latest_content_handed_in_before_a_write() {
        let temp = TempDir::new("busy");
        let dir = temp.config();
        let (handle, persister) = unthreaded(&dir);
        for version in 0..10 {
            handle.write(ConfigFile::Topics, format!("v{version}").into_bytes());
        }
        step(&persister).unwrap();
        let status = handle.status();
        assert_eq!(status.writes_completed, 1);
        assert_eq!(status.writes_coalesced, 9);
        assert_eq!(fs::read(dir.file_path(ConfigFile::Topics)).unwrap(), b"v9");
        assert!(!dir.backup_path(ConfigFile::Topics).exists());
    }

    #[test]
    fn offsets_from_two_shards_merge_into_one_consumer_offset_file() {
        let temp = TempDir::new("offsets");
        let dir = temp.config();
        let handle = Persister::spawn(dir.clone()).unwrap();
        handle.offsets(0, offsets(&[("T@g", 0, 100)], 2));
        handle.offsets(1, offsets(&[("T@g", 1, 1)], 5));
        // A newer table from shard 1 replaces its older one.
        handle.offsets(1, offsets(&[("T@g", 1, 101)], 6));
        handle.flush_and_stop().unwrap();
        let content = dir.load(ConfigFile::ConsumerOffsets).unwrap().unwrap();
        let file = ConsumerOffsetFile::from_json(&content).unwrap();
        assert_eq!(
            file.offset_table["T@g"],
            BTreeMap::from([(0, 100), (1, 101)])
        );
        assert_eq!(file.data_version.map(|v| v.counter), Some(6));
        // Pretty, as Java writes it.
        assert!(content.starts_with(b"{\n\t\"dataVersion\""), "{content:?}");
    }

    /// A handle and a persister sharing slots, without the thread, so a
    /// test can run the thread's steps one at a time.
    fn unthreaded(dir: &ConfigDir) -> (PersisterHandle, Persister) {
        let shared = Arc::new(Shared::default());
        let handle = PersisterHandle {
            inner: Arc::new(HandleInner {
                shared: Arc::clone(&shared),
                join: Mutex::new(None),
            }),
        };
        let persister = Persister {
            dir: dir.clone(),
            shared,
        };
        (handle, persister)
    }

    fn step(persister: &Persister) -> Result<(), PersistError> {
        let batch = take_batch(&mut persister.shared.lock());
        persister.write_batch(batch)
    }

    /// A store root whose `config` is a file, so every write fails until
    /// the returned blocker path is removed.
    fn blocked(name: &str) -> (TempDir, PathBuf, ConfigDir) {
        let temp = TempDir::new(name);
        let blocker = temp.0.join("config");
        fs::write(&blocker, b"a file where the directory belongs").unwrap();
        let dir = temp.config();
        (temp, blocker, dir)
    }

    #[test]
    fn a_failed_write_is_counted_kept_and_retried_with_the_newest_content() {
        let (_temp, blocker, dir) = blocked("retry");
        let (handle, persister) = unthreaded(&dir);
        handle.write(ConfigFile::Topics, b"first".to_vec());
        handle.offsets(0, offsets(&[("T@g", 0, 1)], 1));
        assert!(step(&persister).is_err());
        let status = handle.status();
        assert_eq!(status.write_errors, 2);
        assert_eq!(status.files_failing, 2);
        assert!(
            status
                .last_error
                .as_deref()
                .unwrap_or("")
                .contains("config")
        );
        // Still pending: a retry without new content writes it again.
        assert!(persister.shared.lock().has_work());
        assert!(step(&persister).is_err());
        assert_eq!(handle.status().write_errors, 4);

        fs::remove_file(&blocker).unwrap();
        handle.write(ConfigFile::Topics, b"second".to_vec());
        step(&persister).unwrap();
        assert_eq!(
            fs::read(dir.file_path(ConfigFile::Topics)).unwrap(),
            b"second"
        );
        let offsets = dir.load(ConfigFile::ConsumerOffsets).unwrap().unwrap();
        assert_eq!(
            ConsumerOffsetFile::from_json(&offsets)
                .unwrap()
                .offset_table["T@g"][&0],
            1
        );
        assert_eq!(handle.status().files_failing, 0);
        assert!(!persister.shared.lock().has_work());
    }

    #[test]
    fn a_ticket_is_written_once_its_content_or_newer_is_on_disk_and_failed_while_it_fails() {
        let (_temp, blocker, dir) = blocked("tickets");
        let (handle, persister) = unthreaded(&dir);
        let first = handle.write(ConfigFile::Topics, b"first".to_vec());
        let groups = handle.write(ConfigFile::SubscriptionGroups, b"g".to_vec());
        assert_eq!(handle.ticket_state(first), TicketState::Pending);
        assert!(step(&persister).is_err());
        let TicketState::Failed(error) = handle.ticket_state(first) else {
            panic!("{:?}", handle.ticket_state(first));
        };
        assert!(error.contains("config"), "{error}");
        assert!(matches!(
            handle.ticket_state(groups),
            TicketState::Failed(_)
        ));

        // Newer content written covers the older ticket too; the other
        // file's ticket waits for its own write.
        fs::remove_file(&blocker).unwrap();
        let second = handle.write(ConfigFile::Topics, b"second".to_vec());
        assert_eq!(handle.ticket_state(second), TicketState::Pending);
        step(&persister).unwrap();
        assert_eq!(handle.ticket_state(first), TicketState::Written);
        assert_eq!(handle.ticket_state(second), TicketState::Written);
        assert_eq!(handle.ticket_state(groups), TicketState::Written);
        assert_eq!(
            fs::read(dir.file_path(ConfigFile::Topics)).unwrap(),
            b"second"
        );
        assert_eq!(
            fs::read(dir.file_path(ConfigFile::SubscriptionGroups)).unwrap(),
            b"g"
        );
        let third = handle.write(ConfigFile::Topics, b"third".to_vec());
        assert_eq!(handle.ticket_state(third), TicketState::Pending);
    }

    #[test]
    fn the_thread_calls_back_after_each_batch_and_a_write_after_stop_fails_its_ticket() {
        let temp = TempDir::new("callback");
        let handle = Persister::spawn(temp.config()).unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        handle.on_batch_done(move || {
            let _ = done_tx.send(());
        });
        let ticket = handle.write(ConfigFile::Topics, b"{}".to_vec());
        done_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(handle.ticket_state(ticket), TicketState::Written);
        let other = handle.clone();
        handle.flush_and_stop().unwrap();
        let late = other.write(ConfigFile::Topics, b"late".to_vec());
        assert!(matches!(other.ticket_state(late), TicketState::Failed(_)));
        assert_eq!(other.status().writes_after_stop, 1);
    }

    #[test]
    fn stop_reports_a_write_that_still_fails() {
        let temp = TempDir::new("stopfail");
        fs::write(temp.0.join("config"), b"blocker").unwrap();
        let handle = Persister::spawn(temp.config()).unwrap();
        handle.write(ConfigFile::DelayOffsets, b"x".to_vec());
        let error = handle.flush_and_stop().unwrap_err();
        assert!(matches!(error, PersistError::Io { .. }), "{error}");
    }
}

//! [`FakeHost`]: a [`Host`] that runs nothing and records what it was
//! asked, for unit tests of what a node component would do to a machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::command::{Command, Error, Host};

/// One thing asked of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Run(Command),
    Write(PathBuf, String),
}

type Answer = dyn Fn(&Command) -> Result<String, String> + Send + Sync;

/// Records every call; commands answer by a script (empty stdout unless
/// told otherwise), files live in memory.
#[derive(Clone, Default)]
pub struct FakeHost {
    calls: Arc<Mutex<Vec<Call>>>,
    files: Arc<Mutex<BTreeMap<PathBuf, String>>>,
    answer: Arc<Mutex<Option<Arc<Answer>>>>,
}

impl std::fmt::Debug for FakeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeHost")
            .field("calls", &self.calls().len())
            .finish()
    }
}

impl FakeHost {
    pub fn new() -> FakeHost {
        FakeHost::default()
    }

    /// Commands are answered by `answer`: `Ok(stdout)`, or `Err(stderr)`
    /// for a failure.
    pub fn answer(
        &self,
        answer: impl Fn(&Command) -> Result<String, String> + Send + Sync + 'static,
    ) {
        *lock(&self.answer) = Some(Arc::new(answer));
    }

    /// A file as if it were on the machine.
    pub fn put_file(&self, path: impl Into<PathBuf>, contents: impl Into<String>) {
        lock(&self.files).insert(path.into(), contents.into());
    }

    /// A file's contents now (what was put or written).
    pub fn file(&self, path: impl AsRef<Path>) -> Option<String> {
        lock(&self.files).get(path.as_ref()).cloned()
    }

    /// Everything asked so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.calls).clone()
    }

    /// The commands run so far, in order.
    pub fn commands(&self) -> Vec<Command> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Run(command) => Some(command),
                Call::Write(..) => None,
            })
            .collect()
    }

    /// What was written on the stdin of every `program` run, in order
    /// (nft's transactions).
    pub fn stdins(&self, program: &str) -> Vec<String> {
        self.commands()
            .into_iter()
            .filter(|c| c.program == program)
            .filter_map(|c| c.stdin)
            .collect()
    }

    /// Forgets the calls recorded so far.
    pub fn clear(&self) {
        lock(&self.calls).clear();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait::async_trait]
impl Host for FakeHost {
    async fn run(&self, command: &Command) -> Result<String, Error> {
        lock(&self.calls).push(Call::Run(command.clone()));
        let answer = lock(&self.answer).clone();
        match answer {
            Some(answer) => answer(command).map_err(|message| Error::Command {
                command: command.to_string(),
                message,
            }),
            None => Ok(String::new()),
        }
    }

    fn write_file(&self, path: &Path, contents: &str) -> Result<(), Error> {
        lock(&self.calls).push(Call::Write(path.to_path_buf(), contents.to_string()));
        lock(&self.files).insert(path.to_path_buf(), contents.to_string());
        Ok(())
    }

    fn read_file(&self, path: &Path) -> Result<String, Error> {
        self.file(path).ok_or_else(|| Error::File {
            what: "read",
            path: path.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
    }
}

//! A host inside a network namespace: every command runs under `ip netns
//! exec`, and files are read and written from inside it (sysctls under
//! `/proc/sys/net` are the namespace's own). For the tests and benchmarks
//! that make namespaces of their own to stand for nodes.

use std::path::Path;

use crate::command::{Command, Error, Host, System, system_command_blocking};

/// The namespace `name` (made by `ip netns add`).
#[derive(Debug, Clone)]
pub struct InNamespace {
    name: String,
}

impl InNamespace {
    pub fn new(name: &str) -> InNamespace {
        InNamespace { name: name.into() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn wrap(&self, command: &Command) -> Command {
        let mut args = vec![
            "netns".to_string(),
            "exec".into(),
            self.name.clone(),
            command.program.clone(),
        ];
        args.extend(command.args.iter().cloned());
        Command {
            program: "ip".into(),
            args,
            stdin: command.stdin.clone(),
        }
    }

    fn blocking(&self, args: &[&str], stdin: Option<&str>) -> Result<String, Error> {
        use std::io::Write;
        let command = self.wrap(&Command::new(args[0], args[1..].iter().copied()));
        let failed = |message: String| Error::Command {
            command: command.to_string(),
            message,
        };
        let mut child = system_command_blocking("ip")
            .args(&command.args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        if let Some(mut pipe) = child.stdin.take() {
            pipe.write_all(stdin.unwrap_or_default().as_bytes())
                .map_err(|e| failed(e.to_string()))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| failed(e.to_string()))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(failed(
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            ))
        }
    }
}

#[async_trait::async_trait]
impl Host for InNamespace {
    async fn run(&self, command: &Command) -> Result<String, Error> {
        System.run(&self.wrap(command)).await
    }

    fn write_file(&self, path: &Path, contents: &str) -> Result<(), Error> {
        let path = path.display().to_string();
        self.blocking(&["tee", &path], Some(contents)).map(drop)
    }

    fn read_file(&self, path: &Path) -> Result<String, Error> {
        self.blocking(&["cat", &path.display().to_string()], None)
    }
}

//! The Python `kubernetes` client (PyPI, installed by scripts/setup into
//! /var/tmp/rudder-python) against the API server.

mod support;

use support::Backend;

fn python() -> String {
    std::env::var("RUDDER_PYTHON").unwrap_or_else(|_| {
        let venv =
            std::env::var("RUDDER_PYTHON_VENV").unwrap_or_else(|_| "/var/tmp/rudder-python".into());
        format!("{venv}/bin/python")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_works() {
    let server = support::start(Backend::Embedded).await;
    // This checkout's, not the one a reused test binary was built in.
    let script = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            std::path::PathBuf::from,
        )
        .join("tests/python/client_test.py");
    let kubeconfig = server.kubeconfig.clone();
    let output = tokio::process::Command::new(python())
        .arg(&script)
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .expect("run python (run scripts/setup to install the client)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python client test failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("20 passed, 0 failed"), "{stdout}");
}

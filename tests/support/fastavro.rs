//! A third-party Avro implementation to check our bytes against: Python
//! `fastavro` through `tests/fastavro_check.py`, installed with pip when
//! missing.

use std::process::{Command, Stdio};

use serde_json::Value;

/// `python3` with `fastavro` importable, installing it when missing.
fn python_with_fastavro() -> Command {
    let importable = || {
        Command::new("python3")
            .args(["-c", "import fastavro"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !importable() {
        let installed = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "fastavro"])
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            // Distributions that mark their Python as externally managed.
            let _ = Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--user",
                    "--break-system-packages",
                    "fastavro",
                ])
                .status();
        }
        assert!(
            importable(),
            "python3 cannot import fastavro, even after pip install"
        );
    }
    Command::new("python3")
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

pub fn fastavro(request: &Value) -> Value {
    let mut child = python_with_fastavro()
        .arg(super::repo().join("tests/fastavro_check.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, request.to_string().as_bytes()).unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "fastavro_check.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

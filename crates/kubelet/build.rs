//! Compiles CRI v1 (`proto/api.proto`) and gRPC health checking
//! (`proto/health.proto`, for `grpc` probes; its server too, for their
//! tests) with protox, a protobuf compiler in pure Rust (no protoc on the
//! machine), and the pause program
//! (`pause/pause.c`) into a static binary that the agent packs as its
//! sandbox image.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-changed=proto/health.proto");
    println!("cargo:rerun-if-changed=pause/pause.c");
    let fds = protox::compile(["api.proto"], ["proto"]).expect("compile proto/api.proto");
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(fds)
        .expect("generate the CRI client");
    let fds = protox::compile(["health.proto"], ["proto"]).expect("compile proto/health.proto");
    tonic_prost_build::configure()
        .compile_fds(fds)
        .expect("generate the health client and server");

    // The pause program: static, so that it is the image's only file.
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-static", "-Os", "-s", "-o"])
        .arg(out.join("pause"))
        .arg("pause/pause.c")
        .status()
        .unwrap_or_else(|e| panic!("run {cc} to build pause/pause.c: {e}"));
    assert!(
        status.success(),
        "{cc} -static failed on pause/pause.c (a static libc is needed: Debian's libc6-dev)"
    );
}

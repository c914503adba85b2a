//! Compiles `proto/csi.proto` (CSI spec v1.12.0, Apache-2.0, see `proto/LICENSE`) into Rust with
//! protox, so no `protoc` binary is needed. Comments are left out of the generated code: the spec's
//! indented examples would otherwise run as doctests; read them in the proto file.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    let fds = protox::compile(["csi.proto"], ["proto"])?;
    let mut config = tonic_prost_build::Config::new();
    config.disable_comments(["."]);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .generate_default_stubs(true)
        .disable_comments(["."])
        .compile_fds_with_config(fds, config)?;
    Ok(())
}

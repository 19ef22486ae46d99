//! Where things are: this crate, the workspace, the workloads, the `stoke`
//! binary under test.

use std::path::{Path, PathBuf};

/// The directory of this crate (`<workspace root>/tests`).
pub fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    crate_dir()
        .parent()
        .expect("the tests crate lives inside the workspace")
        .to_path_buf()
}

/// The directory holding the C workloads.
pub fn workloads_dir() -> PathBuf {
    crate_dir().join("workloads")
}

/// The `stoke` binary under test: `$STOKE_BIN` if set, else
/// `<workspace root>/target/release/stoke`.
///
/// # Panics
///
/// If the binary does not exist, with a message saying to build it.
pub fn stoke_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("STOKE_BIN") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "STOKE_BIN is set to {}, which is not a file",
            path.display()
        );
        return path;
    }
    let path = workspace_root().join("target/release/stoke");
    assert!(
        path.is_file(),
        "the stoke binary was not found at {}: run `cargo build --release` first \
         (or set STOKE_BIN to the binary to test)",
        path.display()
    );
    path
}

/// Where `cargo xtask setup` installs the Python packages the tests use
/// (`PYTHONPATH` for the scripts of `tests/tools/`).
pub const PYTHON_PATH: &str = "/opt/stoke-python";

/// Where `cargo xtask setup` puts a root holding Debian trixie's CPython
/// 3.13 (`usr/bin/python3.13`) and the C library it links.
pub const PYTHON_3_13_ROOT: &str = "/opt/stoke-python3.13";

/// The path of `tests/tools/<name>`.
pub fn tool_path(name: &str) -> PathBuf {
    crate_dir().join("tools").join(name)
}

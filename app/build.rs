//! Derives the build id that the server binary and the browser bundle share (`TESSERA_BUILD_ID`).
//!
//! Both compile this crate (`ssr` for the server, `hydrate` for the wasm), so both run this
//! script over the same inputs and embed the same id, and the server can refuse a bundle
//! from another build (issue 14: a release server with a debug bundle panics on every
//! page). The id hashes what decides whether the two render the same views: this crate's
//! and the engine's sources, `Cargo.lock` (the Leptos version), the build profile and
//! whether components are type-erased (`--cfg erase_components`). The crate features
//! (`ssr` / `hydrate`) are left out on purpose: they are the one thing that must differ.

use std::path::{Path, PathBuf};

/// The inputs, relative to this crate's folder; folders are read recursively.
const INPUTS: &[&str] = &["src", "Cargo.toml", "../engine/src", "../engine/Cargo.toml", "../Cargo.lock"];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut hash = Fnv1a::new();
    for input in INPUTS {
        println!("cargo:rerun-if-changed={input}");
        let mut files = Vec::new();
        collect_files(&manifest_dir.join(input), &mut files);
        files.sort();
        for file in files {
            let relative = file.strip_prefix(&manifest_dir).unwrap_or(&file);
            hash.write(relative.to_string_lossy().as_bytes());
            hash.write(&std::fs::read(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display())));
        }
    }
    // Type-erased components render other hydration markers than plain ones.
    println!("cargo:rerun-if-env-changed=RUSTFLAGS");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let rustflags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let erased = rustflags
        .split('\x1f')
        .any(|flag| flag.trim_start_matches("--cfg").trim_start_matches('=').trim() == "erase_components");
    hash.write(if erased { b"erase_components" } else { b"typed_components" });
    // "debug" or "release" (also for profiles inheriting from release, such as wasm-release).
    hash.write(std::env::var("PROFILE").unwrap_or_default().as_bytes());
    println!("cargo:rustc-env=TESSERA_BUILD_ID={:016x}", hash.finish());
}

fn collect_files(path: &Path, files: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let entries = std::fs::read_dir(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        for entry in entries {
            collect_files(&entry.expect("a folder entry").path(), files);
        }
    } else if path.is_file() {
        files.push(path.to_path_buf());
    }
}

/// FNV-1a (64 bits): stable across toolchains and platforms, unlike `DefaultHasher`.
struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes.iter().chain([0xff].iter()) {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

//! Test helper: loads the language-neutral contract from `../spec`.
//!
//! The files live outside the crate (they are shared by every client), so
//! they are read at run time; a missing file fails the test loudly rather
//! than skipping it.

use std::path::PathBuf;

/// Parses `../spec/<rel>` relative to this crate's manifest.
pub(crate) fn load(rel: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("spec")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read spec file {}: {e} (the tests need the monolock repository checkout)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Decodes a hex string from the vectors.
pub(crate) fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

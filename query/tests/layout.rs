//! The folders of query/src import one way (lib.rs's map): a file names `crate::<folder>` only for
//! its own folder or one below it, and `error.rs` imports nothing of the crate. Doc comments may
//! link anywhere.

use std::path::Path;

/// Bottom to top.
const ORDER: [&str; 6] = ["engine", "tables", "derived", "session", "review", "archive"];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `crate::<folder>` paths of `text`'s lines that are not comments.
fn folders_named(text: &str) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for folder in ORDER {
            let needle = format!("crate::{folder}");
            let mut rest = line;
            while let Some(at) = rest.find(&needle) {
                let after = &rest[at + needle.len()..];
                if !after.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                    out.push((n + 1, folder));
                }
                rest = after;
            }
        }
    }
    out
}

#[test]
fn no_folder_imports_from_a_folder_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut bad = Vec::new();
    for (level, folder) in ORDER.iter().enumerate() {
        let mut files = Vec::new();
        rust_files(&src.join(folder), &mut files);
        assert!(!files.is_empty(), "no files in {folder}/");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (line, named) in folders_named(&text) {
                if ORDER.iter().position(|f| *f == named).unwrap() > level {
                    bad.push(format!("{}:{line} names crate::{named}", file.display()));
                }
            }
        }
    }
    for bottom in ["error.rs", "words.rs"] {
        let text = std::fs::read_to_string(src.join(bottom)).unwrap();
        for (line, named) in folders_named(&text) {
            bad.push(format!("{bottom}:{line} names crate::{named}"));
        }
    }
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

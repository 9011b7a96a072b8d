//! The store's folders import one way (lib.rs's map): a file in a folder names `crate::X` only
//! for its own folder, a folder below it, or `error`. Comment lines (rustdoc links) are not
//! imports and are skipped; `#[cfg(test)]` modules are checked like the rest.

use std::path::Path;

/// The folders, lowest first; `model` and `policy` are both at the bottom and import neither.
const ORDER: [(&str, u32); 8] = [
    ("error", 0),
    ("model", 1),
    ("policy", 1),
    ("config", 2),
    ("format", 3),
    ("drill", 4),
    ("storage", 5),
    ("ingest", 6),
];

fn rank(folder: &str) -> Option<u32> {
    ORDER.iter().find(|(name, _)| *name == folder).map(|&(_, r)| r)
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_folder_imports_from_a_folder_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut upward = Vec::new();
    for path in &all {
        let rel = path.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_str().unwrap();
        let folder = first.strip_suffix(".rs").unwrap_or(first);
        if folder == "lib" {
            continue;
        }
        let own = rank(folder).unwrap_or_else(|| panic!("{} is in no folder of lib.rs's map", rel.display()));
        let text = std::fs::read_to_string(path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (at, _) in line.match_indices("crate::") {
                let name: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let allowed = name == folder || rank(&name).is_some_and(|r| r < own);
                if !allowed {
                    upward.push(format!("{}:{}: crate::{name}", rel.display(), n + 1));
                }
            }
        }
    }
    assert!(all.len() > 30, "found only {} files under {}", all.len(), src.display());
    assert!(
        upward.is_empty(),
        "imports against the folder order:\n{}",
        upward.join("\n")
    );
}

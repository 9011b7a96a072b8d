//! Each crate's folders import one way, as the crates do (store ← query ← web ← the binary).
//!
//! A crate's folders are listed below from the bottom up, as its `lib.rs` describes them. A file
//! may name `crate::<folder>` only for its own folder and the folders below it; a file at the
//! crate's root (other than `lib.rs`, the front door that wires the folders together) only other
//! root files. An item re-exported at the root (`crate::Name`) counts as the folder it comes from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// (crate source folder, its folders from the bottom up; folders on one level may import each other).
const ORDERS: &[(&str, &[&[&str]])] = &[
    (
        "store/src",
        &[
            &["model", "policy"],
            &["config"],
            &["format"],
            &["drill"],
            &["storage"],
            &["ingest"],
        ],
    ),
    (
        "query/src",
        &[
            &["engine"],
            &["tables"],
            &["derived"],
            &["session"],
            &["review"],
            &["archive"],
        ],
    ),
    ("web/src", &[&["server"], &["api"], &["pages"]]),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of `text` without `//` comments (doc links are not imports).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of every `crate::` path in `code`, braces of `use crate::{…}` included.
fn crate_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(inner) = after.strip_prefix('{') {
            // Top-level items of the braces: `crate::{a::X, b, c::{Y, Z}}` names a, b, c.
            let (mut depth, mut item, mut end) = (0, String::new(), inner.len());
            for (j, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = j;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(ch);
            }
            names.push(first_segment(&item));
            rest = &inner[end..];
        } else {
            names.push(first_segment(after));
            rest = after;
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Names re-exported by `lib.rs` (`pub use a::b::{X, Y}` / `pub use a::X`) → the module they come from (`a`).
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let lib = code(lib);
    for stmt in lib.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let from = first_segment(path);
        let items = match (path.find('{'), path.rfind('}')) {
            (Some(a), Some(b)) => path[a + 1..b].to_string(),
            _ => path.rsplit("::").next().unwrap_or("").to_string(),
        };
        for item in items.split(',') {
            let item = item.trim();
            let name = match item.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => item.rsplit("::").next().unwrap_or(item).trim(),
            };
            if !name.is_empty() {
                map.insert(name.to_string(), from.clone());
            }
        }
    }
    map
}

#[test]
fn folders_import_one_way_inside_each_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut wrong = Vec::new();
    for (src, levels) in ORDERS {
        let src = root.join(src);
        let level_of = |name: &str| levels.iter().position(|l| l.contains(&name));
        let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
        let reexports = root_reexports(&lib);
        // Every folder of the crate is in the order, and every folder in the order exists.
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                let name = path.file_name().unwrap().to_str().unwrap().to_string();
                assert!(
                    level_of(&name).is_some(),
                    "{} is not in the order of {}",
                    name,
                    src.display()
                );
            }
        }
        for level in levels.iter() {
            for folder in level.iter() {
                assert!(src.join(folder).is_dir(), "{} has no folder {folder}", src.display());
            }
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let rel = file.strip_prefix(&src).unwrap();
            if rel == Path::new("lib.rs") {
                continue;
            }
            // Root files sit below every folder.
            let own: Option<usize> = match rel.components().count() {
                1 => None,
                _ => Some(level_of(rel.components().next().unwrap().as_os_str().to_str().unwrap()).unwrap()),
            };
            let text = code(&std::fs::read_to_string(&file).unwrap());
            for name in crate_names(&text) {
                let module = reexports.get(&name).cloned().unwrap_or(name.clone());
                let Some(target) = level_of(&module) else {
                    continue; // a root file or a root item
                };
                if own.is_none_or(|own| target > own) {
                    wrong.push(format!(
                        "{}: crate::{name} ({module}/)",
                        file.strip_prefix(root).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "imports from a higher folder:\n{}", wrong.join("\n"));
}

#[test]
fn the_checker_reads_grouped_imports_and_skips_comments() {
    let text = code("use crate::{a::X, b, c::{Y, Z}};\n// crate::d is a comment\nlet s = \"//\"; crate::e::f();");
    assert_eq!(crate_names(&text), ["a", "b", "c", "e"]);
    let map = root_reexports("pub use metrics::{format_count, Thresholds as T};\npub use error::Error;");
    assert_eq!(map.get("format_count").map(String::as_str), Some("metrics"));
    assert_eq!(map.get("T").map(String::as_str), Some("metrics"));
    assert_eq!(map.get("Error").map(String::as_str), Some("error"));
}

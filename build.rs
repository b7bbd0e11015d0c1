//! Embeds the console (`src/console/web/`, issue 31) in the binary: every file, read at build
//! time, with its gzip and brotli forms made here once, so that neither `cargo build` needs
//! Node nor a start spends time compressing. The files are served under a directory named by a
//! content hash of them all (`src/console/assets.rs`), so each name is `immutable` in caches and
//! a new build's files never meet an old page. `index.html` is a template filled at start (its
//! prefix is a flag): it is embedded as it is and compressed then.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const WEB: &str = "src/console/web";

fn main() {
    println!("cargo:rerun-if-changed={WEB}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut files = Vec::new();
    collect(Path::new(WEB), &mut files);
    files.sort();
    let mut hash = Sha256::new();
    let mut entries = String::new();
    for (n, path) in files.iter().enumerate() {
        let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path
            .strip_prefix(WEB)
            .expect("a file of the web directory")
            .to_string_lossy()
            .replace('\\', "/");
        hash.update(name.as_bytes());
        hash.update([0]);
        hash.update(&raw);
        hash.update([0]);
        let gzip = out.join(format!("console-{n}.gz"));
        let br = out.join(format!("console-{n}.br"));
        std::fs::write(&gzip, gzipped(&raw)).expect("writing a gzip file");
        std::fs::write(&br, brotlied(&raw)).expect("writing a brotli file");
        let source = std::fs::canonicalize(path).expect("a source path");
        entries.push_str(&format!(
            "    WebFile {{ name: {name:?}, raw: include_bytes!({source:?}), gzip: include_bytes!({gzip:?}), br: include_bytes!({br:?}) }},\n"
        ));
    }
    let digest = hash.finalize();
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    let code = format!(
        "/// A content hash of every file of the console.\npub const HASH: &str = {hex:?};\n\
         /// Every file of the console, by its path under `src/console/web/`.\n\
         pub static FILES: &[WebFile] = &[\n{entries}];\n"
    );
    std::fs::write(out.join("console_web.rs"), code).expect("writing console_web.rs");
}

/// Every file under `dir`, recursively.
fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}

fn gzipped(raw: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(raw).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

fn brotlied(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        lgwin: 22,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut &raw[..], &mut out, &params).expect("brotli into memory");
    out
}

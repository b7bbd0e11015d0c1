//! The console's files as the binary carries them (`build.rs` embeds `src/console/web/`, each
//! file with its gzip and brotli forms), and how one is served: the encoding the client takes
//! (brotli, then gzip, then none, by `Accept-Encoding`), an ETag for each encoding, 304 for a
//! tag the client has, and how long caches keep it. The page (`index.html`) is a template
//! filled at start with the console's prefix, and compressed then.

use std::io::Write as _;

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{
    CACHE_CONTROL, CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue,
    IF_NONE_MATCH, VARY,
};
use sha2::{Digest, Sha256};

use crate::api::Reply;

/// One file of `src/console/web/`, as `build.rs` embeds it.
pub struct WebFile {
    /// Its path under `web/`, e.g. `app.js`.
    pub name: &'static str,
    pub raw: &'static [u8],
    pub gzip: &'static [u8],
    pub br: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/console_web.rs"));

/// The template of the page, filled at start.
pub const PAGE: &str = "index.html";

/// A file ready to serve: its three encodings, its type, its tag and its cache lifetime.
pub struct Served {
    content_type: &'static str,
    raw: Bytes,
    gzip: Bytes,
    br: Bytes,
    /// The tag of the unencoded bytes; each encoding adds a suffix.
    tag: String,
    cache: &'static str,
}

/// Assets never change under their hashed directory: a year, without revalidation.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// The page names the assets of this build: always revalidated (with its ETag, a 304).
const REVALIDATE: &str = "no-cache";

impl Served {
    /// An embedded asset.
    pub fn asset(file: &WebFile) -> Served {
        Served {
            content_type: content_type(file.name),
            raw: Bytes::from_static(file.raw),
            gzip: Bytes::from_static(file.gzip),
            br: Bytes::from_static(file.br),
            tag: format!("{HASH}-{}", hex_prefix(file.raw)),
            cache: IMMUTABLE,
        }
    }

    /// The page: the template with `{{base}}` and `{{assets}}` filled, compressed now.
    pub fn page(template: &[u8], base: &str) -> Served {
        let assets = format!("{base}/assets/{HASH}");
        let filled = String::from_utf8_lossy(template)
            .replace("{{assets}}", &assets)
            .replace("{{base}}", base)
            .into_bytes();
        let gzip = {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            // Into memory: writing cannot fail.
            let _ = encoder.write_all(&filled);
            encoder.finish().unwrap_or_default()
        };
        let mut br = Vec::new();
        let params = brotli::enc::BrotliEncoderParams {
            quality: 9,
            ..Default::default()
        };
        let _ = brotli::BrotliCompress(&mut filled.as_slice(), &mut br, &params);
        Served {
            content_type: "text/html; charset=utf-8",
            tag: format!("page-{}", hex_prefix(&filled)),
            raw: Bytes::from(filled),
            gzip: Bytes::from(gzip),
            br: Bytes::from(br),
            cache: REVALIDATE,
        }
    }

    /// The answer to a GET or HEAD of this file with `headers`: the encoding they accept, or
    /// 304 when `If-None-Match` names that encoding's tag (for a HEAD the service sends GET's
    /// length and none of the content).
    pub fn reply(&self, headers: &HeaderMap) -> Reply {
        let encoding = accepted(headers);
        let (body, suffix, coding) = match encoding {
            // An empty file compresses to more than it is: sent as it is.
            Encoding::Brotli if !self.br.is_empty() => (self.br.clone(), "-br", Some("br")),
            Encoding::Gzip if !self.gzip.is_empty() => (self.gzip.clone(), "-gz", Some("gzip")),
            _ => (self.raw.clone(), "", None),
        };
        let etag = format!("\"{}{suffix}\"", self.tag);
        let etag_value = HeaderValue::from_str(&etag).ok();
        let mut fields: Vec<(HeaderName, HeaderValue)> = vec![
            (CACHE_CONTROL, HeaderValue::from_static(self.cache)),
            (VARY, HeaderValue::from_static("Accept-Encoding")),
        ];
        let matched = headers.get_all(IF_NONE_MATCH).iter().any(|value| {
            value
                .to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
        });
        if matched {
            return Reply {
                status: StatusCode::NOT_MODIFIED,
                body: Bytes::new(),
                etag: etag_value,
                headers: fields,
                stream: None,
            };
        }
        fields.push((CONTENT_TYPE, HeaderValue::from_static(self.content_type)));
        if let Some(coding) = coding {
            fields.push((CONTENT_ENCODING, HeaderValue::from_static(coding)));
        }
        Reply {
            status: StatusCode::OK,
            body,
            etag: etag_value,
            headers: fields,
            stream: None,
        }
    }
}

fn hex_prefix(bytes: &[u8]) -> String {
    crate::auth::encode_hex(&Sha256::digest(bytes)[..6])
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json" | "webmanifest") => "application/manifest+json",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Brotli,
    Gzip,
    Identity,
}

/// The best encoding `Accept-Encoding` allows (RFC 9110 12.5.3): brotli, then gzip; a coding
/// with `q=0` is refused; without the field, none.
fn accepted(headers: &HeaderMap) -> Encoding {
    let (mut br, mut gzip) = (false, false);
    for value in headers.get_all(hyper::header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .or_else(|| p.strip_prefix("Q="))
                    .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            if refused {
                continue;
            }
            match coding.as_str() {
                "br" => br = true,
                "gzip" | "x-gzip" => gzip = true,
                "*" => {
                    br = true;
                    gzip = true;
                }
                _ => {}
            }
        }
    }
    if br {
        Encoding::Brotli
    } else if gzip {
        Encoding::Gzip
    } else {
        Encoding::Identity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(accept: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            hyper::header::ACCEPT_ENCODING,
            HeaderValue::from_str(accept).expect("a value"),
        );
        headers
    }

    #[test]
    fn the_best_encoding_accepted_is_chosen() {
        assert_eq!(accepted(&HeaderMap::new()), Encoding::Identity);
        assert_eq!(accepted(&with("gzip, deflate, br, zstd")), Encoding::Brotli);
        assert_eq!(accepted(&with("gzip")), Encoding::Gzip);
        assert_eq!(accepted(&with("br;q=0, gzip;q=0.5")), Encoding::Gzip);
        assert_eq!(accepted(&with("identity")), Encoding::Identity);
        assert_eq!(accepted(&with("*")), Encoding::Brotli);
    }

    #[test]
    fn the_page_names_this_build_s_assets_under_its_prefix() {
        let page = Served::page(
            b"<link href=\"{{assets}}/s.css\"><a href=\"{{base}}/\">",
            "/x",
        );
        let text = String::from_utf8(page.raw.to_vec()).expect("UTF-8");
        assert_eq!(
            text,
            format!("<link href=\"/x/assets/{HASH}/s.css\"><a href=\"/x/\">")
        );
        let reply = page.reply(&with("br"));
        assert_eq!(reply.status, StatusCode::OK);
        let tag = reply.etag.clone().expect("a tag");
        let mut again = with("br");
        again.insert(IF_NONE_MATCH, tag);
        assert_eq!(page.reply(&again).status, StatusCode::NOT_MODIFIED);
        // Another encoding is another representation, with its own tag.
        assert_ne!(page.reply(&with("gzip")).etag, reply.etag);
    }

    #[test]
    fn every_embedded_file_decompresses_to_itself() {
        use std::io::Read;
        assert!(FILES.iter().any(|f| f.name == PAGE));
        for file in FILES {
            let mut gunzipped = Vec::new();
            flate2::read::GzDecoder::new(file.gzip)
                .read_to_end(&mut gunzipped)
                .expect("gzip");
            assert_eq!(gunzipped, file.raw, "{}", file.name);
            let mut unbrotlied = Vec::new();
            brotli::BrotliDecompress(&mut &file.br[..], &mut unbrotlied).expect("brotli");
            assert_eq!(unbrotlied, file.raw, "{}", file.name);
        }
    }
}

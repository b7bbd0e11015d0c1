// The API's search rules (src/search.rs), for what the feed brings while a search is shown: a
// name folded (NFKD, case folded, marks dropped: "Zoë" is "zoe", "Straße" is "strasse"), split
// into words (runs of letters and digits), each word cut to 16 characters; a query matches
// when each of its words starts one of the name's first 16 words; `sort=name` orders by the
// folded words. The server decides what a page holds; this only keeps a shown list true to it.

const WORD_CHARS = 16;
const NAME_WORDS = 16;
const SORT_KEY_BYTES = 64;
export const MAX_WORDS = 8;
export const MAX_CHARS = 100;

// JavaScript has no case folding: lower, upper, lower again is the same for every letter a
// name holds (ß and ẞ become ss, ς becomes σ), except the dotless ı, which folding keeps.
const foldCase = (text) => text.split('ı').map((part) => part.toLowerCase().toUpperCase().toLowerCase()).join('ı').replace(/ς/g, 'σ');

/** `text` folded as the API compares it. */
export const fold = (text) => foldCase(text.normalize('NFKD')).normalize('NFKD').replace(/\p{M}/gu, '');

/** The folded words of `text`. */
export const words = (text) => fold(text).match(/[\p{Alphabetic}\p{N}]+/gu) || [];

const cut = (word) => Array.from(word).slice(0, WORD_CHARS).join('');

/**
 * A query as the API reads it: {terms} (none: no filter), or {error} when it has more than
 * 8 words or 100 characters.
 */
export function parse(q) {
  if (Array.from(q).length > MAX_CHARS) return { error: 'chars', terms: [] };
  const found = words(q);
  if (found.length > MAX_WORDS) return { error: 'words', terms: [] };
  return { terms: [...new Set(found.map(cut))] };
}

/** Whether a pet named `name` matches the query's `terms`. */
export function matches(terms, name) {
  if (!terms.length) return true;
  const own = words(name || '').slice(0, NAME_WORDS).map(cut);
  return terms.every((term) => own.some((word) => word.startsWith(term)));
}

const utf8 = new TextEncoder();

/** What `sort=name` orders by before the id: the folded words, cut to 64 bytes of UTF-8. */
export function sortKey(name) {
  let key = words(name || '').join(' ');
  while (utf8.encode(key).length > SORT_KEY_BYTES) key = Array.from(key).slice(0, -1).join('');
  return key;
}

/** Compares two texts as the server does (by code point, as UTF-8 bytes compare). */
export function compareText(a, b) {
  const x = Array.from(a);
  const y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d) return d;
  }
  return x.length - y.length;
}

// The console's one way to the server: same-origin fetch (the session cookie goes by itself),
// JSON in and out, the API's Error body turned into an ApiError, and any 401 reported to the
// app, which returns to sign-in. The API key itself never passes through here but once, in
// signIn, and is kept nowhere.

/** The console's prefix, e.g. "/console" (the server writes it into the page). */
export const base = (document.querySelector('meta[name="petstore-base"]')?.content || '/console').replace(/\/+$/, '');

/** A failed request: the HTTP status (0 when the server was not reached) and the Error body. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `the server answered ${status}`);
    this.status = status;
    this.code = body?.code || (status ? 'http_' + status : 'network');
  }
}

let signedOut = () => {};
/** Sets what happens when the server says the session is gone (any 401). */
export function onSignedOut(handler) { signedOut = handler; }

/** The target of a `Link: <…>; rel="next"` header, or null. */
function nextLink(header) {
  const match = header && /<([^>]+)>\s*;\s*rel="?next"?/.exec(header);
  return match ? match[1] : null;
}

/**
 * Sends one request. `body` (an object) goes as JSON; `type` overrides its media type;
 * `signal` (an AbortSignal) gives it up. Resolves to {status, data, headers, next}; rejects
 * with an ApiError (or the AbortError of a request given up).
 */
export async function request(method, path, { body, type, headers = {}, quiet401 = false, signal } = {}) {
  const init = { method, headers: { Accept: 'application/json', ...headers }, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = type || 'application/json';
  }
  if (signal) init.signal = signal;
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    // A request given up on (a newer search replaced it) is no failure of the server.
    if (error.name === 'AbortError') throw error;
    throw new ApiError(0, null);
  }
  const text = method === 'HEAD' || response.status === 204 ? '' : await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    if (response.status === 401 && !quiet401) signedOut();
    throw error;
  }
  return { status: response.status, data, headers: response.headers, next: nextLink(response.headers.get('Link')) };
}

export const get = (path, options) => request('GET', path, options);

/** Every item of a paged list, following next links (for small lists such as categories). */
export async function getAll(path) {
  const items = [];
  for (let next = path; next;) {
    const page = await get(next);
    items.push(...page.data);
    next = page.next;
  }
  return items;
}

/** Words for a person: the API's own message where it has one that helps, plain words otherwise. */
export function plain(error) {
  if (!(error instanceof ApiError)) return 'Something went wrong in the console: ' + error.message;
  switch (error.status) {
    case 0: return 'The server could not be reached. Check the connection and try again.';
    case 401: return 'Your session has ended. Sign in again.';
    case 403: return 'Your key can only look, not change things. Ask for a key that can make changes.';
    case 429: return 'Too many requests at once. Wait a moment and try again.';
    case 500: return 'The server ran into a problem. Try again; if it happens again, tell whoever runs the server.';
    case 503: return 'The server is busy or restarting. Try again in a moment.';
    // The API's other messages are written for people ("a category named "Dogs" exists"):
    // shown as they are. Those about a field go through fieldWords first.
    default: return error.message || 'The server refused that (' + error.status + ').';
  }
}

// The API's messages about a field, in the words of the shop's staff. `$1` takes the number
// the message gives.
const FIELD_WORDS = [
  [/^name (is required|must not be (null|empty))/, { pet: 'Give the pet a name.', category: 'Type a name for the category.' }],
  [/^name must not begin or end with white space/, 'Take out the spaces before or after the name.'],
  [/^name must not hold control characters/, 'The name holds a character that cannot be shown (pasted, perhaps): type the name again.'],
  [/^name must be at most (\d+) characters/, 'Keep the name to $1 characters or fewer.'],
  [/^name must be a string/, 'Type the name in letters.'],
  [/^categoryId (is required|must not be null)/, 'Choose a category.'],
  [/^categoryId must be/, 'Choose a category from the list.'],
  [/^status must/, 'Choose a status from the list.'],
  [/^petId (is required|must not be null)/, 'Choose the pet to sell.'],
  [/^petId must be/, 'Choose a pet from the list.'],
  [/^note must be at most (\d+) characters/, 'Keep the note to $1 characters or fewer.'],
  [/^note must/, 'Type the note in letters.'],
  [/^q must be at most/, 'Search with at most 8 words and 100 characters.'],
];

/**
 * What to show next to a field for a refused request: the API's message about the field said
 * plainly (`about`: 'pet' or 'category', for the words that differ), else `plain(error)`. The
 * API's own message is `raw`, for the line's title (support asks for it).
 */
export function fieldWords(error, about = 'pet') {
  const raw = error?.message || '';
  if (error instanceof ApiError && error.status === 400) {
    for (const [pattern, words] of FIELD_WORDS) {
      const match = pattern.exec(raw);
      if (!match) continue;
      const text = typeof words === 'string' ? words : words[about] || words.pet;
      return { text: text.replace('$1', match[1] || ''), raw };
    }
  }
  return { text: plain(error), raw };
}

/** Which form field an invalid_body message is about (its first word names it), or null. */
export function fieldOf(error) {
  const match = /^(name|categoryId|status|petId|note)\b/.exec(error?.message || '');
  return error?.code === 'invalid_body' && match ? match[1] : null;
}

/** The revision in a strong ETag `"ID.REVISION"` (0 when there is none). */
export function revision(etag) {
  const match = /\.(\d+)"?$/.exec(etag || '');
  return match ? Number(match[1]) : 0;
}

// The session (contract: POST/GET/DELETE {base}/session); a 401 here is an answer, not a fault.
export const session = {
  get: () => request('GET', base + '/session', { quiet401: true }),
  signIn: (key) => request('POST', base + '/session', { body: { key }, quiet401: true }),
  signOut: () => request('DELETE', base + '/session', { quiet401: true }),
};

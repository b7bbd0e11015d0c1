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
 * Sends one request. `body` (an object) goes as JSON; `type` overrides its media type.
 * Resolves to {status, data, headers, next}; rejects with an ApiError.
 */
export async function request(method, path, { body, type, headers = {}, quiet401 = false } = {}) {
  const init = { method, headers: { Accept: 'application/json', ...headers }, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = type || 'application/json';
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
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

export const get = (path) => request('GET', path);

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
    // The API's messages are written for people ("categoryId is required"): shown as they are.
    default: return error.message || 'The server refused that (' + error.status + ').';
  }
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

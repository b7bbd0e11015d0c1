// The console's shell: the session, the routes (real paths under the prefix, history API, no
// `#`), the header, the live feed and the flash line. Each view is a module that builds its
// own part of <main>, loads what it shows, and applies feed events to it.

import { base, request, session as sessionApi, onSignedOut, plain } from './api.js';
import * as feed from './feed.js';
import * as store from './store.js';
import { fill, h } from './dom.js';
import { overview } from './overview.js';
import { petList } from './pets.js';
import { petPage, newPet } from './pet.js';
import { orders } from './orders.js';
import { categories } from './categories.js';
import { signIn } from './signin.js';

const routes = [
  [/^\/$/, overview],
  [/^\/pets$/, petList],
  [/^\/pets\/new$/, newPet],
  [/^\/pets\/(-?\d+)$/, petPage],
  [/^\/orders$/, orders],
  [/^\/categories$/, categories],
  [/^\/sign-in$/, signIn],
];

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const live = document.getElementById('live');
const flashLine = document.getElementById('flash');

let session = null;   // {label, readOnly} while signed in
let view = null;      // the view on screen
let rendering = 0;    // bumps at each render, so a slow load never paints over a newer view
let pendingFlash = '';
let firstReady = true;

/** The path under the prefix, with its query: "/pets?status=sold". */
const here = () => (location.pathname.slice(base.length) || '/') + location.search;

/** Goes to a path under the prefix ("/pets/3"); `replace` keeps the history entry. */
function go(path, { replace = false, flash = '' } = {}) {
  const url = base + path;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  pendingFlash = flash;
  render();
}

/** Shows a message at the top of the page; a screen reader reads it (role=status). */
function flash(message) {
  flashLine.textContent = message;
  flashLine.classList.toggle('shown', Boolean(message));
}

function showState(state) {
  const words = { live: 'Live', connecting: 'Reconnecting…', lost: 'Not live', off: 'Not live' };
  live.dataset.state = state;
  live.textContent = words[state];
  live.title = state === 'live' ? 'Changes made elsewhere appear here as they happen' : 'Changes made elsewhere do not show until the connection is back';
}

function showHeader() {
  nav.hidden = who.hidden = !session;
  if (session) {
    document.getElementById('who-label').textContent =
      `Signed in as ${session.label}` + (session.readOnly ? ' (read only)' : '');
  }
  const path = location.pathname.slice(base.length) || '/';
  for (const link of nav.querySelectorAll('a')) {
    const target = link.pathname.slice(base.length) || '/';
    const current = target === '/' ? path === '/' : path === target || path.startsWith(target + '/');
    if (current) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

async function render() {
  const ticket = ++rendering;
  view?.leave?.();
  view = null;
  const path = location.pathname.slice(base.length) || '/';
  if (!session && path !== '/sign-in') {
    history.replaceState(null, '', base + '/sign-in?next=' + encodeURIComponent(here()));
    return render();
  }
  if (session && path === '/sign-in') {
    history.replaceState(null, '', base + safeNext(new URLSearchParams(location.search).get('next')));
    return render();
  }
  showHeader();
  flash(pendingFlash);
  pendingFlash = '';
  let match = null;
  let reloads = 0;
  const route = routes.find(([pattern]) => (match = pattern.exec(path)));
  const ctx = {
    session, canWrite: Boolean(session && !session.readOnly), go, flash,
    params: match ? match.slice(1) : [], query: new URLSearchParams(location.search),
    signedIn,
    // A view that reads again in place (a search or filter changed) says so as a page load
    // does, until the last of its reads is done.
    reloading(work) {
      reloads++;
      main.setAttribute('aria-busy', 'true');
      return Promise.resolve(work).catch((error) => flash(plain(error)))
        .finally(() => { if (--reloads === 0 && ticket === rendering) main.setAttribute('aria-busy', 'false'); });
    },
  };
  const current = route ? route[1](ctx) : notFound();
  view = current;
  document.title = `${current.title} · Pet shop console`;
  main.setAttribute('aria-busy', 'true');
  fill(main, current.node);
  // A new page: the focus goes to its heading, as a screen reader expects after a link (not
  // on the first load, where the browser starts at the top: "Skip to content" first).
  if (!firstReady || document.activeElement !== document.body) (main.querySelector('h1') || main).focus({ preventScroll: true });
  window.scrollTo(0, 0);
  try {
    await current.ready;
  } catch (error) {
    if (ticket === rendering && error.status !== 401) {
      main.append(h('p', { class: 'error', role: 'alert' }, plain(error)));
    }
  }
  if (ticket !== rendering) return;
  main.setAttribute('aria-busy', 'false');
  if (firstReady) {
    firstReady = false;
    performance.mark('console-ready');
  }
}

function notFound() {
  return {
    title: 'Page not found',
    node: h('section', null,
      h('h1', { tabindex: '-1' }, 'Page not found'),
      h('p', null, 'There is nothing at this address. ', h('a', { href: base + '/' }, 'Go to the overview'), '.')),
  };
}

/** Where `next` may send the user after sign-in: a path of this console, never elsewhere. */
function safeNext(next) {
  return next && next.startsWith('/') && !next.startsWith('//') && !next.startsWith('/sign-in') ? next : '/';
}

// Follows the feed from the current position: taken before the view loads, so every change
// after its load arrives. HEAD of a one-pet list carries the position (Events-Cursor).
async function follow() {
  const { headers } = await request('HEAD', '/v1/pets?limit=1');
  feed.start(headers.get('Events-Cursor'));
}

/** After sign-in: the session is set and the feed is followed; then `next`. */
async function signedIn(data, next) {
  session = data;
  await follow().catch(() => {});
  go(safeNext(next), { replace: true });
}

function signedOut(message) {
  if (!session) return;
  session = null;
  feed.stop();
  store.forget();
  history.replaceState(null, '', base + '/sign-in?next=' + encodeURIComponent(here()));
  pendingFlash = message;
  render();
}

onSignedOut(() => signedOut('Your session has ended. Sign in again to carry on where you were.'));

let lostTries = 0;
feed.configure({
  onEvent(event) {
    lostTries = 0;
    store.apply(event);
    view?.onEvent?.(event);
  },
  // The stream was refused: a 401 (the session check finds it), or a 410 (the position was
  // purged while the connection was down): list again and follow from a new position.
  async onLost() {
    const wait = Math.min(30000, 1000 * 2 ** lostTries++);
    await new Promise((resolve) => setTimeout(resolve, lostTries > 1 ? wait : 0));
    if (!session) return;
    try {
      await sessionApi.get();
      await follow();
      await store.loadCategories(true);
      if (view?.refresh) await view.refresh();
      else render();
    } catch (error) {
      if (error.status === 401) signedOut('Your session has ended. Sign in again to carry on where you were.');
      else showState('lost');
    }
  },
  onState: showState,
});

// A revoked key or an expired session must not leave a console that looks signed in: the
// session is checked every 20 s (and when the tab comes back into view).
async function checkSession() {
  if (!session) return;
  try {
    const { data } = await sessionApi.get();
    if (data.readOnly !== session.readOnly) { session = data; render(); }
  } catch (error) {
    if (error.status === 401) signedOut('Your session has ended. Sign in again to carry on where you were.');
  }
}
setInterval(checkSession, 20000);
document.addEventListener('visibilitychange', () => { if (!document.hidden) checkSession(); });

// Links inside the console change the view without loading the page again.
document.addEventListener('click', (event) => {
  const link = event.target.closest('a[href]');
  if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  if (link.id === 'skip') {
    event.preventDefault();
    main.focus();
    return;
  }
  if (link.origin !== location.origin || link.target || !(link.pathname === base || link.pathname.startsWith(base + '/'))) return;
  event.preventDefault();
  go(link.pathname.slice(base.length) + link.search);
});
window.addEventListener('popstate', render);

document.getElementById('sign-out').addEventListener('click', async () => {
  try { await sessionApi.signOut(); } catch { /* signed out all the same, here */ }
  session = null;
  feed.stop();
  store.forget();
  go('/sign-in', { replace: true, flash: 'You have signed out.' });
});

async function boot() {
  try {
    const { data } = await sessionApi.get();
    session = data;
    await follow().catch(() => showState('lost'));
  } catch (error) {
    session = null;
    if (error.status !== 401) pendingFlash = plain(error);
  }
  render();
}
boot();

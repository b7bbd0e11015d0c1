// The pets list: a search by name (as typed, after a pause), a sort, filters by status and
// category, all kept in the address; pages by the API's next link ("Load more"), and follows
// the feed: each event sets, moves or drops its pet by id, checked against the search with the
// API's own rules (search.js), unless the page it belongs to was read after the event (its
// Events-Cursor says so). Only the newest search's answer is ever shown.

import { base, fieldWords, get } from './api.js';
import { badge, field, fill, h, PET_STATUS, select } from './dom.js';
import { compareText, matches as nameMatches, MAX_CHARS, MAX_WORDS, parse, sortKey } from './search.js';
import { categoryList, categoryName, loadCategories, notePet, watchCategories } from './store.js';

const SORTS = [['id', 'Oldest first'], ['-id', 'Newest first'], ['name', 'Name A–Z']];
/** How long typing must pause before the list is read again. */
export const TYPING_PAUSE = 250;

/**
 * A search box that reads again after a pause in typing (at once on Enter), and says next to
 * itself when the query is more than the API takes. `value()` is the query to use (the last
 * one the API takes, trimmed); `onSearch()` runs when it changed.
 */
export function searchBox({ label, hint, value, onSearch }) {
  const input = h('input', { type: 'search', name: 'q', autocomplete: 'off', spellcheck: 'false', maxlength: String(MAX_CHARS), value });
  const wrap = field(label, input, hint);
  wrap.classList.add('search');
  let timer = 0;
  let sent = value.trim();
  const now = () => {
    clearTimeout(timer);
    const typed = input.value.trim();
    if (parse(typed).error) {
      wrap.error(`Search with at most ${MAX_WORDS} words.`);
      return;
    }
    wrap.error('');
    if (typed === sent) return;
    sent = typed;
    onSearch();
  };
  const later = () => { clearTimeout(timer); timer = setTimeout(now, TYPING_PAUSE); };
  // Typing with an input method (accents, other scripts) waits for the composed character.
  input.addEventListener('input', (event) => { if (!event.isComposing) later(); });
  input.addEventListener('compositionend', later);
  wrap.now = now;
  wrap.value = () => sent;
  wrap.stop = () => clearTimeout(timer);
  return wrap;
}

/** Comparison of two list keys ([number] or [text, number]). */
function compareKeys(a, b) {
  for (let i = 0; i < a.length; i++) {
    const d = typeof a[i] === 'string' ? compareText(a[i], b[i]) : a[i] - b[i];
    if (d) return d;
  }
  return 0;
}

export function petList(ctx) {
  let q = ctx.query.get('q') || '';
  let sort = SORTS.some(([value]) => value === ctx.query.get('sort')) ? ctx.query.get('sort') : 'id';
  let status = ctx.query.get('status') || '';
  let category = ctx.query.get('category') || '';
  let terms = parse(q).terms;
  const search = searchBox({
    label: 'Search pets',
    hint: 'By the start of any word of the name: “bel” finds Bella and Sir Belvedere.',
    value: q,
    onSearch: () => filter(),
  });
  const sortSelect = select(SORTS, sort);
  const statusSelect = select([['', 'All statuses'], ...['available', 'pending', 'sold'].map((s) => [s, PET_STATUS[s]])], status);
  const categorySelect = select([['', 'All categories']], category);
  const rows = h('tbody');
  const table = h('table', { class: 'pets' },
    h('caption', { class: 'vh' }, 'Pets'),
    h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col' }, 'Category'), h('th', { scope: 'col' }, 'Status'))),
    rows);
  const empty = h('p', { class: 'empty', hidden: true });
  const more = h('button', { type: 'button', hidden: true, onclick: () => loadMore() }, 'Load more');
  const shown = h('p', { class: 'hint' });

  // id -> {pet, row, cursor}: the pet as last seen, its row, the feed position it was read at.
  const pets = new Map();
  // The pages read so far: the list key of the last pet each holds and its Events-Cursor.
  let pages = [];
  let next = null;
  // Events that arrive while a page is being read wait for it: only then can they be compared.
  let queue = null;
  let reads = 0;
  // Each search, sort or filter is a new generation: an answer to an older one is dropped.
  let generation = 0;
  let aborter = null;

  const matches = (pet) => (!status || pet.status === status) && (!category || String(pet.categoryId) === category) && nameMatches(terms, pet.name);
  // Where a pet goes in the list, as the API orders it.
  const keyOf = (pet) => (sort === 'name' ? [sortKey(pet.name), pet.id] : sort === '-id' ? [-pet.id] : [pet.id]);

  function drawCategories() {
    fill(categorySelect, h('option', { value: '' }, 'All categories'),
      categoryList().map((c) => h('option', { value: String(c.id), selected: String(c.id) === category }, c.name)));
    for (const { pet, row } of pets.values()) row.cells[1].textContent = categoryName(pet.categoryId);
  }

  function draw(entry) {
    const { pet } = entry;
    if (!entry.row) entry.row = h('tr', null, h('td'), h('td'), h('td'));
    entry.key = keyOf(pet);
    const [name, cat, stat] = entry.row.cells;
    fill(name, h('a', { href: `${base}/pets/${pet.id}` }, pet.name || `Pet ${pet.id} (no name)`));
    cat.textContent = categoryName(pet.categoryId);
    fill(stat, badge('pet', pet.status));
  }

  function place(entry) {
    // Rows stay in the list's order, as the API pages them; a row moves only when it must.
    let before = null;
    for (const other of pets.values()) {
      if (other !== entry && compareKeys(other.key, entry.key) > 0 && (!before || compareKeys(other.key, before.key) < 0)) before = other;
    }
    const at = before ? before.row : null;
    if (entry.row.parentNode === rows && entry.row.nextSibling === at) return;
    rows.insertBefore(entry.row, at);
  }

  function summary() {
    const n = pets.size;
    empty.hidden = n > 0;
    const filtered = status || category;
    empty.textContent = terms.length
      ? `No pet matches “${q.trim()}”${filtered ? ' with these filters' : ''}.`
      : filtered ? 'No pets match these filters.' : 'There are no pets yet.';
    table.hidden = n === 0;
    more.hidden = !next;
    shown.textContent = n ? `Showing ${n} ${n === 1 ? 'pet' : 'pets'}${next ? '; there are more' : ''}.` : '';
  }

  function add(page) {
    const cursor = page.headers.get('Events-Cursor') || '';
    for (const pet of page.data) {
      notePet(pet.id, pet);
      const entry = pets.get(pet.id) || {};
      Object.assign(entry, { pet, cursor });
      draw(entry);
      pets.set(pet.id, entry);
      place(entry);
    }
    const last = page.data.length ? keyOf(page.data[page.data.length - 1]) : pages.at(-1)?.last ?? null;
    pages.push({ last: page.next ? last : null, cursor });
    next = page.next;
    summary();
  }

  function listPath() {
    const params = new URLSearchParams({ limit: '20' });
    if (terms.length) params.set('q', q);
    if (sort !== 'id') params.set('sort', sort);
    if (status) params.set('status', status);
    if (category) params.set('categoryId', category);
    return '/v1/pets?' + params;
  }

  // Reads a page for the current generation; false when a newer one took its place.
  async function reading(work) {
    queue = queue || [];
    reads++;
    try {
      return await work();
    } finally {
      if (--reads === 0) {
        const waiting = queue;
        queue = null;
        waiting.forEach(onEvent);
      }
    }
  }

  const stale = (mine, error) => mine !== generation || error?.name === 'AbortError';

  const load = () => {
    const mine = ++generation;
    aborter?.abort();
    const { signal } = (aborter = new AbortController());
    return reading(async () => {
      try {
        const [page] = await Promise.all([get(listPath(), { signal }), loadCategories()]);
        if (mine !== generation) return;
        pets.clear();
        pages = [];
        rows.replaceChildren();
        add(page);
        drawCategories();
      } catch (error) {
        if (stale(mine, error)) return;
        if (error.status === 400 && error.code === 'invalid_parameter' && /^q /.test(error.message)) {
          search.error(fieldWords(error));
          return;
        }
        throw error;
      }
    });
  };

  async function loadMore() {
    if (!next) return;
    const mine = generation;
    more.disabled = true;
    try {
      const before = rows.rows.length;
      await reading(async () => {
        const page = await get(next, { signal: aborter?.signal });
        if (mine === generation) add(page);
      });
      // The focus stays on a useful place: the first new row's link, or the button.
      const first = mine === generation ? [...rows.rows][before]?.querySelector('a') : null;
      if (first) first.focus();
    } catch (error) {
      if (!stale(mine, error)) ctx.flash(error.message);
    } finally {
      more.disabled = false;
    }
  }

  function onEvent(event) {
    if (!('petId' in event)) return;
    if (queue) { queue.push(event); return; }
    const id = event.petId;
    const known = pets.get(id);
    // An event the page already shows is old. A pet beyond the pages read is shown all the
    // same (a new pet, say, has the highest id): "Load more" later finds it in place.
    const key = event.pet ? keyOf(event.pet) : null;
    const page = (key && pages.find((p) => p.last === null || compareKeys(key, p.last) <= 0)) || pages.at(-1);
    if (!page || event.cursor <= (known ? known.cursor : page.cursor)) return;
    if (!event.pet || !matches(event.pet)) {
      if (known) { known.row.remove(); pets.delete(id); summary(); }
      return;
    }
    const entry = known || {};
    Object.assign(entry, { pet: event.pet, cursor: event.cursor });
    draw(entry);
    pets.set(id, entry);
    place(entry);
    if (!known) summary();
  }

  // A search, sort or filter reads the list again in place: the focus stays where it is
  // (arrow keys change a select's value at once), and the address keeps them all for a
  // reload or a bookmark.
  function filter() {
    q = search.value();
    terms = parse(q).terms;
    sort = sortSelect.value;
    status = statusSelect.value;
    category = categorySelect.value;
    const params = new URLSearchParams();
    if (terms.length) params.set('q', q);
    if (sort !== 'id') params.set('sort', sort);
    if (status) params.set('status', status);
    if (category) params.set('category', category);
    const query = params.toString();
    history.replaceState(null, '', `${base}/pets${query ? '?' + query : ''}`);
    return ctx.reloading(load());
  }
  for (const control of [sortSelect, statusSelect, categorySelect]) control.addEventListener('change', filter);
  const unwatch = watchCategories(drawCategories);

  return {
    title: 'Pets',
    node: h('section', null,
      h('div', { class: 'title-row' },
        h('h1', { tabindex: '-1' }, 'Pets'),
        ctx.canWrite ? h('a', { class: 'button primary', href: base + '/pets/new' }, 'Add pet') : null),
      h('form', { class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); search.now(); } },
        search, field('Sort', sortSelect), field('Status', statusSelect), field('Category', categorySelect)),
      table, h('div', { role: 'status' }, empty, shown), more),
    ready: load(),
    refresh: load,
    onEvent,
    leave() { unwatch(); search.stop(); aborter?.abort(); },
  };
}

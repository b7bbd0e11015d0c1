// The pets list: filters by status and category (kept in the address), pages by the API's
// next link ("Load more"), and follows the feed: each event sets or drops its pet by id,
// unless the page it belongs to was read after the event (its Events-Cursor says so).

import { base, get } from './api.js';
import { badge, field, fill, h, PET_STATUS, select } from './dom.js';
import { categoryList, categoryName, loadCategories, notePet, watchCategories } from './store.js';

export function petList(ctx) {
  let status = ctx.query.get('status') || '';
  let category = ctx.query.get('category') || '';
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
  // The pages read so far: the highest id each holds and its Events-Cursor.
  let pages = [];
  let next = null;
  // Events that arrive while a page is being read wait for it: only then can they be compared.
  let queue = null;

  const matches = (pet) => (!status || pet.status === status) && (!category || String(pet.categoryId) === category);

  function drawCategories() {
    fill(categorySelect, h('option', { value: '' }, 'All categories'),
      categoryList().map((c) => h('option', { value: String(c.id), selected: String(c.id) === category }, c.name)));
    for (const { pet, row } of pets.values()) row.cells[1].textContent = categoryName(pet.categoryId);
  }

  function draw(entry) {
    const { pet } = entry;
    if (!entry.row) entry.row = h('tr', null, h('td'), h('td'), h('td'));
    const [name, cat, stat] = entry.row.cells;
    fill(name, h('a', { href: `${base}/pets/${pet.id}` }, pet.name || `Pet ${pet.id} (no name)`));
    cat.textContent = categoryName(pet.categoryId);
    fill(stat, badge('pet', pet.status));
  }

  function place(entry) {
    // Rows stay in id order, as the API lists them.
    const after = [...pets.keys()].filter((id) => id > entry.pet.id).sort((a, b) => a - b)[0];
    rows.insertBefore(entry.row, after === undefined ? null : pets.get(after).row);
  }

  function summary() {
    const n = pets.size;
    empty.hidden = n > 0;
    empty.textContent = status || category ? 'No pets match these filters.' : 'There are no pets yet.';
    table.hidden = n === 0;
    more.hidden = !next;
    shown.textContent = n ? `Showing ${n} ${n === 1 ? 'pet' : 'pets'}${next ? '; there are more' : ''}.` : '';
  }

  function add(page) {
    for (const pet of page.data) {
      notePet(pet.id, pet);
      const entry = pets.get(pet.id) || {};
      Object.assign(entry, { pet, cursor: page.headers.get('Events-Cursor') || '' });
      draw(entry);
      if (!pets.has(pet.id)) { pets.set(pet.id, entry); place(entry); }
    }
    const last = page.data.length ? page.data[page.data.length - 1].id : pages.at(-1)?.hi ?? -Infinity;
    pages.push({ hi: page.next ? last : Infinity, cursor: page.headers.get('Events-Cursor') || '' });
    next = page.next;
    summary();
  }

  function listPath() {
    const params = new URLSearchParams({ limit: '20' });
    if (status) params.set('status', status);
    if (category) params.set('categoryId', category);
    return '/v1/pets?' + params;
  }

  async function reading(work) {
    queue = queue || [];
    try {
      await work();
    } finally {
      const waiting = queue;
      queue = null;
      waiting.forEach(onEvent);
    }
  }

  const load = () => reading(async () => {
    const [page] = await Promise.all([get(listPath()), loadCategories()]);
    pets.clear();
    pages = [];
    rows.replaceChildren();
    add(page);
    drawCategories();
  });

  async function loadMore() {
    if (!next) return;
    more.disabled = true;
    try {
      const before = pets.size;
      await reading(async () => add(await get(next)));
      // The focus stays on a useful place: the first new row's link, or the button.
      const first = [...rows.rows][before]?.querySelector('a');
      if (first) first.focus();
    } catch (error) {
      ctx.flash(error.message);
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
    const page = pages.find((p) => id <= p.hi) || pages.at(-1);
    if (!page || event.cursor <= (known ? known.cursor : page.cursor)) return;
    if (!event.pet || !matches(event.pet)) {
      if (known) { known.row.remove(); pets.delete(id); summary(); }
      return;
    }
    const entry = known || {};
    Object.assign(entry, { pet: event.pet, cursor: event.cursor });
    draw(entry);
    if (!known) { pets.set(id, entry); place(entry); summary(); }
  }

  // A filter reads the list again in place: the focus stays on the select (arrow keys change
  // a select's value at once), and the address keeps the filters for a reload or a bookmark.
  function filter() {
    status = statusSelect.value;
    category = categorySelect.value;
    const params = new URLSearchParams();
    if (status) params.set('status', status);
    if (category) params.set('category', category);
    const query = params.toString();
    history.replaceState(null, '', `${base}/pets${query ? '?' + query : ''}`);
    ctx.reloading(load());
  }
  statusSelect.addEventListener('change', filter);
  categorySelect.addEventListener('change', filter);
  const unwatch = watchCategories(drawCategories);

  return {
    title: 'Pets',
    node: h('section', null,
      h('div', { class: 'title-row' },
        h('h1', { tabindex: '-1' }, 'Pets'),
        ctx.canWrite ? h('a', { class: 'button primary', href: base + '/pets/new' }, 'Add pet') : null),
      h('form', { class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); filter(); } },
        field('Status', statusSelect), field('Category', categorySelect)),
      table, empty, shown, more),
    ready: load(),
    refresh: load,
    onEvent,
    leave: unwatch,
  };
}

// Orders: sell a pet (place an order, which holds it), complete the sale or cancel it, and the
// list of orders, found by their pet's name, sorted and filtered by status (all kept in the
// address), kept current by the feed with the search's own rules (search.js). An order only
// ever moves from placed to one final status, so an event never takes an order back.

import { base, fieldOf, fieldWords, get, plain, request } from './api.js';
import { alertLine, badge, busy, confirmAction, field, fill, h, hidden, ORDER_STATUS, select, time } from './dom.js';
import { searchBox } from './pets.js';
import { matches as nameMatches, parse } from './search.js';
import { notePet, pet as petById } from './store.js';

const nameOf = (pet) => pet.name || `Pet ${pet.id}`;

/**
 * The form that sells a pet: with `petId` it sells that one (a note only), else it offers the
 * available pets. `onPlaced(order)` runs after the 201.
 */
export function placeOrderForm({ petId = null, onPlaced }) {
  const note = h('input', { type: 'text', name: 'note', autocomplete: 'off', maxlength: '500' });
  const noteField = field('Note', note, 'Optional, e.g. who collects the pet and when.');
  const petSelect = h('select', { name: 'petId' });
  const petField = petId === null ? field('Pet', petSelect) : null;
  const problem = alertLine();
  const button = h('button', { type: 'submit', class: 'primary' }, 'Place order');
  let idempotencyKey = crypto.randomUUID();

  async function loadPets() {
    if (!petField) return;
    // A small shop has a few dozen pets on sale; past 1,000 the pet's own page sells it.
    const data = [];
    for (let next = '/v1/pets?status=available&limit=100', pages = 0; next && pages < 10; pages++) {
      const page = await get(next);
      data.push(...page.data);
      next = page.next;
    }
    const chosen = petSelect.value;
    for (const pet of data) notePet(pet.id, pet);
    fill(petSelect,
      h('option', { value: '' }, data.length ? 'Choose a pet' : 'No pets are available'),
      data.map((pet) => h('option', { value: String(pet.id) }, `${nameOf(pet)} (no. ${pet.id})`)));
    petSelect.value = data.some((pet) => String(pet.id) === chosen) ? chosen : '';
  }

  const form = h('form', { novalidate: true, onsubmit: (event) => {
    event.preventDefault();
    busy(button, async () => {
      petField?.error('');
      noteField.error('');
      problem.say('');
      const body = {};
      const chosen = petId ?? (petSelect.value === '' ? null : Number(petSelect.value));
      if (chosen !== null) body.petId = chosen;
      if (note.value.trim()) body.note = note.value.trim();
      try {
        const { data } = await request('POST', '/v1/store/orders', { body, headers: { 'Idempotency-Key': idempotencyKey } });
        idempotencyKey = crypto.randomUUID();
        note.value = '';
        onPlaced(data);
        loadPets().catch(() => {});
      } catch (error) {
        const which = fieldOf(error);
        if (which === 'note') noteField.error(fieldWords(error));
        else if (which === 'petId' && petField) petField.error(fieldWords(error));
        else if (petField && ['pet_not_available', 'not_found'].includes(error.code)) petField.error(plain(error));
        else problem.say(plain(error));
      }
    });
  } }, petField, noteField, problem, h('div', { class: 'actions' }, button));
  form.loadPets = loadPets;
  return form;
}

/** "Complete sale" and "Cancel order" for a placed order; `onDone(order)` after either. */
export function orderActions(order, petName, { onDone }) {
  const problem = alertLine();
  const complete = h('button', { type: 'button', class: 'primary' }, 'Complete sale', hidden(` of order ${order.id}`));
  const cancel = h('button', { type: 'button', class: 'danger' }, 'Cancel order', hidden(` ${order.id}`));
  const act = (button, what) => busy(button, async () => {
    problem.say('');
    try {
      const { data } = await request('POST', `/v1/store/orders/${order.id}/${what}`);
      onDone(data);
    } catch (error) {
      problem.say(plain(error));
    }
  });
  complete.addEventListener('click', () => act(complete, 'complete'));
  cancel.addEventListener('click', async () => {
    const sure = await confirmAction({
      title: `Cancel order ${order.id}?`,
      text: `The sale of ${petName} stops and ${petName} is available again.`,
      yes: 'Yes, cancel order', no: 'Keep order',
    });
    if (sure) act(cancel, 'cancel');
  });
  return h('div', null, h('div', { class: 'actions' }, complete, cancel), problem);
}

export function orders(ctx) {
  let q = ctx.query.get('q') || '';
  let terms = parse(q).terms;
  let sort = ctx.query.get('sort') === '-id' ? '-id' : 'id';
  let status = ctx.query.get('status') || '';
  const search = searchBox({ label: 'Search orders', hint: 'By the start of any word of the pet’s name.', value: q, onSearch: () => filter() });
  const sortSelect = select([['id', 'Oldest first'], ['-id', 'Newest first']], sort);
  const statusSelect = select([['', 'All orders'], ...Object.entries(ORDER_STATUS)], status);
  const list = h('ul', { class: 'cards' });
  const empty = h('p', { class: 'empty', hidden: true });
  const more = h('button', { type: 'button', hidden: true, onclick: () => loadMore() }, 'Load more');
  const sell = ctx.canWrite
    ? placeOrderForm({ onPlaced: (order) => ctx.flash(`Order ${order.id} placed.`) })
    : null;

  const known = new Map();  // id -> {order, item}
  let next = null;
  let queue = null;
  let reads = 0;
  // Each search, sort or filter is a new generation: an answer to an older one is dropped.
  let generation = 0;
  let aborter = null;

  // Whether an order belongs in the list, its pet as it is now (`pet`; null: deleted).
  const belongs = (order, pet) => (!status || order.status === status) && (!terms.length || Boolean(pet && nameMatches(terms, pet.name)));

  async function draw(entry) {
    const { order } = entry;
    const pet = await petById(order.petId).catch(() => undefined);
    // A newer version of the order came while the pet was read: its own draw shows it.
    if (entry.order !== order) return;
    const petName = pet ? nameOf(pet) : `Pet ${order.petId}`;
    const headingId = `order-${order.id}`;
    fill(entry.item,
      h('h3', { id: headingId }, `Order ${order.id}`, ' · ',
        pet ? h('a', { href: `${base}/pets/${order.petId}` }, petName) : `${petName}${pet === null ? ' (deleted)' : ''}`),
      h('p', null, badge('order', order.status), ' ',
        'Placed ', time(order.placedAt),
        order.status === 'placed' && order.expiresAt ? [' · held until ', time(order.expiresAt)] : null,
        order.closedAt ? [' · closed ', time(order.closedAt)] : null),
      order.note ? h('p', { class: 'hint' }, 'Note: ', order.note) : null,
      ctx.canWrite && order.status === 'placed'
        ? orderActions(order, petName, { onDone: (done) => { onEvent({ type: 'order.' + done.status, orderId: done.id, order: done }); ctx.flash(`Order ${done.id} ${ORDER_STATUS[done.status].toLowerCase()}.`); } })
        : null);
  }

  function summary() {
    empty.hidden = known.size > 0;
    const which = status ? ` ${ORDER_STATUS[status].toLowerCase()}` : '';
    empty.textContent = terms.length
      ? `No${which} order matches “${q}”.`
      : status ? `No${which} orders.` : 'No orders yet.';
    more.hidden = !next;
  }

  const remove = (id) => {
    const entry = known.get(id);
    if (entry) { entry.item.remove(); known.delete(id); }
  };

  function upsert(order) {
    const entry = known.get(order.id);
    if (entry) {
      // An order only ever leaves placed: a final version is never taken back.
      if (entry.order.status !== 'placed' && order.status === 'placed') return;
      entry.order = order;
      draw(entry);
      return;
    }
    const item = h('li', { class: 'card order' });
    const fresh = { order, item };
    known.set(order.id, fresh);
    // In the list's order, as the API pages them: "Load more" adds the further ones below.
    const key = (id) => (sort === '-id' ? -id : id);
    const after = [...known.keys()].filter((id) => key(id) > key(order.id)).sort((a, b) => key(a) - key(b))[0];
    list.insertBefore(item, after === undefined ? null : known.get(after).item);
    draw(fresh);
  }

  function add(page) {
    for (const order of page.data) upsert(order);
    next = page.next;
    summary();
  }

  async function reading(work) {
    queue = queue || [];
    reads++;
    try { return await work(); } finally {
      if (--reads === 0) {
        const waiting = queue;
        queue = null;
        waiting.forEach(onEvent);
      }
    }
  }

  const stale = (mine, error) => mine !== generation || error?.name === 'AbortError';

  const path = () => {
    const params = new URLSearchParams({ limit: '20' });
    if (terms.length) params.set('q', q);
    if (sort !== 'id') params.set('sort', sort);
    if (status) params.set('status', status);
    return '/v1/store/orders?' + params;
  };
  // A search, sort or filter reads the orders only; a first load or a refresh, the pets too.
  const load = ({ pets = true } = {}) => {
    const mine = ++generation;
    aborter?.abort();
    const { signal } = (aborter = new AbortController());
    return reading(async () => {
      try {
        const [page] = await Promise.all([get(path(), { signal }), pets ? sell?.loadPets() : null]);
        if (mine !== generation) return;
        known.clear();
        list.replaceChildren();
        add(page);
      } catch (error) {
        if (stale(mine, error)) return;
        if (error.status === 400 && /^q /.test(error.message)) {
          search.error(fieldWords(error));
          return;
        }
        throw error;
      }
    });
  };

  async function loadMore() {
    const mine = generation;
    more.disabled = true;
    try {
      await reading(async () => {
        const page = await get(next, { signal: aborter?.signal });
        if (mine === generation) add(page);
      });
    } catch (error) {
      if (!stale(mine, error)) ctx.flash(plain(error));
    } finally {
      more.disabled = false;
    }
  }

  // A pet renamed so that it matches the search now: its orders are read, and those the list
  // takes are shown (a pet has few orders).
  async function takeOrdersOf(petId) {
    const mine = generation;
    const params = new URLSearchParams({ petId: String(petId), limit: '100' });
    if (status) params.set('status', status);
    try {
      const { data } = await get('/v1/store/orders?' + params, { signal: aborter?.signal });
      const pet = await petById(petId);
      if (mine !== generation) return;
      for (const order of data) if (belongs(order, pet)) upsert(order);
      summary();
    } catch { /* the next change or a reload shows them */ }
  }

  let petsTimer = 0;
  function onEvent(event) {
    if (queue) { queue.push(event); return; }
    if (event.type.startsWith('order.')) {
      const { order } = event;
      const entry = known.get(order.id);
      if (entry && entry.order.status !== 'placed') return;
      // An order's event from the feed carries its pet as it is now; one from this page's own
      // buttons (no pet) is about an order shown, whose pet matches.
      if ('pet' in event ? belongs(order, event.pet) : !status || order.status === status) upsert(order);
      else remove(order.id);
      summary();
    } else if ('petId' in event) {
      const shown = [...known.values()].filter((entry) => entry.order.petId === event.petId);
      if (terms.length && !(event.pet && nameMatches(terms, event.pet.name))) {
        for (const entry of shown) remove(entry.order.id);
        if (shown.length) summary();
      } else {
        for (const entry of shown) draw(entry);
        if (terms.length && event.type === 'pet.updated') takeOrdersOf(event.petId);
      }
    }
    // The pets a sale may offer change with pets and orders: read again, once for a burst.
    if (sell && 'petId' in event) {
      clearTimeout(petsTimer);
      petsTimer = setTimeout(() => sell.loadPets().catch(() => {}), 100);
    }
  }

  // As on the pets list: read again in place, the search, sort and filter kept in the address.
  function filter() {
    q = search.value();
    terms = parse(q).terms;
    sort = sortSelect.value;
    status = statusSelect.value;
    const params = new URLSearchParams();
    if (terms.length) params.set('q', q);
    if (sort !== 'id') params.set('sort', sort);
    if (status) params.set('status', status);
    const query = params.toString();
    history.replaceState(null, '', `${base}/orders${query ? '?' + query : ''}`);
    return ctx.reloading(load({ pets: false }));
  }
  sortSelect.addEventListener('change', filter);
  statusSelect.addEventListener('change', filter);

  return {
    title: 'Orders',
    node: h('section', null,
      h('h1', { tabindex: '-1' }, 'Orders'),
      sell ? h('section', { class: 'card' }, h('h2', { id: 'sell-title' }, 'Sell a pet'), sell) : null,
      h('h2', null, 'All orders'),
      h('form', { class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); search.now(); } },
        search, field('Sort', sortSelect), field('Status', statusSelect)),
      list, h('div', { role: 'status' }, empty), more),
    ready: load(),
    refresh: () => load(),
    onEvent,
    leave() { clearTimeout(petsTimer); search.stop(); aborter?.abort(); },
  };
}

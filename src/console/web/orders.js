// Orders: sell a pet (place an order, which holds it), complete the sale or cancel it, and the
// list of orders by status, kept current by the feed. An order only ever moves from placed to
// one final status, so an event never takes an order back.

import { base, fieldOf, get, plain, request } from './api.js';
import { alertLine, badge, busy, confirmAction, field, fill, h, hidden, ORDER_STATUS, select, time } from './dom.js';
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
        if (which === 'note') noteField.error(plain(error));
        else if (which === 'petId' && petField) petField.error(chosen === null ? 'Choose the pet to sell.' : plain(error));
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
  let status = ctx.query.get('status') || '';
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
    empty.textContent = status ? `No ${ORDER_STATUS[status].toLowerCase()} orders.` : 'No orders yet.';
    more.hidden = !next;
  }

  function upsert(order) {
    const entry = known.get(order.id);
    if (entry) {
      entry.order = order;
      draw(entry);
      return;
    }
    const item = h('li', { class: 'card order' });
    const fresh = { order, item };
    known.set(order.id, fresh);
    // In id order, as the API pages them: "Load more" adds the newer ones below.
    const after = [...known.keys()].filter((id) => id > order.id).sort((a, b) => a - b)[0];
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
    try { await work(); } finally {
      const waiting = queue;
      queue = null;
      waiting.forEach(onEvent);
    }
  }

  const path = () => '/v1/store/orders?limit=20' + (status ? '&status=' + status : '');
  const load = () => reading(async () => {
    const [page] = await Promise.all([get(path()), sell?.loadPets()]);
    known.clear();
    list.replaceChildren();
    add(page);
  });

  async function loadMore() {
    more.disabled = true;
    try { await reading(async () => add(await get(next))); } catch (error) { ctx.flash(plain(error)); } finally { more.disabled = false; }
  }

  let petsTimer = 0;
  function onEvent(event) {
    if (queue) { queue.push(event); return; }
    if (event.type.startsWith('order.')) {
      const { order } = event;
      const entry = known.get(order.id);
      if (entry && entry.order.status !== 'placed') return;
      if (status && order.status !== status) {
        if (entry) { entry.item.remove(); known.delete(order.id); summary(); }
      } else {
        upsert(order);
        summary();
      }
    } else if ('petId' in event) {
      for (const entry of known.values()) if (entry.order.petId === event.petId) draw(entry);
    }
    // The pets a sale may offer change with pets and orders: read again, once for a burst.
    if (sell && 'petId' in event) {
      clearTimeout(petsTimer);
      petsTimer = setTimeout(() => sell.loadPets().catch(() => {}), 100);
    }
  }

  // As on the pets list: read again in place, the filter kept in the address.
  statusSelect.addEventListener('change', () => {
    status = statusSelect.value;
    history.replaceState(null, '', `${base}/orders${status ? '?status=' + status : ''}`);
    ctx.reloading(load());
  });

  return {
    title: 'Orders',
    node: h('section', null,
      h('h1', { tabindex: '-1' }, 'Orders'),
      sell ? h('section', { class: 'card' }, h('h2', { id: 'sell-title' }, 'Sell a pet'), sell) : null,
      h('h2', null, 'All orders'),
      h('form', { class: 'filters', role: 'search', onsubmit: (e) => e.preventDefault() }, field('Status', statusSelect)),
      list, empty, more),
    ready: load(),
    refresh: load,
    onEvent,
    leave() { clearTimeout(petsTimer); },
  };
}

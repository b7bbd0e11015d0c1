// The first screen: the inventory counts at a glance (each a link to the pets it counts),
// the orders waiting for their sale to be completed, and the day's first actions.

import { base, get } from './api.js';
import { fill, h } from './dom.js';

const COUNTS = [
  ['available', 'Available', '/pets?status=available'],
  ['pending', 'Pending', '/pets?status=pending'],
  ['sold', 'Sold', '/pets?status=sold'],
  ['unset', 'No status', null],
  ['total', 'Total', '/pets'],
];

export function overview(ctx) {
  const numbers = {};
  const counts = h('ul', { class: 'counts' }, COUNTS.map(([key, words, href]) => {
    numbers[key] = h('span', { class: 'number' }, '…');
    const inner = [numbers[key], h('span', { class: 'words' }, words)];
    return h('li', { class: 'count count-' + key }, href ? h('a', { href: base + href }, inner) : h('div', null, inner));
  }));
  const waiting = h('p', null, '…');

  async function load() {
    const [inventory, placed] = await Promise.all([
      get('/v1/store/inventory'),
      get('/v1/store/orders?status=placed&limit=100'),
    ]);
    for (const [key] of COUNTS) numbers[key].textContent = String(inventory.data[key]);
    const n = placed.data.length;
    fill(waiting, n === 0
      ? 'No orders are waiting to be completed.'
      : h('a', { href: base + '/orders?status=placed' },
        `${n}${placed.next ? '+' : ''} ${n === 1 ? 'order is' : 'orders are'} waiting to be completed`));
  }

  // The counts change with every pet and order event; a burst is read once.
  let timer = 0;
  const later = () => { clearTimeout(timer); timer = setTimeout(() => load().catch(() => {}), 50); };

  return {
    title: 'Overview',
    node: h('section', null,
      h('h1', { tabindex: '-1' }, 'Overview'),
      h('h2', null, 'Inventory'),
      counts,
      h('h2', null, 'Sales'),
      waiting,
      ctx.canWrite ? h('p', { class: 'actions' },
        h('a', { class: 'button primary', href: base + '/pets/new' }, 'Add pet'),
        h('a', { class: 'button', href: base + '/orders' }, 'Sell a pet')) : readOnlyNote()),
    ready: load(),
    refresh: load,
    onEvent(event) { if (!event.type.startsWith('category.')) later(); },
    leave() { clearTimeout(timer); },
  };
}

/** What a read-only key's holder is told once, on the first screen. */
export const readOnlyNote = () =>
  h('p', { class: 'note' }, 'Your key can look but not change anything: the buttons that make changes are not shown.');

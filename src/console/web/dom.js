// Small DOM helpers: an element builder (no HTML strings, so no injection), labelled form
// fields with their error line, the confirmation dialog, and the words for statuses and times.
// The CSP allows no inline style or handler: everything is classes, `hidden` and listeners.

/** h('button', {class: 'x', onclick: fn}, 'text', child, [more]) */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value == null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : value);
  }
  put(el, children);
  return el;
}

function put(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child != null && child !== false) el.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  put(el, children);
  return el;
}

let ids = 0;
/** A fresh id for label/for and aria-describedby pairs. */
export const uid = (prefix = 'c') => `${prefix}-${++ids}`;

/** Text a screen reader reads but the eye does not see (a button's context, say). */
export const hidden = (text) => h('span', { class: 'vh' }, text);

/**
 * A labelled control with its hint and its error line (`field.error('…')` shows one, `''`
 * clears it; `field.error({text, raw})` shows `text` with the API's own words as its title);
 * the control names both with aria-describedby.
 */
export function field(label, control, hint) {
  const id = control.id || (control.id = uid('f'));
  const error = h('p', { class: 'error', id: id + '-error', hidden: true });
  const described = [hint && id + '-hint', id + '-error'].filter(Boolean).join(' ');
  control.setAttribute('aria-describedby', described);
  const wrap = h('div', { class: 'field' },
    h('label', { for: id }, label),
    hint && h('p', { class: 'hint', id: id + '-hint' }, hint),
    control, error);
  wrap.control = control;
  wrap.error = (message) => {
    const { text, raw } = typeof message === 'object' && message ? message : { text: message };
    error.textContent = text || '';
    error.hidden = !text;
    if (raw && raw !== text) error.title = `The server said: ${raw}`;
    else error.removeAttribute('title');
    if (text) control.setAttribute('aria-invalid', 'true');
    else control.removeAttribute('aria-invalid');
  };
  return wrap;
}

/** A <select> of [value, words] pairs with `selected` chosen. */
export function select(options, selected, props = {}) {
  return h('select', props, options.map(([value, words]) =>
    h('option', { value, selected: String(value) === String(selected ?? '') }, words)));
}

/** A line for messages of a form as a whole: role=alert, so it is read out when it appears. */
export function alertLine() {
  const line = h('p', { class: 'error', role: 'alert', hidden: true });
  line.say = (message) => { line.textContent = message || ''; line.hidden = !message; };
  return line;
}

/** Disables a button while `work` runs, so a double click sends one request. */
export async function busy(button, work) {
  button.disabled = true;
  try { return await work(); } finally { button.disabled = false; }
}

/**
 * Asks before a destructive action, in a modal dialog made for the question and removed after
 * it (so no stale label lingers in the page). Escape or the second button says no. Resolves to
 * true only for the first button.
 */
export function confirmAction({ title, text, yes, no }) {
  const before = document.activeElement;
  const yesButton = h('button', { type: 'button', class: 'danger' }, yes);
  const noButton = h('button', { type: 'button' }, no);
  const dialog = h('dialog', { 'aria-labelledby': 'confirm-title', 'aria-describedby': 'confirm-text' },
    h('h2', { id: 'confirm-title' }, title),
    h('p', { id: 'confirm-text' }, text),
    h('div', { class: 'actions' }, yesButton, noButton));
  document.body.append(dialog);
  return new Promise((resolve) => {
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      if (before && before.isConnected) before.focus();
      resolve(answer);
    };
    yesButton.addEventListener('click', () => done(true));
    noButton.addEventListener('click', () => done(false));
    dialog.addEventListener('cancel', (event) => { event.preventDefault(); done(false); });
    dialog.showModal();
    // The safe answer has the focus: Enter alone never destroys anything.
    noButton.focus();
  });
}

export const PET_STATUS = { available: 'Available', pending: 'Pending', sold: 'Sold', '': 'No status' };
export const ORDER_STATUS = { placed: 'Placed', completed: 'Completed', cancelled: 'Cancelled', expired: 'Expired' };

/** A status as a word in a badge; the colour only repeats what the word says. */
export const badge = (kind, status) =>
  h('span', { class: `badge ${kind}-${status || 'none'}` },
    (kind === 'pet' ? PET_STATUS : ORDER_STATUS)[status || ''] || status);

/** A time as the shop reads it: the hour today, the date and hour otherwise. */
export function when(iso) {
  if (!iso) return '';
  const date = new Date(iso);
  const today = new Date().toDateString() === date.toDateString();
  return today
    ? date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
    : date.toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' });
}

/** A <time> element for an RFC 3339 instant. */
export const time = (iso) => h('time', { datetime: iso }, when(iso));

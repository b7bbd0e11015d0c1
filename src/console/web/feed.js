// The live feed: one EventSource on /v1/events (the session cookie goes with it), started at a
// position taken before the current view loaded, so that no change between the load and the
// stream is missed. A dropped connection is resumed by the browser itself (Last-Event-ID);
// a refused one (410: the position was purged; 401; 503) closes the EventSource, and the app
// is told so that it can check the session, list again and follow from a new position.

const TYPES = [
  'pet.created', 'pet.updated', 'pet.deleted',
  'order.placed', 'order.completed', 'order.cancelled', 'order.expired',
  'category.created', 'category.updated', 'category.deleted',
];

let source = null;
let listener = () => {};
let lost = () => {};
let showState = () => {};

/** Sets who hears each event, who is told when the stream is refused, and who shows its state. */
export function configure({ onEvent, onLost, onState }) {
  listener = onEvent;
  lost = onLost;
  showState = onState;
}

/** Follows the feed from `cursor` (a position: every later change arrives). */
export function start(cursor) {
  stop();
  const url = '/v1/events' + (cursor ? '?after=' + encodeURIComponent(cursor) : '');
  const es = new EventSource(url);
  source = es;
  showState('connecting');
  es.addEventListener('open', () => { if (source === es) showState('live'); });
  es.addEventListener('error', () => {
    if (source !== es) return;
    if (es.readyState === EventSource.CLOSED) {
      source = null;
      showState('lost');
      lost();
    } else {
      showState('connecting');
    }
  });
  for (const type of TYPES) {
    es.addEventListener(type, (message) => {
      if (source !== es) return;
      let event;
      try { event = JSON.parse(message.data); } catch { return; }
      listener(event);
    });
  }
}

/** Closes the stream (sign-out, or before a new start). */
export function stop() {
  if (source) source.close();
  source = null;
  showState('off');
}

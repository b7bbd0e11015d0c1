// What several views share and keep current from the feed: the categories (few, read whole)
// and the pets met so far (an order names its pet by id). Views subscribe to hear changes.

import { get, getAll } from './api.js';

const categories = new Map();
let categoriesLoaded = null;
const watchers = new Set();

/** Runs `fn` after every change to the categories; returns the unsubscribe. */
export function watchCategories(fn) {
  watchers.add(fn);
  return () => watchers.delete(fn);
}

const changed = () => { for (const fn of watchers) fn(); };

/** Every category, loaded once (then kept current by the feed); `fresh` reads them again. */
export async function loadCategories(fresh = false) {
  if (fresh || !categoriesLoaded) {
    categoriesLoaded = readCategories().then((list) => {
      categories.clear();
      for (const category of list) categories.set(category.id, category);
      changed();
    }).catch((error) => { categoriesLoaded = null; throw error; });
  }
  return categoriesLoaded;
}

// A category event that arrives while the list is read may be older or newer than what the
// read shows (categories have no revision to compare): then read again, until one read saw
// no change go by.
let reading = false;
let touched = false;
async function readCategories() {
  for (let tries = 0; ; tries++) {
    reading = true;
    touched = false;
    try {
      const list = await getAll('/v1/categories?limit=100');
      if (!touched || tries === 4) return list;
    } finally {
      reading = false;
    }
  }
}

/** The categories by name, for lists and selects. */
export const categoryList = () =>
  [...categories.values()].sort((a, b) => a.name.localeCompare(b.name) || a.id - b.id);

/** A category's name, or words saying the pet's category id names none. */
export const categoryName = (id) => categories.get(id)?.name ?? `Category ${id} (not set up)`;

export const hasCategory = (id) => categories.has(id);

/** A category this console just created: kept at once (its feed event follows). */
export function noteCategory(category) {
  categories.set(category.id, category);
  changed();
}

const pets = new Map();

/** Remembers pets as lists and events show them (null: deleted). */
export function notePet(id, pet) { pets.set(id, pet); }

const fetching = new Map();

/**
 * A pet by id: from memory, or read once however many ask at the same time (null when it no
 * longer exists).
 */
export function pet(id) {
  if (pets.has(id)) return Promise.resolve(pets.get(id));
  if (!fetching.has(id)) {
    fetching.set(id, get('/v1/pets/' + id).then(({ data }) => data, (error) => {
      if (error.status === 404) return null;
      throw error;
    }).then((data) => {
      // The feed may have told of a newer version meanwhile: that one stays.
      if (!pets.has(id)) pets.set(id, data);
      return pets.get(id);
    }).finally(() => fetching.delete(id)));
  }
  return fetching.get(id);
}

/** Applies a feed event to what is kept here. */
export function apply(event) {
  if (event.type.startsWith('category.')) {
    if (reading) touched = true;
    if (event.category) categories.set(event.categoryId, event.category);
    else categories.delete(event.categoryId);
    changed();
  } else if ('petId' in event) {
    pets.set(event.petId, event.pet);
  }
}

/** Forgets everything (sign-out: the next key may see another shop). */
export function forget() {
  categories.clear();
  categoriesLoaded = null;
  pets.clear();
  changed();
}

// One pet: what it is now (kept current by the feed), its sale in progress, and for a key that
// may write: change its details (PATCH with If-Match, so a change made elsewhere first is a 412
// that is shown, never overwritten, and nothing typed is lost), sell it, delete it. Also the
// "Add pet" form, which shares the fields and, in a shop without categories, creates one.

import { base, fieldOf, fieldWords, get, plain, request, revision } from './api.js';
import { alertLine, badge, busy, confirmAction, field, fill, h, PET_STATUS, select } from './dom.js';
import { categoryList, categoryName, hasCategory, loadCategories, noteCategory, watchCategories } from './store.js';
import { orderActions, placeOrderForm } from './orders.js';

const STATUS_OPTIONS = [['available', PET_STATUS.available], ['pending', PET_STATUS.pending], ['sold', PET_STATUS.sold], ['', PET_STATUS['']]];
const PATCH = 'application/merge-patch+json';
const nameOf = (pet) => pet.name || `Pet ${pet.id}`;

/**
 * Name, Category and Status fields; `values()` reads them, `set(pet)` writes them. With
 * `offerNew`, a shop without any category is offered to create one on the spot.
 */
function petFields(pet, { offerNew = false } = {}) {
  const name = h('input', { type: 'text', name: 'name', autocomplete: 'off', value: pet?.name ?? '' });
  const category = h('select', { name: 'categoryId' });
  const status = select(STATUS_OPTIONS, pet ? pet.status || '' : 'available', { name: 'status' });
  const fields = {
    name: field('Name', name),
    categoryId: field('Category', category),
    status: field('Status', status),
  };
  let chosen = pet ? String(pet.categoryId) : '';
  category.addEventListener('change', () => { chosen = category.value; });
  const creator = offerNew ? newCategory((created) => {
    chosen = String(created.id);
    drawCategories();
    fields.categoryId.error('');
    category.focus();
  }) : null;
  function drawCategories() {
    const list = categoryList();
    fill(category,
      chosen === '' ? h('option', { value: '' }, list.length ? 'Choose a category' : 'No categories yet') : null,
      chosen !== '' && !hasCategory(Number(chosen)) ? h('option', { value: chosen }, categoryName(Number(chosen))) : null,
      list.map((c) => h('option', { value: String(c.id) }, c.name)));
    category.value = chosen;
    // Offered while the shop has no category at all; once there is one, it is chosen above.
    if (creator) {
      if (list.length) creator.remove();
      else if (!creator.isConnected) fields.categoryId.after(creator);
    }
  }
  drawCategories();
  return {
    fields,
    nodes: [fields.name, fields.categoryId, fields.status],
    drawCategories,
    values: () => ({ name: name.value.trim(), categoryId: category.value === '' ? null : Number(category.value), status: status.value || null }),
    set(p) {
      name.value = p.name;
      chosen = String(p.categoryId);
      drawCategories();
      status.value = p.status || '';
    },
    clearErrors() { for (const f of Object.values(fields)) f.error(''); },
    /** Shows an API error next to the field it names; false when it names none. */
    showError(error) {
      const which = fieldOf(error);
      if (!which) return false;
      fields[which].error(fieldWords(error));
      fields[which].control.focus();
      return true;
    },
  };
}

/**
 * "No categories yet — create one": a category name and "Create category", inside the add-pet
 * form (no form of its own: forms do not nest, so Enter in its field creates, not submits).
 * `onCreated(category)` runs after the 201.
 */
function newCategory(onCreated) {
  const input = h('input', { type: 'text', name: 'new-category', autocomplete: 'off', maxlength: '100' });
  const nameField = field('Name of the new category', input, 'For example Dogs, Cats or Birds.');
  const button = h('button', { type: 'button' }, 'Create category');
  const create = () => busy(button, async () => {
    nameField.error('');
    const name = input.value.trim();
    if (!name) {
      nameField.error('Type a name for the category.');
      input.focus();
      return;
    }
    try {
      const { data } = await request('POST', '/v1/categories', { body: { name } });
      input.value = '';
      noteCategory(data);
      onCreated(data);
    } catch (error) {
      nameField.error(fieldWords(error, 'category'));
      input.focus();
    }
  });
  button.addEventListener('click', create);
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.isComposing) { event.preventDefault(); create(); }
  });
  return h('fieldset', { class: 'inline-new' },
    h('legend', null, 'No categories yet — create one'),
    nameField, h('div', { class: 'actions' }, button));
}

export function newPet(ctx) {
  if (!ctx.canWrite) return readOnlyPage('Add pet');
  const form = petFields(null, { offerNew: true });
  const problem = alertLine();
  const button = h('button', { type: 'submit', class: 'primary' }, 'Add pet');
  // One key per form: a retry after a lost answer gets the first pet back, not a second one.
  let idempotencyKey = crypto.randomUUID();
  const submit = (event) => {
    event.preventDefault();
    busy(button, async () => {
      form.clearErrors();
      problem.say('');
      const { name, categoryId, status } = form.values();
      // An empty field is left out, so that the API says what is missing, next to it.
      const body = {};
      if (name) body.name = name;
      if (categoryId !== null) body.categoryId = categoryId;
      if (status) body.status = status;
      try {
        const { data } = await request('POST', '/v1/pets', { body, headers: { 'Idempotency-Key': idempotencyKey } });
        idempotencyKey = crypto.randomUUID();
        ctx.go(`/pets/${data.id}`, { flash: `${nameOf(data)} was added.` });
      } catch (error) {
        if (!form.showError(error)) problem.say(plain(error));
      }
    });
  };
  const unwatch = watchCategories(form.drawCategories);
  return {
    title: 'Add pet',
    node: h('section', null,
      h('p', { class: 'crumbs' }, h('a', { href: base + '/pets' }, 'Pets')),
      h('h1', { tabindex: '-1' }, 'Add pet'),
      h('form', { class: 'card', novalidate: true, onsubmit: submit },
        form.nodes,
        h('p', { class: 'hint' }, 'A category is missing? ', h('a', { href: base + '/categories' }, 'Add it under Categories'), '.'),
        problem,
        h('div', { class: 'actions' }, button, h('a', { class: 'button', href: base + '/pets' }, 'Back to pets')))),
    // Drawn again once the form is on the page, which offers a new category if there is none.
    ready: loadCategories().then(() => form.drawCategories()),
    leave: unwatch,
  };
}

export function petPage(ctx) {
  const id = Number(ctx.params[0]);
  let pet = null;       // as the server has it now
  let etag = '';        // its ETag
  let hold = null;      // the placed order holding it, if any
  let deleted = false;
  let holdDrawn = '';   // which hold the sale box shows
  // The form edits a version of the pet (`editing`, with `editingTag`): a save is sent with
  // that version's ETag, so a change made elsewhere since is a 412, never overwritten.
  let editing = null;
  let editingTag = '';

  const title = h('h1', { tabindex: '-1' }, '…');
  const facts = h('dl', { class: 'facts' });
  const holdBox = h('section', { class: 'card', hidden: true });
  const sellBox = h('section', { class: 'card', hidden: true });
  const gone = h('p', { class: 'note', role: 'alert', hidden: true });

  const form = petFields(null);
  const problem = alertLine();
  const changed = h('div', { class: 'conflict', role: 'alert', hidden: true });
  const save = h('button', { type: 'submit', class: 'primary' }, 'Save changes');
  const useCurrent = h('button', { type: 'button', hidden: true, onclick: () => startEditing() }, 'Use current details');
  const editBox = h('section', { class: 'card', hidden: !ctx.canWrite },
    h('h2', { id: 'edit-title' }, 'Change details'),
    h('form', { novalidate: true, onsubmit: (event) => { event.preventDefault(); busy(save, saveChanges); } },
      changed, form.nodes, problem, h('div', { class: 'actions' }, save, useCurrent)));
  const remove = h('button', { type: 'button', class: 'danger', onclick: () => deletePet() }, 'Delete');
  const deleteBox = h('section', { class: 'card', hidden: !ctx.canWrite },
    h('h2', { id: 'delete-title' }, 'Delete'),
    h('p', { class: 'hint' }, 'Removes this pet from the shop for good.'), remove);
  const deleteProblem = alertLine();
  deleteBox.append(deleteProblem);

  function startEditing() {
    editing = pet;
    editingTag = etag;
    form.set(pet);
    form.clearErrors();
    changed.hidden = true;
    useCurrent.hidden = true;
    problem.say('');
  }

  const describe = (p) => `${nameOf(p)}, ${categoryName(p.categoryId)}, ${PET_STATUS[p.status || '']}`;

  function drawFacts() {
    title.textContent = deleted ? (pet ? `${nameOf(pet)} (deleted)` : 'Pet not found') : nameOf(pet);
    document.title = `${title.textContent} · Pet shop console`;
    if (deleted) {
      for (const box of [facts, holdBox, sellBox, editBox, deleteBox]) box.hidden = true;
      gone.hidden = false;
      fill(gone, pet ? 'This pet has just been deleted. ' : `There is no pet number ${id}: it may have been deleted. `,
        h('a', { href: base + '/pets' }, 'Back to pets'), '.');
      return;
    }
    fill(facts,
      h('div', null, h('dt', null, 'Status'), h('dd', null, badge('pet', pet.status))),
      h('div', null, h('dt', null, 'Category'), h('dd', null, categoryName(pet.categoryId))),
      h('div', null, h('dt', null, 'Number'), h('dd', null, String(pet.id))));
    holdBox.hidden = !hold;
    // Drawn again only when the hold changes, so that a focused button keeps its focus.
    const holdKey = hold ? `${hold.id} ${nameOf(pet)}` : '';
    if (hold && holdKey !== holdDrawn) {
      fill(holdBox, h('h2', { id: 'hold-title' }, 'Sale in progress'),
        h('p', null, `Order ${hold.id} holds ${nameOf(pet)}` + (hold.expiresAt ? ` until ${new Date(hold.expiresAt).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}` : '') + '.'),
        hold.note ? h('p', null, 'Note: ', hold.note) : null,
        ctx.canWrite ? orderActions(hold, nameOf(pet), { onDone: (order) => { hold = order.status === 'placed' ? order : null; reload().catch(() => {}); } }) : null);
    }
    holdDrawn = holdKey;
    const sellable = ctx.canWrite && pet.status === 'available' && !hold;
    if (sellable && sellBox.hidden) {
      fill(sellBox, h('h2', { id: 'sell-title' }, `Sell ${nameOf(pet)}`),
        placeOrderForm({ petId: id, onPlaced: (order) => { hold = order; ctx.flash(`Order ${order.id} placed for ${nameOf(pet)}.`); reload().catch(() => {}); } }));
    }
    sellBox.hidden = !sellable;
  }

  // What is typed differs from the version the form was opened on.
  function isEdited() {
    const typed = form.values();
    return typed.name !== editing.name || typed.categoryId !== editing.categoryId || typed.status !== (editing.status || null);
  }

  // A change made elsewhere while the form is open: said at once, with what the pet is now.
  function showChanged(why) {
    fill(changed, h('p', null, why),
      h('p', null, 'Now: ', h('strong', null, describe(pet)), '.'),
      h('p', null, isEdited()
        ? 'Your changes are still in the form below, with theirs where you changed nothing. Save again to put yours in place, or use the current details.'
        : 'The form below still shows it as it was when you opened it: use the current details before you change it.'));
    changed.hidden = false;
    useCurrent.hidden = false;
  }

  async function saveChanges() {
    form.clearErrors();
    problem.say('');
    const typed = form.values();
    const patch = {};
    if (typed.name !== editing.name) patch.name = typed.name;
    if (typed.categoryId !== null && typed.categoryId !== editing.categoryId) patch.categoryId = typed.categoryId;
    if (typed.status !== (editing.status || null)) patch.status = typed.status;
    if (!Object.keys(patch).length) {
      problem.say('Nothing to save: the details are as they were.');
      return;
    }
    try {
      const response = await request('PATCH', `/v1/pets/${id}`, { body: patch, type: PATCH, headers: { 'If-Match': editingTag } });
      pet = response.data;
      etag = response.headers.get('ETag');
      startEditing();
      drawFacts();
      ctx.flash(`Saved: ${describe(pet)}.`);
    } catch (error) {
      if (error.status === 412) {
        // Someone else changed it first: read it as it is now, show it, keep what was typed,
        // and let the next save go against this version.
        const opened = editing;
        await reload();
        if (deleted) return;
        // The form keeps what was typed, and takes the other change where nothing was typed.
        const theirs = (key, empty) => (typed[key] !== (opened[key] ?? empty) ? typed[key] : pet[key] ?? empty);
        form.set({ name: theirs('name', ''), categoryId: theirs('categoryId', null), status: theirs('status', null) });
        editing = pet;
        editingTag = etag;
        showChanged(`Someone else changed ${nameOf(pet)} before you saved, so your changes were not saved.`);
      } else if (error.status === 404) {
        deleted = true;
        drawFacts();
      } else if (!form.showError(error)) {
        problem.say(plain(error));
      }
    }
  }

  async function deletePet() {
    deleteProblem.say('');
    const sure = await confirmAction({
      title: `Delete ${nameOf(pet)}?`,
      text: `${nameOf(pet)} will be removed from the shop for good. This cannot be undone.`,
      yes: 'Yes, delete', no: 'Keep it',
    });
    if (!sure) return;
    await busy(remove, async () => {
      try {
        await request('DELETE', `/v1/pets/${id}`, { headers: { 'If-Match': etag } });
        ctx.go('/pets', { flash: `${nameOf(pet)} was deleted.` });
      } catch (error) {
        if (error.status === 412) {
          await reload();
          deleteProblem.say(`${nameOf(pet)} was changed by someone else just now, so it was not deleted. Look at it again, then delete it if you still want to.`);
        } else if (error.status === 404) {
          deleted = true;
          drawFacts();
        } else {
          deleteProblem.say(plain(error));
        }
      }
    });
  }

  async function reload() {
    try {
      const [response, orders] = await Promise.all([
        get(`/v1/pets/${id}`),
        get(`/v1/store/orders?petId=${id}&status=placed&limit=1`),
        loadCategories(),
      ]);
      pet = response.data;
      etag = response.headers.get('ETag');
      hold = orders.data[0] || null;
    } catch (error) {
      if (error.status !== 404) throw error;
      deleted = true;
    }
    drawFacts();
  }

  async function load() {
    await reload();
    if (!deleted) startEditing();
  }

  function onEvent(event) {
    if (event.petId !== id || !pet) return;
    if (event.type === 'pet.deleted') {
      deleted = true;
    } else if (revision(event.etag) > revision(etag)) {
      pet = event.pet;
      etag = event.etag;
      if (editingTag && editingTag !== etag && ctx.canWrite) {
        showChanged(`${nameOf(pet)} was just changed elsewhere (another till or the API).`);
      }
    }
    if (event.type === 'order.placed') hold = event.order;
    else if (event.type.startsWith('order.') && hold && event.orderId === hold.id) hold = null;
    drawFacts();
  }

  const unwatch = watchCategories(() => { form.drawCategories(); if (pet) drawFacts(); });
  return {
    title: 'Pet',
    node: h('section', null,
      h('p', { class: 'crumbs' }, h('a', { href: base + '/pets' }, 'Pets')),
      title, gone, facts, holdBox, sellBox, ctx.canWrite ? [editBox, deleteBox] : null,
      ctx.canWrite ? null : h('p', { class: 'note' }, 'Your key can look but not change anything.')),
    ready: load(),
    refresh: reload,
    onEvent,
    leave: unwatch,
  };
}

function readOnlyPage(name) {
  return {
    title: name,
    node: h('section', null,
      h('h1', { tabindex: '-1' }, name),
      h('p', { class: 'note' }, 'Your key can look but not change anything, so it cannot add pets. Ask for a key that can make changes.')),
  };
}

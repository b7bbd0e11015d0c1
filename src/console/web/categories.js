// Categories: add, rename, delete (a category some pet still names cannot go: the API says
// so, and the message is shown in its row). The list is the shared one the feed keeps current.

import { fieldWords, plain, request } from './api.js';
import { alertLine, busy, confirmAction, field, fill, h, hidden } from './dom.js';
import { categoryList, loadCategories, watchCategories } from './store.js';

const PATCH = 'application/merge-patch+json';

export function categories(ctx) {
  const list = h('ul', { class: 'rows' });
  const empty = h('p', { class: 'empty', hidden: true }, 'No categories yet.');
  const rows = new Map();      // id -> {item, renaming}

  const name = h('input', { type: 'text', name: 'name', autocomplete: 'off', maxlength: '100' });
  const nameField = field('Category name', name, 'For example Dogs, Cats or Birds.');
  const addButton = h('button', { type: 'submit', class: 'primary' }, 'Add category');
  const addForm = h('form', { novalidate: true, onsubmit: (event) => {
    event.preventDefault();
    busy(addButton, async () => {
      nameField.error('');
      try {
        const { data } = await request('POST', '/v1/categories', { body: { name: name.value.trim() } });
        name.value = '';
        ctx.flash(`${data.name} was added.`);
      } catch (error) {
        nameField.error(fieldWords(error, 'category'));
        name.focus();
      }
    });
  } }, nameField, h('div', { class: 'actions' }, addButton));

  function drawRow(category, row) {
    const problem = alertLine();
    if (row.renaming) {
      const input = h('input', { type: 'text', value: category.name, autocomplete: 'off', maxlength: '100' });
      const renameField = field(`New name for ${category.name}`, input);
      const saveButton = h('button', { type: 'submit', class: 'primary' }, 'Save name');
      const stop = () => { row.renaming = false; drawRow(category, row); row.item.querySelector('button')?.focus(); };
      fill(row.item, h('form', { class: 'rename', novalidate: true, onsubmit: (event) => {
        event.preventDefault();
        busy(saveButton, async () => {
          renameField.error('');
          try {
            const { data } = await request('PATCH', `/v1/categories/${category.id}`, { body: { name: input.value.trim() }, type: PATCH });
            row.renaming = false;
            row.name = data.name;
            ctx.flash(`${category.name} is now called ${data.name}.`);
            drawRow(data, row);
            row.item.querySelector('button')?.focus();
          } catch (error) {
            renameField.error(fieldWords(error, 'category'));
            input.focus();
          }
        });
      } }, renameField, h('div', { class: 'actions' }, saveButton, h('button', { type: 'button', onclick: stop }, 'Cancel'))));
      input.focus();
      input.select();
      return;
    }
    const rename = h('button', { type: 'button' }, 'Rename', hidden(` ${category.name}`));
    const remove = h('button', { type: 'button', class: 'danger' }, 'Delete', hidden(` ${category.name}`));
    rename.addEventListener('click', () => { row.renaming = true; drawRow(category, row); });
    remove.addEventListener('click', async () => {
      problem.say('');
      const sure = await confirmAction({
        title: `Delete the category ${category.name}?`,
        text: 'This cannot be undone. A category that pets still belong to cannot be deleted.',
        yes: 'Yes, delete', no: 'Keep it',
      });
      if (!sure) return;
      await busy(remove, async () => {
        try {
          await request('DELETE', `/v1/categories/${category.id}`);
          ctx.flash(`${category.name} was deleted.`);
        } catch (error) {
          problem.say(error.code === 'category_in_use'
            ? `${category.name} cannot be deleted while pets belong to it: ${plain(error)}`
            : plain(error));
        }
      });
    });
    fill(row.item,
      h('span', { class: 'name' }, category.name),
      ctx.canWrite ? h('span', { class: 'actions' }, rename, remove) : null,
      problem);
  }

  function draw() {
    const seen = new Set();
    for (const category of categoryList()) {
      seen.add(category.id);
      let row = rows.get(category.id);
      if (!row) { row = { item: h('li', { class: 'row' }), renaming: false, name: null }; rows.set(category.id, row); }
      // A row being renamed keeps what is typed; others follow the list.
      if (!row.renaming && row.name !== category.name) { drawRow(category, row); row.name = category.name; }
    }
    // Rows move only when the order changed, so a focused button keeps its focus.
    let at = list.firstChild;
    for (const category of categoryList()) {
      const { item } = rows.get(category.id);
      if (item === at) at = at.nextSibling;
      else list.insertBefore(item, at);
    }
    for (const [id, row] of rows) if (!seen.has(id)) { row.item.remove(); rows.delete(id); }
    empty.hidden = rows.size > 0;
  }

  const unwatch = watchCategories(draw);
  return {
    title: 'Categories',
    node: h('section', null,
      h('h1', { tabindex: '-1' }, 'Categories'),
      ctx.canWrite ? h('section', { class: 'card' }, h('h2', { id: 'new-category' }, 'New category'), addForm) : null,
      h('h2', null, 'All categories'),
      list, empty),
    ready: loadCategories().then(draw),
    refresh: () => loadCategories(true),
    leave: unwatch,
  };
}

// Sign-in: the API key goes once to POST {base}/session, which answers with a session cookie
// the page's script cannot read. The key is kept nowhere: the field is emptied at once.

import { session } from './api.js';
import { alertLine, busy, field, h } from './dom.js';

export function signIn(ctx) {
  const key = h('input', { type: 'password', name: 'key', autocomplete: 'off', spellcheck: 'false', autocapitalize: 'off' });
  const keyField = field('API key', key, 'The key your shop was given for the console. It is sent once to sign in and never stored in this browser.');
  const problem = alertLine();
  const button = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const next = ctx.query.get('next');
  const form = h('form', { class: 'card narrow', novalidate: true, onsubmit: (event) => {
    event.preventDefault();
    busy(button, async () => {
      keyField.error('');
      problem.say('');
      const typed = key.value.trim();
      key.value = '';
      if (!typed) {
        keyField.error('Type or paste your API key.');
        key.focus();
        return;
      }
      try {
        const { data } = await session.signIn(typed);
        await ctx.signedIn(data, next);
      } catch (error) {
        if (error.status === 401) keyField.error('That key was not accepted. Check it and try again.');
        else if (error.status === 429) keyField.error('Too many tries. Wait a minute, then try again.');
        else if (error.status === 404) problem.say('This server has its console turned off.');
        else if (error.status === 0) problem.say('The server could not be reached. Check the connection and try again.');
        else problem.say(error.message || 'Signing in failed.');
        key.focus();
      }
    });
  } }, keyField, problem, h('div', { class: 'actions' }, button));
  return {
    title: 'Sign in',
    node: h('section', { class: 'sign-in' },
      h('h1', { tabindex: '-1' }, 'Sign in'),
      next && next !== '/' ? h('p', null, 'Sign in to go on to the page you were on.') : null,
      form),
  };
}

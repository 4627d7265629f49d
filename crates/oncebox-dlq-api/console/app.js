// The oncebox DLQ console: every call goes to the API beside this page, with the token the
// operator typed (kept for this browser tab only).
'use strict';

const PAGE_SIZE = 20;
const state = { offset: 0, total: 0, selected: new Set(), openId: null };
const $ = (id) => document.getElementById(id);

function token() {
  return sessionStorage.getItem('oncebox-dlq-token') || '';
}

function showError(message) {
  $('error').textContent = message;
  $('error').hidden = !message;
}

// Calls the API; an error answer (a problem document) becomes an Error with its status and detail,
// the document itself in its `problem`.
async function call(method, path, body) {
  const options = { method, headers: { Authorization: `Bearer ${token()}` } };
  if (body !== undefined) {
    options.headers['Content-Type'] = 'application/json';
    options.body = JSON.stringify(body);
  }
  const response = await fetch(new URL(path, document.baseURI), options);
  if (!response.ok) {
    let detail = response.statusText;
    let problem = null;
    try {
      problem = await response.json();
      detail = `${problem.title}: ${problem.detail}` + (problem.request_id ? ` (request ${problem.request_id})` : '');
    } catch (_) { /* not a problem document */ }
    const error = new Error(`${response.status} ${detail}`);
    error.problem = problem;
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

function cell(row, text, className) {
  const td = document.createElement('td');
  td.textContent = text ?? '';
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function query() {
  const params = new URLSearchParams({ offset: state.offset, limit: PAGE_SIZE });
  if ($('status').value) params.set('status', $('status').value);
  if ($('event-type').value.trim()) params.set('event_type', $('event-type').value.trim());
  return params;
}

async function load() {
  try {
    const page = await call('GET', `events?${query()}`);
    state.total = page.total;
    render(page.events);
    showError('');
  } catch (error) {
    render([]);
    state.total = 0;
    showError(error.message);
  }
  updatePaging();
}

function render(events) {
  const rows = $('rows');
  rows.replaceChildren();
  state.selected.clear();
  for (const event of events) {
    const row = document.createElement('tr');
    row.dataset.id = event.id;
    if (event.id === state.openId) row.classList.add('open');
    const pick = document.createElement('input');
    pick.type = 'checkbox';
    pick.setAttribute('aria-label', `select ${event.id}`);
    pick.addEventListener('click', (click) => click.stopPropagation());
    pick.addEventListener('change', () => {
      if (pick.checked) state.selected.add(event.id); else state.selected.delete(event.id);
      updateSelection();
    });
    const first = document.createElement('td');
    first.appendChild(pick);
    row.appendChild(first);
    cell(row, event.id, 'id');
    cell(row, event.event_type);
    cell(row, event.dlq_status, 'status');
    cell(row, String(event.attempts));
    cell(row, event.last_error, 'error').title = event.last_error ?? '';
    cell(row, new Date(event.moved_at).toLocaleString());
    row.addEventListener('click', () => open(event.id));
    rows.appendChild(row);
  }
  $('select-all').checked = false;
  updateSelection();
}

function updateSelection() {
  const count = state.selected.size;
  $('selected-count').textContent = `${count} selected`;
  for (const id of ['retry-selected', 'resolve-selected', 'delete-selected']) $(id).disabled = count === 0;
}

function updatePaging() {
  const last = Math.min(state.offset + PAGE_SIZE, state.total);
  $('page-info').textContent = state.total ? `${state.offset + 1}–${last} of ${state.total}` : 'no events';
  $('previous').disabled = state.offset === 0;
  $('next').disabled = last >= state.total;
}

function pretty(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
}

async function open(id) {
  try {
    const event = await call('GET', `events/${encodeURIComponent(id)}`);
    state.openId = id;
    $('detail-id').textContent = event.id;
    $('detail-type').textContent = event.event_type;
    $('detail-payload-type').textContent = event.payload_type;
    $('detail-status').textContent = event.dlq_status;
    $('detail-attempts').textContent = String(event.attempts);
    $('detail-error').textContent = event.last_error ?? '—';
    $('detail-created').textContent = new Date(event.created_at).toLocaleString();
    $('detail-moved').textContent = new Date(event.moved_at).toLocaleString();
    $('detail-headers').textContent = JSON.stringify(event.headers, null, 2);
    $('detail-payload').textContent = pretty(event.payload);
    $('detail').hidden = false;
    for (const row of $('rows').children) row.classList.toggle('open', row.dataset.id === id);
    showError('');
  } catch (error) {
    showError(error.message);
  }
}

function closeDetail() {
  state.openId = null;
  $('detail').hidden = true;
  for (const row of $('rows').children) row.classList.remove('open');
}

async function act(run) {
  try {
    await run();
    showError('');
  } catch (error) {
    showError(error.message);
  }
  await load();
}

// Sends a status change; a re-drive the API refuses as too old (events written before the
// re-drive max age) is sent again with allow_older only if the operator confirms it.
async function change(method, path, body) {
  try {
    return await call(method, path, body);
  } catch (error) {
    if (error.problem?.type !== 'urn:oncebox:dlq:too-old') throw error;
    if (!window.confirm(`${error.problem.detail}\n\nRe-drive anyway?`)) throw error;
    return call(method, path, { ...body, allow_older: true });
  }
}

function changeOne(status) {
  const id = state.openId;
  // The detail closes: a retried event may leave the DLQ at any moment.
  act(async () => {
    await change('PATCH', `events/${encodeURIComponent(id)}`, { status });
    closeDetail();
  });
}

function deleteOne() {
  const id = state.openId;
  if (!window.confirm(`Delete DLQ event ${id}? This cannot be undone.`)) return;
  act(async () => {
    await call('DELETE', `events/${encodeURIComponent(id)}`);
    closeDetail();
  });
}

function changeSelected(status) {
  const ids = [...state.selected];
  act(() => change('POST', 'events/status', { ids, status }));
}

function deleteSelected() {
  const ids = [...state.selected];
  if (!window.confirm(`Delete ${ids.length} DLQ event(s)? This cannot be undone.`)) return;
  act(async () => {
    await call('POST', 'events/delete', { ids });
    if (ids.includes(state.openId)) closeDetail();
  });
}

document.addEventListener('DOMContentLoaded', () => {
  $('token').value = token();
  $('login').addEventListener('submit', (submit) => {
    submit.preventDefault();
    sessionStorage.setItem('oncebox-dlq-token', $('token').value.trim());
    state.offset = 0;
    closeDetail();
    load();
  });
  $('filters').addEventListener('submit', (submit) => {
    submit.preventDefault();
    state.offset = 0;
    load();
  });
  $('previous').addEventListener('click', () => { state.offset = Math.max(0, state.offset - PAGE_SIZE); load(); });
  $('next').addEventListener('click', () => { state.offset += PAGE_SIZE; load(); });
  $('select-all').addEventListener('change', () => {
    for (const box of $('rows').querySelectorAll('input[type=checkbox]')) {
      box.checked = $('select-all').checked;
      box.dispatchEvent(new Event('change'));
    }
  });
  $('retry-selected').addEventListener('click', () => changeSelected('TO_RETRY'));
  $('resolve-selected').addEventListener('click', () => changeSelected('RESOLVED'));
  $('delete-selected').addEventListener('click', deleteSelected);
  $('retry-one').addEventListener('click', () => changeOne('TO_RETRY'));
  $('resolve-one').addEventListener('click', () => changeOne('RESOLVED'));
  $('delete-one').addEventListener('click', deleteOne);
  $('close-detail').addEventListener('click', closeDetail);
  if (token()) load();
});

// weir's web page: the same Transmission RPC as every other client.
// Rows are keyed by transfer id and only changed cells are written; after
// the first full list, the page polls `recently-active` (changed in the
// last minute, plus removed ids), so a quiet list of thousands costs little.
'use strict';

const RPC = '/transmission/rpc';
const FIELDS = ['id', 'name', 'hashString', 'status', 'percentDone', 'rateDownload', 'rateUpload',
  'peersConnected', 'eta', 'sizeWhenDone', 'leftUntilDone', 'error', 'errorString',
  'metadataPercentComplete'];
const STATES = ['Stopped', 'Queued to verify', 'Verifying', 'Queued', 'Downloading',
  'Queued to seed', 'Seeding'];
const POLL_MS = 2000;

let sessionId = '';
const rows = new Map(); // id -> {tr, cells, last}

async function rpc(method, args) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const r = await fetch(RPC, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Transmission-Session-Id': sessionId },
      body: JSON.stringify({ method, arguments: args || {} }),
    });
    if (r.status === 409) {
      sessionId = r.headers.get('X-Transmission-Session-Id') || '';
      continue;
    }
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const j = await r.json();
    if (j.result !== 'success') throw new Error(j.result);
    return j.arguments || {};
  }
  throw new Error('no session id');
}

const UNITS = ['B', 'kB', 'MB', 'GB', 'TB'];
function size(n) {
  let i = 0;
  while (n >= 1000 && i < UNITS.length - 1) { n /= 1000; i++; }
  return `${i ? n.toFixed(n < 10 ? 2 : 1) : n} ${UNITS[i]}`;
}
const speed = (n) => (n > 0 ? `${size(n)}/s` : '');
function eta(s) {
  if (s === -1) return '';
  if (s === -2 || s < 0) return '∞';
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

function message(text, isError) {
  const m = document.getElementById('message');
  m.textContent = text;
  m.className = isError ? 'error' : '';
}

let template = null;
function makeRow(t) {
  if (!template) {
    template = document.createElement('tr');
    template.innerHTML = '<td class="name"></td><td class="progress"><div class="bar"><i></i><b></b></div></td>'
      + '<td class="size"></td><td class="down"></td><td class="up"></td><td class="peers"></td>'
      + '<td class="eta"></td><td class="state"></td><td class="actions">'
      + '<button class="toggle"></button><button class="files">Files</button>'
      + '<button class="remove">Remove</button>'
      + '<button class="remove-data">Remove + data</button></td>';
  }
  // Cloning a parsed row is much cheaper than parsing HTML per row.
  const tr = template.cloneNode(true);
  tr.dataset.id = t.id;
  const td = tr.children;
  const bar = td[1].firstChild;
  return { tr, cells: { name: td[0], fill: bar.firstChild, pct: bar.lastChild, size: td[2],
    down: td[3], up: td[4], peers: td[5], eta: td[6], state: td[7],
    toggle: td[8].firstChild }, last: {} };
}

function set(row, key, value, apply) {
  if (row.last[key] !== value) {
    row.last[key] = value;
    apply(value);
  }
}

function update(row, t) {
  const c = row.cells;
  row.tr.dataset.hash = t.hashString;
  set(row, 'name', t.name, (v) => { c.name.textContent = v; c.name.title = v; });
  const magnetWaiting = t.metadataPercentComplete < 1 && t.sizeWhenDone === 0;
  const pct = magnetWaiting ? 0 : Math.floor(t.percentDone * 1000) / 10;
  set(row, 'pct', pct, (v) => {
    c.fill.style.width = `${v}%`;
    c.pct.textContent = magnetWaiting ? 'metadata…' : `${v.toFixed(1)}%`;
  });
  set(row, 'complete', t.leftUntilDone === 0 && t.sizeWhenDone > 0,
    (v) => row.tr.classList.toggle('complete', v));
  set(row, 'size', t.sizeWhenDone, (v) => { c.size.textContent = v ? size(v) : ''; });
  set(row, 'down', t.rateDownload, (v) => { c.down.textContent = speed(v); });
  set(row, 'up', t.rateUpload, (v) => { c.up.textContent = speed(v); });
  set(row, 'peers', t.peersConnected, (v) => { c.peers.textContent = v; });
  set(row, 'eta', t.eta, (v) => { c.eta.textContent = eta(v); });
  const state = t.error ? `${STATES[t.status] || '?'}: ${t.errorString}` : (STATES[t.status] || '?');
  set(row, 'state', state, (v) => { c.state.textContent = v; });
  set(row, 'error', !!t.error, (v) => row.tr.classList.toggle('error', v));
  const stopped = t.status === 0;
  set(row, 'stopped', stopped, (v) => {
    c.toggle.textContent = v ? 'Resume' : 'Pause';
    c.toggle.className = `toggle ${v ? 'resume' : 'pause'}`;
  });
  row.data = t;
}

const tbody = () => document.getElementById('rows');

function apply(torrents, removed, full) {
  const started = performance.now();
  const seen = full ? new Set() : null;
  let added = null;
  for (const t of torrents) {
    let row = rows.get(t.id);
    if (!row) {
      row = makeRow(t);
      rows.set(t.id, row);
      (added ||= document.createDocumentFragment()).appendChild(row.tr);
    }
    update(row, t);
    if (seen) seen.add(t.id);
  }
  if (added) tbody().appendChild(added);
  const gone = full ? [...rows.keys()].filter((id) => !seen.has(id)) : (removed || []);
  for (const id of gone) {
    const row = rows.get(id);
    if (row) { row.tr.remove(); rows.delete(id); }
  }
  let down = 0; let up = 0;
  for (const r of rows.values()) { down += r.data.rateDownload; up += r.data.rateUpload; }
  document.getElementById('total-count').textContent = `${rows.size} transfer${rows.size === 1 ? '' : 's'}`;
  document.getElementById('total-down').textContent = speed(down) || '0 B/s';
  document.getElementById('total-up').textContent = speed(up) || '0 B/s';
  document.getElementById('empty').hidden = rows.size > 0;
  // For tests and the curious: how long the last update took.
  window.weirLastApplyMs = performance.now() - started;
}

async function refresh(full) {
  const args = { fields: FIELDS };
  if (!full) args.ids = 'recently-active';
  const r = await rpc('torrent-get', args);
  apply(r.torrents || [], r.removed, full);
}

let polls = 0;
async function poll() {
  try {
    // A full list now and then heals anything missed while the page slept.
    await refresh(polls++ % 30 === 0);
  } catch (e) {
    message(`RPC: ${e.message}`, true);
  }
  setTimeout(poll, POLL_MS);
}

async function act(method, id, extra) {
  try {
    await rpc(method, { ids: [id], ...(extra || {}) });
    await refresh(false);
  } catch (e) {
    message(`${method}: ${e.message}`, true);
  }
}

function added(r) {
  const t = r['torrent-added'] || r['torrent-duplicate'];
  message(r['torrent-added'] ? `Added ${t.name}` : `Already there: ${t.name}`, false);
}

function readBase64(file) {
  return new Promise((resolve, reject) => {
    const fr = new FileReader();
    fr.onload = () => resolve(String(fr.result).replace(/^data:[^,]*,/, ''));
    fr.onerror = () => reject(fr.error);
    fr.readAsDataURL(file);
  });
}

// The files of one transfer, each with a box: ticked is fetched. A box
// changed is sent at once (torrent-set files-wanted / files-unwanted),
// and the list is read back from the server.
let filesOf = null;
async function showFiles(id) {
  try {
    const r = await rpc('torrent-get', { ids: [id], fields: ['id', 'name', 'files', 'wanted'] });
    const t = (r.torrents || [])[0];
    if (!t) { message(`Files: transfer ${id} is gone`, true); return; }
    filesOf = id;
    document.getElementById('files-name').textContent = t.name;
    const list = document.getElementById('file-list');
    list.textContent = '';
    (t.files || []).forEach((f, i) => {
      const li = document.createElement('li');
      const label = document.createElement('label');
      const box = document.createElement('input');
      box.type = 'checkbox';
      box.dataset.index = i;
      box.checked = !!(t.wanted || [])[i];
      label.append(box, ` ${f.name} (${size(f.length)})`);
      li.append(label);
      list.append(li);
    });
    document.getElementById('files').hidden = false;
  } catch (e) { message(`Files: ${e.message}`, true); }
}

async function setWanted(box) {
  const id = filesOf;
  const key = box.checked ? 'files-wanted' : 'files-unwanted';
  try {
    await rpc('torrent-set', { ids: [id], [key]: [Number(box.dataset.index)] });
    const r = await rpc('torrent-get', { ids: [id], fields: ['id', 'wanted'] });
    const w = ((r.torrents || [])[0] || {}).wanted || [];
    document.querySelectorAll('#file-list input').forEach((b) => { b.checked = !!w[Number(b.dataset.index)]; });
    message(`Files of ${document.getElementById('files-name').textContent}: `
      + `${w.filter((x) => x).length} of ${w.length} files wanted`, false);
  } catch (e) {
    box.checked = !box.checked;
    message(`Files: ${e.message}`, true);
  }
}

async function loadCaps() {
  const s = await rpc('session-get', { fields: ['speed-limit-down', 'speed-limit-down-enabled',
    'speed-limit-up', 'speed-limit-up-enabled'] });
  document.getElementById('cap-down').value = s['speed-limit-down'];
  document.getElementById('cap-down-on').checked = s['speed-limit-down-enabled'];
  document.getElementById('cap-up').value = s['speed-limit-up'];
  document.getElementById('cap-up-on').checked = s['speed-limit-up-enabled'];
}

function wire() {
  tbody().addEventListener('click', (ev) => {
    const b = ev.target.closest('button');
    if (!b) return;
    const id = Number(b.closest('tr').dataset.id);
    const row = rows.get(id);
    if (b.classList.contains('files')) showFiles(id);
    else if (b.classList.contains('pause')) act('torrent-stop', id);
    else if (b.classList.contains('resume')) act('torrent-start', id);
    else if (b.classList.contains('remove')) act('torrent-remove', id);
    else if (b.classList.contains('remove-data')) {
      if (window.confirm(`Remove ${row ? row.data.name : id} and delete its data?`)) {
        act('torrent-remove', id, { 'delete-local-data': true });
      }
    }
  });
  document.getElementById('file-list').addEventListener('change', (ev) => {
    if (ev.target.matches('input[type=checkbox]')) setWanted(ev.target);
  });
  document.getElementById('files-close').addEventListener('click', () => {
    document.getElementById('files').hidden = true;
    filesOf = null;
  });
  document.getElementById('add-link').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = document.getElementById('link');
    const link = input.value.trim();
    if (!link) return;
    try {
      added(await rpc('torrent-add', { filename: link,
        paused: document.getElementById('add-paused').checked }));
      input.value = '';
      await refresh(false);
    } catch (e) { message(`Add: ${e.message}`, true); }
  });
  document.getElementById('torrent-file').addEventListener('change', async (ev) => {
    for (const f of ev.target.files) {
      try {
        added(await rpc('torrent-add', { metainfo: await readBase64(f),
          paused: document.getElementById('add-paused').checked }));
      } catch (e) { message(`Add ${f.name}: ${e.message}`, true); }
    }
    ev.target.value = '';
    await refresh(false);
  });
  document.getElementById('caps').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const num = (id) => Math.max(0, Math.floor(Number(document.getElementById(id).value) || 0));
    try {
      await rpc('session-set', {
        'speed-limit-down': num('cap-down'),
        'speed-limit-down-enabled': document.getElementById('cap-down-on').checked,
        'speed-limit-up': num('cap-up'),
        'speed-limit-up-enabled': document.getElementById('cap-up-on').checked,
      });
      message('Caps applied', false);
    } catch (e) { message(`Caps: ${e.message}`, true); }
  });
}

document.addEventListener('DOMContentLoaded', () => {
  wire();
  loadCaps().catch((e) => message(`RPC: ${e.message}`, true));
  poll();
});

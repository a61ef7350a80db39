// The Mnemon inspector (docs/reference/inspector.md): one page, hash routes, the /v1 REST API.
//
// Everything stored is untrusted (messages, asset fields, artifact names): it is only ever put
// on the page as text nodes (`textContent`, `createTextNode`) inside elements made with
// `createElement`. No string of data is parsed as markup anywhere in this file.
'use strict';

(function () {
  const KEY_ITEM = 'mnemon.inspector.key';
  // The blob: URL of the asset image on show, if any (revoked when the next one is made).
  let imageUrl = null;
  const PAGE_SIZE = 25;
  const MAX_ERRORS = 20;
  // A list of at least this many numbers is an embedding: summarised, never dumped.
  const VECTOR_MIN = 16;

  const main = document.getElementById('main');

  // ---- elements -------------------------------------------------------------------------

  // el('div', {class: 'x', onclick: f}, 'text', child, …): text children become text nodes.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'class') node.className = value;
      else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
      else if (name === 'value') node.value = value;
      else node.setAttribute(name, String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // Replaces a node's children (null and false children are skipped, arrays flattened:
  // `replaceChildren` itself would write them as the text "null").
  function fill(node, ...children) {
    node.textContent = '';
    return append(node, children);
  }

  function show(...children) {
    fill(main, children);
  }

  function errorLine(error) {
    return el('p', {class: 'error', role: 'alert'}, String(error && error.message || error));
  }

  // ---- the API --------------------------------------------------------------------------

  function key() { return sessionStorage.getItem(KEY_ITEM) || ''; }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(`${status} ${code}: ${message}`);
      this.status = status;
      this.code = code;
    }
  }

  const recentErrors = [];

  function noteError(method, path, error) {
    recentErrors.unshift({at: new Date().toISOString(), what: `${method} ${path.split('?')[0]}`, error: String(error.message || error)});
    recentErrors.length = Math.min(recentErrors.length, MAX_ERRORS);
    const list = document.getElementById('errors');
    fill(list, recentErrors.map((e) => el('li', {}, `${e.at} ${e.what}: ${e.error}`)));
    document.getElementById('errors-box').hidden = false;
  }

  // One request: JSON in, JSON (or the raw response with `raw`) out; errors as ApiError.
  async function api(method, path, body, raw) {
    // A URL drops the path segments "." and ".." (even as %2E): an asset or session with such
    // an id would be read from another route (`/v1/assets/./content` is the asset "content"),
    // and shown under the wrong name.
    if (path.split('?')[0].split('/').some((s) => s === '.' || s === '..')) {
      const error = new Error('an id "." or ".." cannot be read over HTTP, which drops such path segments; read it with the CLI or an MCP client');
      noteError(method, path, error);
      throw error;
    }
    const headers = {Accept: 'application/json'};
    if (key()) headers.Authorization = `Bearer ${key()}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store'});
    } catch (e) {
      noteError(method, path, e);
      throw e;
    }
    if (!response.ok) {
      let code = 'http', message = response.statusText;
      try {
        const json = await response.json();
        if (json && json.error) {
          code = json.error.code || code;
          message = json.error.message || message;
        }
      } catch (_) { /* not JSON */ }
      const error = new ApiError(response.status, code, message);
      noteError(method, path, error);
      throw error;
    }
    return raw ? response : response.json();
  }

  function query(params) {
    const parts = [];
    for (const [name, value] of Object.entries(params)) {
      if (value === undefined || value === null || value === '') continue;
      parts.push(`${encodeURIComponent(name)}=${encodeURIComponent(value)}`);
    }
    return parts.length ? `?${parts.join('&')}` : '';
  }

  const seg = encodeURIComponent;

  // ---- values -----------------------------------------------------------------------------

  function isVector(value) {
    return Array.isArray(value) && value.length >= VECTOR_MIN && value.every((x) => typeof x === 'number');
  }

  // Sets `key` as an own, enumerable property: plain assignment of "__proto__" sets the
  // object's prototype instead, and the field vanished from what the page showed.
  function put(object, key, value) {
    Object.defineProperty(object, key, {value, enumerable: true, writable: true, configurable: true});
  }

  // The value with every embedding replaced by "1536-dim vector" and long data: URLs shortened.
  function summarise(value) {
    if (isVector(value)) return `${value.length}-dim vector`;
    if (Array.isArray(value)) return value.map(summarise);
    if (typeof value === 'string' && value.startsWith('data:') && value.length > 120) {
      return `${value.slice(0, value.indexOf(',') + 1)}… (${value.length} characters)`;
    }
    if (value && typeof value === 'object') {
      const out = {};
      for (const [k, v] of Object.entries(value)) put(out, k, summarise(v));
      return out;
    }
    return value;
  }

  function json(value) { return el('pre', {}, JSON.stringify(summarise(value), null, 2)); }

  function when(timestamp) { return timestamp ? String(timestamp) : ''; }

  // The canonical asset:// URL of a path (docs/reference/assets.md#url-grammar): every byte
  // outside RFC 3986 `unreserved` percent-encoded.
  function encodeSegment(text) {
    return encodeURIComponent(String(text)).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  }

  function reference(assetId, path) {
    return `asset://${[assetId, ...path].map(encodeSegment).join('/')}`;
  }

  // ---- pager ----------------------------------------------------------------------------

  // Previous / next buttons over cursor pages: `load(cursor, isCurrent)` renders one page
  // (unless `isCurrent()` has turned false: a newer load began) and answers its next_cursor;
  // the cursors of earlier pages are kept so "previous" works too.
  function pager(load) {
    const stack = [];
    let current = null;
    const prev = el('button', {class: 'plain', type: 'button', disabled: true}, '← previous');
    const next = el('button', {class: 'plain', type: 'button', disabled: true}, 'next →');
    const info = el('span', {class: 'muted'});
    // A page that fails to load (a busy server, a cursor whose record was deleted) leaves the
    // pager where it was, its buttons usable: `undo` puts the stack back.
    // Each load's number: a load that ends after a newer one began (the filter submitted
    // again meanwhile) leaves the pager to the newer one.
    let loads = 0;
    async function go(cursor, undo) {
      const mine = ++loads;
      prev.disabled = next.disabled = true;
      try {
        // The loader renders only while its load is the newest (`isCurrent`).
        const nextCursor = await load(cursor, () => mine === loads);
        if (mine !== loads) return;
        current = cursor;
        next.dataset.cursor = nextCursor || '';
        info.textContent = `page ${stack.length + 1}`;
      } catch (e) {
        if (mine !== loads) return;
        if (undo) undo();
        throw e;
      } finally {
        if (mine === loads) {
          prev.disabled = stack.length === 0;
          next.disabled = !next.dataset.cursor;
        }
      }
    }
    prev.addEventListener('click', () => {
      const c = stack.pop();
      go(c === undefined ? null : c, () => stack.push(c)).catch(report);
    });
    next.addEventListener('click', () => { stack.push(current); go(next.dataset.cursor, () => stack.pop()).catch(report); });
    function report(e) { fill(info, errorLine(e)); }
    // Each start is a new listing: page 1, no earlier cursors.
    function start() {
      stack.length = 0;
      current = null;
      next.dataset.cursor = '';
      return go(null).catch(report);
    }
    return {bar: el('div', {class: 'bar'}, prev, next, info), start};
  }

  // ---- sessions -------------------------------------------------------------------------

  function sessionsPage() {
    const rows = el('tbody');
    const status = el('p', {class: 'muted'});
    const page = pager(async (cursor, isCurrent) => {
      // Most recently written first, each with its message count and last activity.
      const out = await api('GET', `/v1/memory/sessions${query({limit: PAGE_SIZE, cursor, order: 'activity'})}`);
      if (!isCurrent()) return null;
      fill(rows, ...out.sessions.map(sessionRow));
      status.textContent = out.sessions.length ? '' : 'No sessions in this namespace.';
      return out.next_cursor;
    });
    const hits = el('div');
    const text = el('input', {name: 'q', class: 'wide', placeholder: 'search text', required: true});
    const mode = el('select', {name: 'mode'}, [['hybrid', 'hybrid (both)'], ['vector', 'vector (meaning)'], ['keyword', 'keyword (exact words)']].map(([v, t]) => el('option', {value: v}, t)));
    const topK = el('input', {name: 'top_k', type: 'number', min: 1, max: 100, value: '10'});
    const user = el('input', {name: 'user_id', placeholder: 'any user'});
    const agent = el('input', {name: 'agent_id', placeholder: 'any agent'});
    const mark = el('input', {name: 'mark', placeholder: 'only with mark'});
    const where = el('textarea', {name: 'filter', rows: 2, cols: 50, placeholder: '{"eq": {"path": "role", "value": "user"}}'});
    const form = el('form', {id: 'search-all', onsubmit: (e) => {
      e.preventDefault();
      searchAcross({text: text.value, mode: mode.value, topK: Number(topK.value) || 10, user: user.value, agent: agent.value, mark: mark.value, filter: where.value}, hits);
    }},
    el('label', {}, 'Search every session', text), el('label', {}, 'mode', mode), el('label', {}, 'top k', topK),
    el('label', {}, 'user', user), el('label', {}, 'agent', agent), el('label', {}, 'mark', mark),
    el('label', {}, 'filter (JSON)', where), el('button', {type: 'submit'}, 'Search'));
    show(el('h2', {}, 'Sessions'),
      el('table', {id: 'sessions'}, el('thead', {}, el('tr', {}, el('th', {}, 'session'), el('th', {}, 'user'), el('th', {}, 'agent'), el('th', {}, 'messages'), el('th', {}, 'last activity ↓'), el('th', {}, 'last message'))), rows),
      status, page.bar, el('h3', {}, 'Search across sessions'),
      el('p', {class: 'muted'}, 'One query over every session of the namespace (or of a user or agent): vector by meaning (messages stored with an embedding), keyword by exact words, hybrid fuses both rankings. A filter (docs/reference/filters.md) applies before the top-k cut.'),
      form, hits);
    page.start();
  }

  function sessionRow(session) {
    const id = session.session_id;
    const last = el('td', {class: 'muted pending'}, '…');
    const count = el('td', {class: 'count'}, session.messages === undefined ? '' : String(session.messages));
    const activity = el('td', {class: 'muted activity'}, session.last_active || '');
    if (id) {
      // The newest message only: `recent=1`, so the row costs one small read.
      api('GET', `/v1/memory/sessions/${seg(id)}/messages${query({recent: 1})}`).then((out) => {
        const m = out.messages[out.messages.length - 1];
        last.classList.remove('pending');
        last.textContent = m ? `${m.name}: ${preview(m.content, 80)}` : '(empty)';
        if (!activity.textContent && m) activity.textContent = when(m.timestamp);
      }).catch((e) => { last.classList.remove('pending'); last.textContent = String(e.message); });
    }
    return el('tr', {},
      el('td', {}, id ? el('a', {href: `#/session/${seg(id)}`, class: 'session-link'}, id) : '(none)'),
      el('td', {}, session.user_id || ''), el('td', {}, session.agent_id || ''), count, activity, last);
  }

  function preview(content, n) {
    const text = typeof content === 'string' ? content : JSON.stringify(summarise(content));
    return text.length > n ? `${text.slice(0, n)}…` : text;
  }

  // POST /v1/memory/search: one store query across the namespace's sessions.
  async function searchAcross(q, target) {
    fill(target, el('p', {class: 'muted'}, 'Searching…'));
    try {
      const parts = [];
      if (q.filter.trim()) {
        try { parts.push(JSON.parse(q.filter)); } catch (e) { throw new Error(`the filter is not JSON: ${e.message}`); }
      }
      if (q.mark) parts.push({contains: {path: 'marks', value: q.mark}});
      const body = {query: {text: q.text}, mode: q.mode, top_k: q.topK,
        user_id: q.user || undefined, agent_id: q.agent || undefined,
        filter: parts.length === 0 ? undefined : parts.length === 1 ? parts[0] : {and: parts}};
      const out = await api('POST', '/v1/memory/search', body);
      fill(target,
        el('p', {class: 'muted'}, `${out.hits.length} hits, best first (${q.mode})`),
        out.complete === false ? el('p', {class: 'muted', id: 'search-partial'},
          'More messages have these words than the 10,000 a keyword ranking reads: these hits rank the newest 10,000 (latest session first). Narrow the user or agent, or search rarer words.') : null,
        el('div', {id: 'search-hits'}, out.hits.map((hit) => message(hit.message, {score: hit.score, session: hit.session_id}))));
    } catch (e) { fill(target, errorLine(e)); }
  }

  // One message as a conversation turn: name, role, time, marks, content, summarised extras.
  function message(m, extra) {
    const marks = el('span', {class: 'marks'});
    const head = el('div', {class: 'msg-head'},
      el('span', {class: 'name'}, m.name === undefined ? '' : String(m.name)),
      el('span', {class: 'role'}, m.role || ''),
      el('span', {class: 'time'}, when(m.timestamp)),
      extra && extra.score !== undefined ? el('span', {class: 'score'}, `score ${extra.score.toFixed(4)}`) : null,
      extra && extra.session ? el('a', {href: `#/session/${seg(extra.session)}`}, `in ${extra.session}`) : null,
      el('span', {class: 'muted'}, m.id || ''), marks);
    const body = typeof m.content === 'string' ? el('p', {class: 'text'}, m.content) : json(m.content);
    const rest = {};
    for (const [k, v] of Object.entries(m)) {
      if (!['name', 'role', 'timestamp', 'id', 'content'].includes(k)) put(rest, k, v);
    }
    const card = el('div', {class: `card msg role-${String(m.role || 'none').replace(/[^a-z]/g, '')}`, 'data-id': m.id || ''}, head, body,
      Object.keys(rest).length ? el('details', {}, el('summary', {class: 'muted'}, `other fields: ${Object.keys(rest).join(', ')}`), json(rest)) : null);
    card.marks = marks;
    return card;
  }

  function sessionPage(id) {
    const list = el('div', {id: 'messages'});
    const info = el('p', {class: 'muted'});
    const recent = el('input', {name: 'recent', type: 'number', min: 1, value: '50'});
    const tokens = el('input', {name: 'tokens', type: 'number', min: 1, placeholder: 'all'});
    const mark = el('input', {name: 'mark', placeholder: 'mark'});
    const exclude = el('input', {name: 'exclude_mark', placeholder: 'not mark'});
    const withEmb = el('input', {name: 'embeddings', type: 'checkbox'});
    async function load() {
      info.textContent = 'Loading…';
      try {
        const out = await api('GET', `/v1/memory/sessions/${seg(id)}/messages${query({
          recent: recent.value, tokens: tokens.value, mark: mark.value, exclude_mark: exclude.value,
          include_embeddings: withEmb.checked ? 'true' : ''})}`);
        fill(list, ...out.messages.map((m) => message(m)));
        info.textContent = `${out.messages.length} messages (newest last)` +
          (out.token_count !== undefined ? `, ${out.token_count} cl100k tokens` : '');
      } catch (e) {
        fill(list, errorLine(e));
        info.textContent = '';
      }
    }
    async function loadMarks() {
      const cards = Array.from(list.children).filter((c) => c.marks && c.dataset.id);
      // Four at a time: one small read each.
      for (let i = 0; i < cards.length; i += 4) {
        await Promise.all(cards.slice(i, i + 4).map(async (card) => {
          try {
            const out = await api('GET', `/v1/memory/sessions/${seg(id)}/messages/${seg(card.dataset.id)}/marks`);
            fill(card.marks, ...(out.marks.length ? out.marks.map((k) => el('span', {class: 'mark'}, k)) : [el('span', {class: 'muted'}, 'no marks')]));
          } catch (e) { card.marks.textContent = e.message; }
        }));
      }
    }
    const filter = el('form', {onsubmit: (e) => { e.preventDefault(); load(); }},
      el('label', {}, 'last N', recent), el('label', {}, 'within tokens', tokens), el('label', {}, 'mark', mark),
      el('label', {}, 'exclude mark', exclude), el('label', {}, 'embedding sizes', withEmb),
      el('button', {type: 'submit'}, 'Show'), el('button', {type: 'button', class: 'plain', onclick: loadMarks}, 'Load marks'));
    const hits = el('div', {id: 'session-hits'});
    const text = el('input', {name: 'q', class: 'wide', placeholder: 'search this session', required: true});
    const topK = el('input', {name: 'top_k', type: 'number', min: 1, value: '5'});
    const metric = el('select', {name: 'metric'}, ['cosine', 'dot', 'l2'].map((m) => el('option', {value: m}, m)));
    const search = el('form', {id: 'search-one', onsubmit: async (e) => {
      e.preventDefault();
      try {
        const out = await api('POST', `/v1/memory/sessions/${seg(id)}/search`, {query: {text: text.value}, top_k: Number(topK.value) || 5, metric: metric.value});
        fill(hits, el('p', {class: 'muted'}, `${out.hits.length} hits, best first`),
          ...out.hits.map((h) => message(h.message, {score: h.score})));
      } catch (err) { fill(hits, errorLine(err)); }
    }}, el('label', {}, 'Search by similarity', text), el('label', {}, 'top k', topK), el('label', {}, 'metric', metric), el('button', {type: 'submit'}, 'Search'));
    // The export is fetched like every other call, so that it carries the key (a plain link
    // is a navigation, which sends no Authorization header: a server with keys answered 401),
    // then offered as a download of what was fetched.
    const download = el('span', {id: 'export-download'});
    let exportUrl = null;
    const exportButton = el('button', {type: 'button', id: 'export', class: 'plain', onclick: async () => {
      fill(download, el('span', {class: 'muted'}, ' preparing…'));
      try {
        const response = await api('GET', `/v1/memory/sessions/${seg(id)}/export?format=agentscope-0.1`, undefined, true);
        const blob = await response.blob();
        // One export kept at a time: the previous one's memory is given back.
        if (exportUrl) URL.revokeObjectURL(exportUrl);
        exportUrl = URL.createObjectURL(blob);
        const link = el('a', {id: 'export-link', href: exportUrl, download: `${id}.agentscope-0.1.json`},
          `download ${id}.agentscope-0.1.json (${blob.size} bytes)`);
        fill(download, ' ', link);
      } catch (err) { fill(download, errorLine(err)); }
    }}, 'export (AgentScope 0.1)');
    show(el('h2', {}, 'Session ', el('span', {id: 'session-id'}, id)),
      el('p', {}, el('a', {href: '#/sessions'}, '← all sessions'), ' · ', exportButton, download),
      search, hits, el('h3', {}, 'Conversation'), filter, info, list);
    load();
  }

  // ---- assets ---------------------------------------------------------------------------

  function resolver() {
    const input = el('input', {id: 'resolve-input', class: 'wide', placeholder: 'asset://id/content/…', required: true});
    const out = el('div', {id: 'resolve-out'});
    const form = el('form', {id: 'resolve', onsubmit: async (e) => {
      e.preventDefault();
      try {
        const value = (await api('GET', `/v1/resolve${query({reference: input.value.trim()})}`)).value;
        fill(out, el('p', {class: 'muted'}, 'resolves to'), valueView(value));
      } catch (err) { fill(out, errorLine(err)); }
    }}, el('label', {}, 'Resolve a reference', input), el('button', {type: 'submit'}, 'Resolve'));
    return {form, out, input};
  }

  // A resolved value: an image data: URL as an image, anything else as summarised JSON.
  function valueView(value) {
    if (typeof value === 'string' && /^data:image\/(png|gif|jpeg|webp);base64,/.test(value)) {
      return el('img', {class: 'preview', src: value, alt: 'resolved image'});
    }
    return json(value);
  }

  function assetsPage(params) {
    const rows = el('ul', {id: 'asset-list'});
    const type = el('input', {name: 'asset_type', placeholder: 'asset type', value: params.get('type') || ''});
    // A filter of docs/reference/filters.md over each asset's meta and times; sent as JSON to
    // POST /v1/query/assets, which applies it before the page cut.
    const where = el('textarea', {name: 'filter', rows: 2, cols: 60, placeholder: '{"contains": {"path": "content.labels", "value": "cat"}}'});
    where.value = params.get('filter') || '';
    const expiry = (ms) => ms === undefined || ms === null ? null : el('span', {class: 'muted expiry'}, ` · expires ${new Date(ms).toISOString()}`);
    // The listing follows the filter last submitted, not what is typed since: a cursor is
    // only good for the listing that gave it.
    let applied = {type: type.value, filter: where.value.trim()};
    const page = pager(async (cursor, isCurrent) => {
      if (applied.filter) {
        let filter;
        try { filter = JSON.parse(applied.filter); } catch (e) { throw new Error(`the filter is not JSON: ${e.message}`); }
        const out = await api('POST', '/v1/query/assets', {filter, asset_type: applied.type || undefined, cursor: cursor || undefined, limit: 50});
        if (!isCurrent()) return null;
        fill(rows, ...out.assets.map((a) => el('li', {}, el('a', {href: `#/asset/${seg(a.asset_id)}`, class: 'asset-link'}, a.asset_id), expiry(a.expires_at_ms))));
        if (!out.assets.length) fill(rows, el('li', {class: 'muted'}, 'No asset matches.'));
        return out.next_cursor;
      }
      const out = await api('GET', `/v1/assets${query({limit: 50, cursor, asset_type: applied.type})}`);
      if (!isCurrent()) return null;
      fill(rows, ...out.asset_ids.map((id) => el('li', {}, el('a', {href: `#/asset/${seg(id)}`, class: 'asset-link'}, id))));
      if (!out.asset_ids.length) fill(rows, el('li', {class: 'muted'}, 'No assets.'));
      return out.next_cursor;
    });
    // A new filter goes into the address (so it can be shared and reloaded), which routes
    // here again; the same filter again starts its listing over.
    const filter = el('form', {id: 'asset-filter', onsubmit: (e) => {
      e.preventDefault();
      const hash = `#/assets${query({type: type.value, filter: where.value.trim()})}`;
      if (location.hash === hash) {
        applied = {type: type.value, filter: where.value.trim()};
        page.start();
      } else {
        location.hash = hash;
      }
    }},
      el('label', {}, 'Filter by type', type), el('label', {}, 'and by fields (JSON filter)', where), el('button', {type: 'submit'}, 'Filter'));
    const r = resolver();
    show(el('h2', {}, 'Assets'), r.form, r.out, filter, rows, page.bar);
    page.start();
  }

  function assetPage(id) {
    const refBox = el('div', {id: 'reference'});
    const r = resolver();
    const tree = el('div', {class: 'tree', id: 'meta-tree'});
    const flat = el('tbody');
    const content = el('div', {id: 'content'});
    function pick(path) {
      const url = reference(id, path);
      r.input.value = url;
      fill(r.out);
      fill(refBox, el('span', {class: 'muted'}, 'reference: '), el('code', {class: 'ref', id: 'picked-ref'}, url));
    }
    show(el('h2', {}, 'Asset ', el('span', {id: 'asset-id'}, id)),
      el('p', {}, el('a', {href: '#/assets'}, '← all assets')),
      el('p', {class: 'muted'}, 'Click a field to get its asset:// reference.'), refBox, r.form, r.out,
      el('div', {class: 'cols'},
        el('div', {}, el('h3', {}, 'Meta (what a model is shown)'), tree),
        el('div', {}, el('h3', {}, 'Flattened'), el('table', {id: 'meta-flat'}, el('thead', {}, el('tr', {}, el('th', {}, 'path'), el('th', {}, 'value'))), flat))),
      el('h3', {}, 'Content'), content);
    api('GET', `/v1/assets/${seg(id)}/meta`).then((out) => {
      fill(tree, treeView(out.meta, [], pick, 0));
      fill(flat, ...flatten(out.meta, []).map(([path, value]) => el('tr', {},
        el('td', {}, el('button', {type: 'button', class: 'field', onclick: () => pick(path)}, path.join('/') || '(root)')),
        el('td', {class: 'value'}, preview(value, 200)))));
    }).catch((e) => fill(tree, errorLine(e)));
    contentView(id, content);
  }

  function treeView(value, path, pick, depth) {
    if (value && typeof value === 'object' && !isVector(value)) {
      const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
      const items = entries.map(([k, v]) => {
        const here = path.concat([String(k)]);
        const label = el('button', {type: 'button', class: 'field', onclick: (e) => { e.preventDefault(); pick(here); }}, String(k));
        if (v && typeof v === 'object' && !isVector(v)) {
          return el('li', {}, el('details', {open: depth < 2 ? '' : null}, el('summary', {}, label, el('span', {class: 'muted'}, Array.isArray(v) ? ` [${v.length}]` : ` {${Object.keys(v).length}}`)), treeView(v, here, pick, depth + 1)));
        }
        return el('li', {}, label, ': ', el('span', {class: 'value'}, JSON.stringify(summarise(v))));
      });
      return el('ul', {}, items);
    }
    return el('span', {class: 'value'}, JSON.stringify(summarise(value)));
  }

  function flatten(value, path) {
    if (value && typeof value === 'object' && !isVector(value)) {
      const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
      if (!entries.length) return [[path, value]];
      return entries.flatMap(([k, v]) => flatten(v, path.concat([k])));
    }
    return [[path, summarise(value)]];
  }

  // The content by its media type: JSON as a tree, images as an image (a blob: URL), other
  // bytes as their size and first bytes in hex. Never a base64 wall.
  async function contentView(id, target) {
    try {
      const response = await api('GET', `/v1/assets/${seg(id)}/content`, undefined, true);
      const type = (response.headers.get('Content-Type') || '').split(';')[0].trim().toLowerCase();
      if (type === 'application/json') {
        fill(target, el('p', {class: 'muted'}, 'JSON'), json(await response.json()));
        return;
      }
      const blob = await response.blob();
      const head = el('p', {class: 'muted', id: 'content-type'}, `${type || 'unknown type'}, ${blob.size} bytes`);
      if (/^image\/(png|gif|jpeg|webp|bmp|avif)$/.test(type)) {
        // One previewed image kept at a time: the previous one's memory is given back.
        if (imageUrl) URL.revokeObjectURL(imageUrl);
        imageUrl = URL.createObjectURL(blob);
        fill(target, head, el('img', {class: 'preview', id: 'content-image', src: imageUrl, alt: `content of ${id}`}));
      } else if (type.startsWith('text/')) {
        const text = await blob.slice(0, 64 * 1024).text();
        fill(target, head, el('pre', {}, text));
      } else {
        const bytes = new Uint8Array(await blob.slice(0, 256).arrayBuffer());
        const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(' ');
        fill(target, head, el('pre', {}, hex + (blob.size > 256 ? ' …' : '')));
      }
    } catch (e) { fill(target, errorLine(e)); }
  }

  // ---- artifacts ------------------------------------------------------------------------

  function artifactsPage(params) {
    // The scope shown comes from the link clicked in the scope list (`#/artifacts?scope=…`).
    const scope = {value: params.get('scope') || ''};
    const keys = el('div', {id: 'artifact-keys'});
    const detail = el('div', {id: 'artifact-detail'});
    const block = el('div', {id: 'prompt-block'});
    const loadKeys = el('input', {name: 'keys', placeholder: 'keys, comma-separated (empty: every key)'});
    // The scopes that hold artifacts, a page at a time (GET /v1/artifacts/scopes).
    const scopeList = el('ul', {id: 'artifact-scopes', class: 'scopes'});
    const scopes = pager(async (cursor, isCurrent) => {
      const out = await api('GET', `/v1/artifacts/scopes${query({limit: 50, cursor})}`);
      if (!isCurrent()) return null;
      fill(scopeList, ...out.scopes.map((s) => el('li', {},
        el('a', {href: `#/artifacts${query({scope: s})}`, class: s === scope.value ? 'scope-link active' : 'scope-link'}, s))));
      if (!out.scopes.length) fill(scopeList, el('li', {class: 'muted'}, 'No artifacts in this namespace.'));
      return out.next_cursor;
    });
    let byKey = new Map();
    async function list() {
      if (!scope.value) { fill(keys, el('p', {class: 'muted'}, 'Pick a scope on the left.')); return; }
      fill(keys, el('p', {class: 'muted'}, 'Loading…'));
      byKey = new Map();
      try {
        let cursor = null;
        let pages = 0;
        // Save order, oldest first: up to 10 pages of 200 records.
        do {
          const out = await api('GET', `/v1/artifacts${query({scope: scope.value, limit: 200, cursor})}`);
          for (const a of out.artifacts) {
            if (!byKey.has(a.key)) byKey.set(a.key, []);
            byKey.get(a.key).unshift(a);
          }
          cursor = out.next_cursor;
          pages += 1;
        } while (cursor && pages < 10);
        renderKeys(cursor);
      } catch (err) { fill(keys, errorLine(err)); }
    }
    function renderKeys(more) {
      if (!byKey.size) { fill(keys, el('p', {class: 'muted'}, 'No artifacts in this scope.')); return; }
      fill(keys, more ? el('p', {class: 'muted', id: 'artifacts-cut'}, 'Only the scope\'s oldest 2,000 records (in save order) are shown: later versions are not listed here.') : null,
        ...Array.from(byKey.entries()).map(([k, history]) => el('div', {class: 'card artifact-key'},
          el('h3', {}, 'key ', el('code', {}, k), el('span', {class: 'muted'}, ` · ${history.length} version${history.length === 1 ? '' : 's'}, most recent first`)),
          el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'saved'), el('th', {}, 'name'), el('th', {}, 'type'), el('th', {}, 'description'))),
            el('tbody', {}, history.map((a) => el('tr', {},
              el('td', {}, el('a', {href: '#', class: 'artifact-link', onclick: (e) => { e.preventDefault(); showArtifact(a.id); }}, when(a.created_at))),
              el('td', {class: 'artifact-name'}, a.name), el('td', {}, a.type), el('td', {}, a.description || ''))))))));
    }
    async function showArtifact(artifactId) {
      try {
        const out = await api('GET', `/v1/artifacts/${seg(artifactId)}`);
        const a = out.artifact;
        fill(detail, el('div', {class: 'card'}, el('h3', {}, a.name),
          el('dl', {class: 'kv'}, ['id', 'key', 'type', 'scope', 'created_at', 'description'].map((f) => [el('dt', {}, f), el('dd', {}, a[f] === undefined ? '' : String(a[f]))]),
            el('dt', {}, 'storage'), el('dd', {}, a.storage ? JSON.stringify(a.storage) : 'inline')),
          el('h3', {}, 'Content'), json(out.content === undefined ? null : out.content)));
      } catch (err) { fill(detail, errorLine(err)); }
    }
    const loadForm = el('form', {id: 'load-form', onsubmit: async (e) => {
      e.preventDefault();
      const wanted = loadKeys.value.split(',').map((k) => k.trim()).filter(Boolean);
      // A load names at most 1,000 keys (docs/reference/rest.md).
      const body = {scope: scope.value, keys: wanted.length ? wanted : Array.from(byKey.keys()).slice(0, 1000)};
      try {
        const out = await api('POST', '/v1/artifacts/load', body);
        fill(block, el('pre', {id: 'prompt-text'}, out.text),
          out.missing_keys.length ? el('p', {class: 'error'}, `missing keys: ${out.missing_keys.join(', ')}`) : null);
      } catch (err) { fill(block, errorLine(err)); }
    }}, el('label', {}, 'Load into a prompt', loadKeys), el('button', {type: 'submit'}, 'Render prompt block'));
    show(el('h2', {}, 'Artifacts'),
      el('div', {class: 'cols3'},
        el('div', {}, el('h3', {}, 'Scopes'), scopeList, scopes.bar),
        el('div', {}, el('h3', {}, scope.value ? el('span', {}, 'Scope ', el('code', {id: 'artifact-scope'}, scope.value)) : 'Keys'), keys),
        el('div', {}, detail)),
      el('h3', {}, 'Prompt block (as ArtifactMemory renders it)'), loadForm, block);
    scopes.start();
    list();
  }

  // ---- libraries ------------------------------------------------------------------------

  function libraryPage() {
    const head = el('p', {class: 'muted', id: 'library-info'}, 'Loading…');
    const question = el('input', {name: 'question', class: 'wide', required: true, placeholder: 'ask the library a question'});
    const count = el('input', {name: 'count', type: 'number', min: 1, value: '5'});
    const countType = el('select', {name: 'count_type'}, el('option', {value: 'bit'}, 'bits'), el('option', {value: 'token'}, 'tokens'));
    const results = el('div', {id: 'library-results'});
    api('GET', `/v1/library/bits${query({limit: 1})}`).then((out) => {
      head.textContent = `Served library: ${out.total} bits, embedded with ${out.model}.`;
    }).catch((e) => fill(head, errorLine(e)));
    const form = el('form', {id: 'ask', onsubmit: async (e) => {
      e.preventDefault();
      fill(results, el('p', {class: 'muted'}, 'Asking…'));
      try {
        const out = await api('POST', '/v1/library/query', {text: question.value, count: Number(count.value) || 5, count_type: countType.value, omit: 'embedding'});
        const bits = Array.isArray(out.bits) ? out.bits : [];
        const tokens = bits.reduce((n, b) => n + (Number(b.token_count) || 0), 0);
        const facts = Object.entries(out).filter(([, v]) => v === null || typeof v !== 'object');
        fill(results, 
          el('dl', {class: 'kv', id: 'library-facts'}, el('dt', {}, 'bits'), el('dd', {}, String(bits.length)),
            el('dt', {}, 'tokens used'), el('dd', {}, countType.value === 'token' ? `${tokens} of ${count.value}` : String(tokens)),
            facts.map(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))])),
          ...bits.map((b) => el('div', {class: 'card bit'},
            el('div', {class: 'msg-head'}, el('span', {class: 'score'}, b.similarity === undefined ? '' : `similarity ${Number(b.similarity).toFixed(4)}`),
              el('span', {}, b.token_count === undefined ? '' : `${b.token_count} tokens`),
              b.info && b.info.title ? el('span', {class: 'name'}, b.info.title) : null,
              b.info && b.info.url ? el('span', {class: 'muted'}, b.info.url) : null,
              el('span', {class: 'muted'}, b.id || '')),
            el('p', {class: 'text'}, b.text === undefined ? '' : String(b.text)))));
      } catch (err) { fill(results, errorLine(err)); }
    }}, el('label', {}, 'Question (embedded with the library\'s embedder)', question), el('label', {}, 'count', count), el('label', {}, 'count by', countType), el('button', {type: 'submit'}, 'Ask'));
    show(el('h2', {}, 'Libraries'), head, form, results);
  }

  // ---- status ---------------------------------------------------------------------------

  // A backend as one line: never a password (the server does not send one).
  function backendText(b) {
    if (!b) return '';
    if (b.kind === 'sqlite') return `sqlite, data directory ${b.data_dir}`;
    if (b.kind === 'postgres') return `postgres, database ${b.database} on ${(b.hosts || []).join(', ')}`;
    return String(b.kind);
  }

  function vectorText(v) {
    if (!v) return '';
    return v.mode === 'pgvector' ? `pgvector ${v.pgvector_version || ''}`.trim() : `exact scoring${v.reason ? ` (${v.reason})` : ''}`;
  }

  // A bounded count: `{count, more}`, "more than N" when counting stopped at its cap.
  function countText(c) {
    if (!c) return '';
    return c.more ? `more than ${c.count.toLocaleString('en')}` : String(c.count);
  }

  // Limits as the server reports them: `_ms` in milliseconds, `_bytes` in bytes.
  function limitText(name, value) {
    if (name.endsWith('_ms')) return value >= 1000 ? `${value / 1000} s` : `${value} ms`;
    if (name.endsWith('_bytes')) return value >= 1048576 ? `${(value / 1048576).toFixed(1)} MiB (${value} bytes)` : `${value} bytes`;
    return String(value);
  }

  function statusPage() {
    const facts = el('dl', {class: 'kv', id: 'status'});
    const limits = el('dl', {class: 'kv', id: 'status-limits'});
    const errors = el('tbody');
    function fact(list, name, value) { append(list, [el('dt', {}, name), el('dd', {}, value)]); }
    show(el('h2', {}, 'Status'), facts, el('h3', {}, 'Limits'), limits,
      el('h3', {}, 'Recent errors'),
      el('p', {class: 'muted'}, 'Error responses the server gave for this namespace (the last 50, newest first; an admin key also sees refused keys and unknown routes).'),
      el('table', {id: 'status-errors'}, el('thead', {}, el('tr', {}, ['time', 'method', 'route', 'status', 'code', 'message'].map((h) => el('th', {}, h)))), errors));
    (async () => {
      const health = await fetch('/healthz', {cache: 'no-store'}).then((r) => r.ok ? 'ok' : `${r.status}`).catch((e) => String(e));
      fact(facts, 'process', health);
      const ready = await fetch('/readyz', {cache: 'no-store'}).then(async (r) => r.ok ? 'ready' : `${r.status} ${JSON.stringify(await r.json().catch(() => null))}`).catch((e) => String(e));
      fact(facts, 'database', ready);
      let recent = null;
      try {
        const s = await api('GET', '/v1/status');
        fact(facts, 'version', el('span', {id: 'status-version'}, s.version));
        fact(facts, 'backend', el('span', {id: 'status-backend'}, backendText(s.backend)));
        fact(facts, 'vector search', vectorText(s.backend && s.backend.vector_search));
        fact(facts, 'namespace', s.namespace);
        fact(facts, 'assets', countText(s.sizes.assets));
        fact(facts, 'sessions', countText(s.sizes.memory_threads));
        if (s.sizes.messages !== undefined) fact(facts, 'messages', String(s.sizes.messages));
        for (const [name, value] of Object.entries(s.limits || {})) fact(limits, name.replace(/_ms$/, '').replace(/_/g, ' '), limitText(name, value));
        recent = s.recent_errors || [];
        fill(errors, ...(recent.length ? recent.map((e) => el('tr', {},
          el('td', {}, new Date(e.at_ms).toISOString()), el('td', {}, e.method), el('td', {}, el('code', {}, e.route)),
          el('td', {}, String(e.status)), el('td', {}, e.code), el('td', {class: 'error'}, e.message)))
          : [el('tr', {}, el('td', {class: 'muted', colspan: 6}, 'No error responses.'))]));
      } catch (e) { fact(facts, 'status', e.message); }
      try {
        const bits = await api('GET', `/v1/library/bits${query({limit: 1})}`);
        fact(facts, 'library', `${bits.total} bits, ${bits.model}`);
      } catch (e) { fact(facts, 'library', e.message); }
      fact(facts, 'key', key() ? 'a key is set for this browser session' : 'no key (open server)');
      fact(facts, 'recent errors', recent === null ? 'unknown' : String(recent.length));
    })();
  }

  // ---- routing and the key --------------------------------------------------------------

  function route() {
    const hash = location.hash.replace(/^#\/?/, '');
    const [path, search] = hash.split('?');
    const params = new URLSearchParams(search || '');
    const [page, ...rest] = path.split('/');
    for (const a of document.querySelectorAll('#nav a')) {
      const active = a.dataset.page === page || (page === 'session' && a.dataset.page === 'sessions') || (page === 'asset' && a.dataset.page === 'assets');
      a.classList.toggle('active', active);
    }
    try {
      // Inside the try: a malformed escape (`#/session/%E0`) is shown as an error.
      const arg = rest.length ? decodeURIComponent(rest.join('/')) : null;
      if (page === 'session' && arg) sessionPage(arg);
      else if (page === 'assets') assetsPage(params);
      else if (page === 'asset' && arg) assetPage(arg);
      else if (page === 'artifacts') artifactsPage(params);
      else if (page === 'library') libraryPage();
      else if (page === 'status') statusPage();
      else sessionsPage();
    } catch (e) { show(errorLine(e)); }
    document.body.dataset.page = page || 'sessions';
  }

  function keyState() {
    document.getElementById('key-state').textContent = key() ? 'key set (this browser session)' : 'no key';
  }

  document.getElementById('key-use').addEventListener('click', () => {
    const input = document.getElementById('key-input');
    if (input.value.trim()) sessionStorage.setItem(KEY_ITEM, input.value.trim());
    input.value = '';
    keyState();
    route();
  });
  document.getElementById('key-forget').addEventListener('click', () => {
    sessionStorage.removeItem(KEY_ITEM);
    keyState();
    route();
  });
  window.addEventListener('hashchange', route);
  keyState();
  route();
})();

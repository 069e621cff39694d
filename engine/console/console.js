// Herald console: plain JavaScript, no build step, no dependency. Served
// from /console with this file under a versioned name; every request goes
// to this server's /v1 API with the operator's key from sessionStorage.
'use strict';

(() => {
  const KEY_STORAGE = 'herald-console-key';
  const POLL_MS = 5000;
  const HISTORY = 60; // points per chart: five minutes at one per poll
  const MAX_STAT_PAGES = 20; // pages of /v1/stats topics followed at most
  const SVG = 'http://www.w3.org/2000/svg';
  const DASH = '—';

  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];
  const fmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? fmt.format(v) : DASH);
  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

  /** Create an element with attributes and children. */
  function h(tag, attrs = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function svg(tag, attrs = {}) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    return el;
  }

  // ---- Time ----------------------------------------------------------
  function when(iso, ms) {
    const t = isNum(ms) ? ms : Date.parse(iso);
    if (!Number.isFinite(t)) return DASH;
    const d = t - Date.now();
    const a = Math.abs(d);
    let rel;
    if (a < 1500) rel = 'now';
    else {
      const [n, unit] = a < 90e3 ? [a / 1e3, 's'] : a < 90 * 60e3 ? [a / 60e3, 'min'] : a < 36 * 3600e3 ? [a / 3600e3, 'h'] : [a / 86400e3, 'd'];
      const r = `${Math.round(n)} ${unit}`;
      rel = d > 0 ? `in ${r}` : `${r} ago`;
    }
    return rel;
  }
  function timeCell(iso, ms) {
    const t = isNum(ms) ? ms : Date.parse(iso);
    const full = Number.isFinite(t) ? new Date(t).toISOString() : '';
    return h('time', { datetime: full, title: full }, when(iso, ms));
  }

  // ---- The API -------------------------------------------------------
  let key = sessionStorage.getItem(KEY_STORAGE);

  class ApiError extends Error {
    constructor(status, body, message) {
      super(message);
      this.status = status;
      this.body = body;
      this.code = body?.error?.code;
      this.field = body?.error?.field;
      this.position = body?.error?.position;
    }
  }

  /**
   * Call this server's API (paths relative to the page, so a proxy may
   * mount Herald under a prefix). Resolves to the parsed body; throws
   * ApiError for any status >= 400 (a 401 also signs out).
   */
  async function api(path, { method = 'GET', body, useKey = key, signOutOn401 = true, cache = 'no-cache' } = {}) {
    const headers = { accept: 'application/json' };
    if (useKey) headers.authorization = `Bearer ${useKey}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let r;
    try {
      r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache, credentials: 'omit' });
    } catch (e) {
      throw new ApiError(0, null, `The server could not be reached (${e.message}).`);
    }
    const text = await r.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (r.status >= 400) {
      const message = json?.error?.message || `${r.status} ${r.statusText}`;
      const err = new ApiError(r.status, json, message);
      if (r.status === 401 && signOutOn401 && useKey === key) {
        signOut('The server no longer accepts this key (401). Sign in again.');
      }
      throw err;
    }
    return json;
  }

  // ---- Messages ------------------------------------------------------
  let flashTimer = 0;
  function flash(text, kind = 'info') {
    const el = $('#flash');
    el.textContent = text;
    el.className = `flash ${kind}`;
    el.hidden = false;
    clearTimeout(flashTimer);
    flashTimer = setTimeout(() => { el.hidden = true; }, kind === 'bad' ? 12000 : 6000);
  }
  function showError(el, text) {
    el.textContent = text;
    el.hidden = !text;
  }
  /** What an error means to an operator. */
  function explain(e) {
    if (e.status === 403) return `This key may not do that (403): ${e.message}`;
    if (e.status === 0) return e.message;
    return e.message;
  }

  // ---- Sign in and out -----------------------------------------------
  async function signIn(candidate) {
    const who = await api('v1/operator', { useKey: candidate, signOutOn401: false });
    key = candidate;
    sessionStorage.setItem(KEY_STORAGE, candidate);
    server = who;
    $('#who-key').textContent = who.key;
    $('#who').hidden = false;
    $('#nav').hidden = false;
    startPolling();
    route();
  }

  function signOut(message) {
    key = null;
    server = null;
    sessionStorage.removeItem(KEY_STORAGE);
    stopPolling();
    $('#who').hidden = true;
    $('#nav').hidden = true;
    showView('login');
    showError($('#login-error'), message || '');
    $('#login-key').value = '';
    $('#login-key').focus();
  }

  function loginMessage(e) {
    if (e.status === 401) return 'This key was refused (401 Unauthorized). Check it and try again.';
    if (e.status === 403) return 'This key is valid but may not use the console (403 Forbidden): it needs the admin operation.';
    if (e.status === 404) return 'This server does not serve the operator API (404): is it an edge? Open the console of a router or a standalone gateway.';
    return `Could not sign in: ${e.message}`;
  }

  $('#login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = $('#login-key');
    const candidate = input.value.trim();
    if (!candidate) {
      input.setAttribute('aria-invalid', 'true');
      showError($('#login-error'), 'Enter an API key.');
      input.focus();
      return;
    }
    const button = $('#login-submit');
    button.disabled = true;
    try {
      await signIn(candidate);
      input.removeAttribute('aria-invalid');
      input.value = '';
      showError($('#login-error'), '');
    } catch (e) {
      input.setAttribute('aria-invalid', 'true');
      showError($('#login-error'), loginMessage(e));
      input.focus();
    } finally {
      button.disabled = false;
    }
  });
  $('#logout').addEventListener('click', () => signOut('Signed out.'));

  // ---- Views ---------------------------------------------------------
  /** What the server said about itself at sign-in (GET /v1/operator). */
  let server = null;
  const VIEWS = ['overview', 'topics', 'notifications', 'presence'];

  function showView(name) {
    for (const v of $$('.view')) v.hidden = v.id !== `view-${name}`;
    for (const a of $$('#nav a')) {
      if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    const h1 = $(`#view-${name} h1`);
    document.title = `${h1 ? h1.textContent : 'Sign in'} · Herald console`;
  }

  function route() {
    if (!key) {
      showView('login');
      return;
    }
    const name = VIEWS.includes(location.hash.slice(1)) ? location.hash.slice(1) : 'overview';
    showView(name);
    if (name === 'topics') loadTopics();
    if (name === 'notifications' && !notes.loaded) loadNotes();
  }
  window.addEventListener('hashchange', () => {
    route();
    $('#main').focus({ preventScroll: true });
  });

  // ---- Charts --------------------------------------------------------
  /** A line chart of one or more series, redrawn from its data. */
  class LineChart {
    constructor(container, series, label) {
      this.container = container;
      this.series = series; // [{name, cls}]
      this.data = series.map(() => []);
      container.setAttribute('role', 'img');
      container.setAttribute('aria-label', label);
      if (series.length > 1) {
        const legend = h('div', { class: 'legend', 'aria-hidden': 'true' },
          series.map((s) => h('span', {}, h('i', { class: s.cls }), s.name)));
        container.after(legend);
      }
      this.draw();
    }

    push(values) {
      values.forEach((v, i) => {
        const d = this.data[i];
        d.push(isNum(v) ? v : null);
        if (d.length > HISTORY) d.shift();
      });
      this.draw();
    }

    draw() {
      const W = 300;
      const H = 64;
      const top = 12;
      const all = this.data.flat().filter(isNum);
      const max = Math.max(1, ...all) * 1.1;
      const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', 'aria-hidden': 'true', focusable: 'false' });
      for (const y of [top, H - 1]) root.append(svg('line', { x1: 0, x2: W, y1: y, y2: y, class: 'grid-line', 'vector-effect': 'non-scaling-stroke' }));
      const x = (i) => (W * i) / (HISTORY - 1);
      const y = (v) => H - 1 - ((H - 1 - top) * v) / max;
      this.data.forEach((d, si) => {
        const colour = getComputedStyle(this.container).getPropertyValue(`--${this.series[si].cls}`).trim() || 'currentColor';
        const offset = HISTORY - d.length;
        // Runs of consecutive known values; a gap (an absent figure) breaks the line.
        const runs = [];
        let run = null;
        d.forEach((v, i) => {
          if (!isNum(v)) {
            run = null;
            return;
          }
          if (!run) runs.push((run = []));
          run.push([x(offset + i).toFixed(1), y(v).toFixed(1)]);
        });
        for (const pts of runs) {
          const line = pts.map(([px, py], i) => `${i ? 'L' : 'M'}${px} ${py}`).join(' ');
          if (this.series.length === 1 && pts.length > 1) {
            const area = `${line} L${pts[pts.length - 1][0]} ${H} L${pts[0][0]} ${H} Z`;
            root.append(svg('path', { d: area, fill: colour, 'fill-opacity': 0.12, stroke: 'none' }));
          }
          if (pts.length === 1) {
            root.append(svg('circle', { cx: pts[0][0], cy: pts[0][1], r: 2, fill: colour }));
          } else {
            root.append(svg('path', { d: line, fill: 'none', stroke: colour, 'stroke-width': 2, 'vector-effect': 'non-scaling-stroke', 'stroke-linejoin': 'round', 'stroke-linecap': 'round' }));
          }
        }
      });
      const label = svg('text', { x: 2, y: top - 3, class: 'axis-label' });
      label.textContent = all.length ? fmt.format(Math.max(...all)) : '';
      root.append(label);
      this.container.replaceChildren(root);
    }
  }

  /** Horizontal bars: [[label, value, cls]] into a <dl>. */
  function bars(dl, rows) {
    const max = Math.max(1, ...rows.map((r) => (isNum(r[1]) ? r[1] : 0)));
    dl.replaceChildren(...rows.flatMap(([label, value, cls = 'c1']) => {
      const fill = h('div', { class: `fill ${cls}` });
      fill.style.width = `${isNum(value) ? Math.max(value > 0 ? 2 : 0, (100 * value) / max) : 0}%`;
      return [h('dt', {}, label), h('div', { class: 'track', 'aria-hidden': 'true' }, fill), h('dd', {}, num(value))];
    }));
  }

  const charts = {
    sessions: new LineChart($('#chart-sessions'), [{ name: 'sessions', cls: 'c1' }], 'Sessions over the last five minutes'),
    deliveries: new LineChart($('#chart-deliveries'), [{ name: 'deliveries/s', cls: 'c3' }], 'Deliveries per second over the last five minutes'),
    delayed: new LineChart($('#chart-delayed'), [{ name: 'pending', cls: 'c2' }], 'Pending delayed notifications over the last five minutes'),
    callbacks: new LineChart($('#chart-callbacks'), [
      { name: 'succeeded/s', cls: 'c3' }, { name: 'failed/s', cls: 'c2' }, { name: 'dead/s', cls: 'c4' },
    ], 'Callbacks per second by outcome over the last five minutes'),
  };

  // ---- Live figures (GET /v1/stats) -----------------------------------
  let pollTimer = 0;
  let previous = null; // {at, deliveries, callbacks}
  let latestStats = null;

  function startPolling() {
    stopPolling();
    poll();
  }
  function stopPolling() {
    clearTimeout(pollTimer);
    pollTimer = 0;
  }

  function setLive(state, text) {
    const el = $('#live');
    el.className = `live ${state}`;
    $('#live-text').textContent = text;
  }

  async function poll() {
    if (!key) return;
    try {
      const stats = await api('v1/stats');
      latestStats = stats;
      render(stats);
      setLive('', 'Live');
      $('#stats-meta').textContent = `Updated ${new Date().toLocaleTimeString()}${stats?.generated_at ? ` · generated ${when(stats.generated_at)}` : ''}${stats?.mode ? ` · ${stats.mode}` : ''}`;
    } catch (e) {
      if (!key) return;
      setLive('down', e.status === 404 ? 'No stats' : 'Stale');
      $('#stats-meta').textContent = e.status === 404
        ? 'This server does not serve /v1/stats: live figures are not available here.'
        : `Live figures could not be fetched: ${explain(e)}`;
    }
    if (key) pollTimer = setTimeout(poll, POLL_MS);
  }

  /** A count from the stats body: a number, or {total: n}. */
  const total = (v) => (isNum(v) ? v : isNum(v?.total) ? v.total : undefined);

  function render(s) {
    const now = performance.now();
    const sessions = s?.sessions;
    $('#sessions-total').textContent = num(total(sessions));
    const transports = sessions?.by_transport && typeof sessions.by_transport === 'object' ? Object.entries(sessions.by_transport) : [];
    bars($('#sessions-by-transport'), transports.length
      ? transports.map(([t, n], i) => [t.replace(/_/g, '-'), n, `c${(i % 5) + 1}`])
      : [['by transport', undefined]]);
    charts.sessions.push([total(sessions)]);

    const deliveredTotal = total(s?.deliveries);
    let rate = isNum(s?.deliveries?.per_second) ? s.deliveries.per_second : undefined;
    if (rate === undefined && isNum(deliveredTotal) && previous && isNum(previous.deliveries)) {
      // An older server gives only the running total: the rate since the last poll.
      rate = Math.max(0, (deliveredTotal - previous.deliveries) / ((now - previous.at) / 1000));
    }
    $('#deliveries-rate').textContent = num(rate);
    $('#deliveries-total').textContent = num(deliveredTotal);
    $('#mailboxes').textContent = num(total(s?.mailboxes));
    charts.deliveries.push([rate]);

    const delayed = s?.delayed;
    $('#delayed-pending').textContent = num(delayed?.pending);
    const due = delayed?.due || {};
    bars($('#delayed-due'), [
      ['next minute', due.next_minute, 'c2'], ['next hour', due.next_hour, 'c2'],
      ['next day', due.next_day, 'c2'], ['later', due.later, 'c2'],
    ]);
    charts.delayed.push([delayed?.pending]);

    const cb = s?.callbacks || {};
    bars($('#callbacks-outcomes'), [
      ['succeeded', cb.succeeded, 'c3'], ['failed', cb.failed, 'c2'], ['retried', cb.retried, 'c1'],
      ['dead', cb.dead, 'c4'], ['declined', cb.declined, 'c5'],
    ]);
    const perSec = (name) => {
      if (!previous || !isNum(cb[name]) || !isNum(previous.callbacks[name])) return undefined;
      return Math.max(0, (cb[name] - previous.callbacks[name]) / ((now - previous.at) / 1000));
    };
    charts.callbacks.push([perSec('succeeded'), perSec('failed'), perSec('dead')]);

    const parts = Array.isArray(s?.parts) ? s.parts : [];
    $('#parts-card').hidden = parts.length === 0;
    $('#parts-table tbody').replaceChildren(...parts.map((p) => h('tr', {},
      h('td', {}, p.kind ?? DASH), h('td', { class: 'id' }, p.id ?? DASH),
      h('td', {}, isNum(p.age_ms) ? `${fmt.format(p.age_ms / 1000)} s` : DASH),
      h('td', {}, p.stale ? h('span', { class: 'badge bad' }, 'stale') : h('span', { class: 'badge ok' }, 'fresh')))));

    previous = { at: now, deliveries: deliveredTotal, callbacks: { ...cb } };
    if (!$('#view-topics').hidden) renderTopicCounters();
  }

  // ---- Topics --------------------------------------------------------
  const topics = { items: [], configured: [], next: null, counters: new Map(), editing: null };

  async function loadTopics(more = false) {
    if (!server?.delayed) {
      topics.items = [];
      topics.configured = [];
      $('#topic-new').disabled = true;
      const empty = $('#topics-empty');
      empty.textContent = 'Topics are kept with delayed notifications, which this server does not have (no delayed store configured).';
      empty.hidden = false;
      renderTopics();
      return;
    }
    try {
      const page = await api(`v1/topics?limit=100${more && topics.next ? `&cursor=${encodeURIComponent(topics.next)}` : ''}`);
      topics.items = more ? topics.items.concat(page.items || []) : page.items || [];
      if (!more) topics.configured = page.configured || [];
      topics.next = page.next_cursor || null;
    } catch (e) {
      if (e.status !== 401) flash(`Topics could not be listed: ${explain(e)}`, 'bad');
    }
    await loadTopicCounters();
    renderTopics();
  }

  /** Per-topic counters from /v1/stats (paged with topics_after). */
  async function loadTopicCounters() {
    const counters = new Map();
    let stats = latestStats;
    for (let page = 0; page < MAX_STAT_PAGES && stats; page++) {
      for (const t of stats?.topics?.items || []) counters.set(t.name, t);
      const next = stats?.topics?.next;
      if (!next) break;
      try {
        stats = await api(`v1/stats?topics_after=${encodeURIComponent(next)}`);
      } catch {
        break;
      }
    }
    topics.counters = counters;
  }

  function renderTopicCounters() {
    for (const s of latestStats?.topics?.items || []) topics.counters.set(s.name, s);
    renderTopics();
  }

  function retryText(r) {
    if (r === undefined || r === null || r === '2n+1') return '2n+1';
    if (Array.isArray(r?.delays_ms)) return `delays ${r.delays_ms.join(', ')} ms`;
    if (isNum(r?.initial_ms)) return `exponential ${r.initial_ms}–${r.max_ms} ms × ${r.attempts}`;
    return JSON.stringify(r);
  }

  function renderTopics() {
    const windowName = $('#topics-window').value;
    const rows = [];
    const seen = new Set();
    const all = [...topics.items, ...topics.configured.filter((c) => !topics.items.some((t) => t.name === c.name))];
    for (const t of all) seen.add(t.name);
    // Counted topics that are neither registered nor configured (the "other" bucket).
    const extra = [...topics.counters.keys()].filter((n) => !seen.has(n)).map((name) => ({ name, source: 'counted' }));
    for (const t of [...all, ...extra]) {
      const c = topics.counters.get(t.name)?.[windowName] || {};
      const late = c.lateness_ms?.p99;
      const name = h('span', { class: 'topic-name' }, t.name);
      const source = t.source === 'configured' ? h('span', { class: 'badge info', title: 'configured in the file' }, 'file')
        : t.source === 'counted' ? h('span', { class: 'badge' }, t.name === 'other' ? 'unregistered' : 'counted') : null;
      rows.push(h('tr', { 'data-topic': t.name },
        h('td', {}, name, ' ', source),
        h('td', { class: 'url', title: t.callback_url ? `${t.callback_url} · retry ${retryText(t.retry)}` : '' }, t.callback_url || (t.source === 'registered' ? 'no callback' : DASH)),
        ...['accepted', 'delivered', 'callbacks_succeeded', 'callbacks_failed', 'callbacks_retried', 'callbacks_dead', 'held', 'cancelled', 'expired']
          .map((k) => h('td', { class: 'num', 'data-counter': k }, num(c[k]))),
        h('td', { class: 'num' }, isNum(late) ? `${fmt.format(late)} ms` : DASH),
        h('td', { class: 'actions' }, t.source === 'counted' ? null
          : h('button', { type: 'button', class: 'small', 'aria-label': `Edit topic ${t.name}`, onclick: () => editTopic(t.name) }, 'Edit'))));
    }
    $('#topics-table tbody').replaceChildren(...rows);
    const empty = $('#topics-empty');
    if (server?.delayed) {
      empty.textContent = 'No topic yet. Register one with “New topic”.';
      empty.hidden = rows.length > 0;
    }
    $('#topics-more').hidden = !topics.next;
  }
  $('#topics-window').addEventListener('change', renderTopics);
  $('#topics-more').addEventListener('click', () => loadTopics(true));

  // The topic form.
  const form = $('#topic-form');
  const field = (name) => form.elements.namedItem(name);

  function clearFieldErrors(root) {
    for (const el of $$('.field-error', root)) el.remove();
    for (const el of $$('[aria-invalid]', root)) {
      el.removeAttribute('aria-invalid');
      const described = (el.getAttribute('aria-describedby') || '').split(' ').filter((id) => !id.startsWith('err-'));
      if (described.length) el.setAttribute('aria-describedby', described.join(' '));
      else el.removeAttribute('aria-describedby');
    }
  }

  /**
   * Show an API error next to the field it names (`retry.delays_ms[2]`
   * goes to the field `retry.delays_ms`); false when no field of `root`
   * matches.
   */
  function showFieldError(root, e) {
    const named = e.field;
    if (!named) return false;
    let best = null;
    for (const f of $$('[data-field]', root)) {
      const df = f.dataset.field;
      if (f.hidden) continue;
      if (named === df || named.startsWith(`${df}.`) || named.startsWith(`${df}[`)) {
        if (!best || df.length > best.dataset.field.length) best = f;
      }
    }
    if (!best) return false;
    const control = $('input, select, textarea', best);
    const id = `err-${control.id}`;
    let text = e.message;
    if (isNum(e.position)) text += ` (at character ${e.position + 1})`;
    best.append(h('p', { class: 'field-error', id, role: 'alert' }, text));
    control.setAttribute('aria-invalid', 'true');
    control.setAttribute('aria-describedby', [control.getAttribute('aria-describedby'), id].filter(Boolean).join(' '));
    control.focus();
    if (isNum(e.position) && typeof control.setSelectionRange === 'function') {
      control.setSelectionRange(e.position, control.value.length);
    }
    return true;
  }

  function showRetryFields() {
    const kind = field('retry').value;
    for (const f of $$('[data-retry]', form)) f.hidden = f.dataset.retry !== kind;
  }
  field('retry').addEventListener('change', showRetryFields);

  function openTopicForm(topic) {
    form.reset();
    clearFieldErrors(form);
    showError($('#topic-form-error'), '');
    topics.editing = topic ? topic.name : null;
    $('#h-topic-form').textContent = topic ? `Edit topic ${topic.name}` : 'New topic';
    field('name').readOnly = Boolean(topic);
    $('#topic-delete').hidden = !(topic && topic.source === 'registered');
    const note = $('#t-secrets-note');
    note.hidden = true;
    if (topic) {
      field('name').value = topic.name;
      field('callback_url').value = topic.callback_url || '';
      field('recheck_url').value = topic.recheck_url || '';
      const r = topic.retry;
      if (Array.isArray(r?.delays_ms)) {
        field('retry').value = 'delays';
        field('delays_ms').value = r.delays_ms.join(', ');
      } else if (isNum(r?.initial_ms)) {
        field('retry').value = 'exponential';
        field('initial_ms').value = r.initial_ms;
        field('max_ms').value = r.max_ms;
        field('attempts').value = r.attempts;
      }
      field('retry_if').value = topic.retry_if || '';
      if (isNum(topic.timeout_ms)) field('timeout_ms').value = topic.timeout_ms;
      if (isNum(topic.jitter_ms)) field('jitter_ms').value = topic.jitter_ms;
      if (isNum(topic.min_interval_ms)) field('min_interval_ms').value = topic.min_interval_ms;
      field('merge').value = topic.merge === true ? 'true' : topic.merge === false ? 'false' : '';
      if (topic.signing_secrets > 0) {
        note.textContent = `This topic has ${topic.signing_secrets} signing secret(s). Saving replaces them with the ones entered here: enter them again to keep signing.`;
        note.hidden = false;
      }
      if (topic.source === 'configured') {
        flash(`Topic ${topic.name} is configured in the file; saving registers settings that take its place.`);
      }
    }
    showRetryFields();
    form.hidden = false;
    (topic ? field('callback_url') : field('name')).focus();
  }

  async function editTopic(name) {
    try {
      openTopicForm(await api(`v1/topics/${encodeURIComponent(name)}`));
    } catch (e) {
      if (e.status !== 401) flash(`Topic ${name} could not be read: ${explain(e)}`, 'bad');
    }
  }

  /** The form as the API's body: only what is filled in. */
  function topicBody() {
    const body = {};
    const text = (n) => field(n).value.trim();
    const number = (n) => {
      const v = text(n);
      if (v === '') return undefined;
      const x = Number(v);
      return Number.isFinite(x) ? x : v; // the API names what is not a number
    };
    for (const n of ['callback_url', 'recheck_url', 'retry_if']) if (text(n)) body[n] = text(n);
    const kind = field('retry').value;
    if (kind === 'delays') {
      const list = text('delays_ms').split(/[\s,]+/).filter(Boolean).map((v) => (Number.isFinite(Number(v)) ? Number(v) : v));
      body.retry = { delays_ms: list };
    } else if (kind === 'exponential') {
      body.retry = { initial_ms: number('initial_ms'), max_ms: number('max_ms'), attempts: number('attempts') };
    }
    for (const n of ['timeout_ms', 'jitter_ms', 'min_interval_ms']) {
      const v = number(n);
      if (v !== undefined) body[n] = v;
    }
    if (field('merge').value) body.merge = field('merge').value === 'true';
    const secrets = field('signing_secrets').value.split('\n').map((s) => s.trim()).filter(Boolean);
    if (secrets.length) body.signing_secrets = secrets;
    return body;
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearFieldErrors(form);
    showError($('#topic-form-error'), '');
    const name = field('name').value.trim();
    if (!name) {
      showFieldError(form, { field: 'name', message: 'Give the topic a name.' });
      return;
    }
    const save = $('#topic-save');
    save.disabled = true;
    try {
      await api(`v1/topics/${encodeURIComponent(name)}`, { method: 'PUT', body: topicBody() });
      form.hidden = true;
      flash(`Topic ${name} saved.`, 'ok');
      await loadTopics();
      $(`#topics-table tr[data-topic="${CSS.escape(name)}"] button`)?.focus();
    } catch (e) {
      if (e.status === 401) return;
      if (!showFieldError(form, e)) {
        showError($('#topic-form-error'), e.field ? `${e.field}: ${explain(e)}` : explain(e));
      }
    } finally {
      save.disabled = false;
    }
  });
  $('#topic-new').addEventListener('click', () => openTopicForm(null));
  $('#topic-cancel').addEventListener('click', () => {
    form.hidden = true;
    $('#topic-new').focus();
  });
  $('#topic-delete').addEventListener('click', async () => {
    const name = topics.editing;
    if (!name || !confirm(`Delete topic ${name}? Notifications of this topic keep their settings only until they fire.`)) return;
    try {
      await api(`v1/topics/${encodeURIComponent(name)}`, { method: 'DELETE' });
      form.hidden = true;
      flash(`Topic ${name} deleted.`, 'ok');
      await loadTopics();
    } catch (e) {
      if (e.status !== 401) showError($('#topic-form-error'), explain(e));
    }
  });

  // ---- Notifications -------------------------------------------------
  const notes = { loaded: false, cursors: [null], page: 0, next: null };
  const STATE_BADGE = {
    scheduled: 'info', held: 'info', firing: 'warn', retry_wait: 'warn', dead: 'bad',
    delivered: 'ok', cancelled: '', expired: '', declined: '',
  };
  const CANCELLABLE = new Set(['scheduled', 'held', 'retry_wait', 'dead']);
  const badge = (state) => h('span', { class: `badge ${STATE_BADGE[state] ?? ''}` }, state.replace('_', ' '));

  async function loadNotes() {
    const filter = $('#notes-filter');
    clearFieldErrors(filter);
    showError($('#notes-error'), '');
    if (!server?.delayed) {
      showError($('#notes-error'), 'Delayed notifications are not enabled on this server (no delayed store configured).');
      return;
    }
    const params = new URLSearchParams({ state: $('#n-state').value, limit: $('#n-limit').value });
    const topic = $('#n-topic').value.trim();
    if (topic) params.set('topic', topic);
    const cursor = notes.cursors[notes.page];
    if (cursor) params.set('cursor', cursor);
    try {
      const page = await api(`v1/notifications?${params}`);
      notes.loaded = true;
      notes.next = page.next_cursor || null;
      renderNotes(page.items || []);
    } catch (e) {
      if (e.status === 401) return;
      if (!showFieldError(filter, e)) showError($('#notes-error'), explain(e));
    }
  }

  function renderNotes(items) {
    $('#notes-table tbody').replaceChildren(...items.map((n) => h('tr', { 'data-id': n.id, 'data-state': n.state },
      h('td', { class: 'id', title: n.id }, n.id),
      h('td', {}, n.topic || DASH),
      h('td', {}, badge(n.state)),
      h('td', {}, timeCell(n.due_at, n.due_at_ms)),
      h('td', { class: 'num' }, num(n.attempts)),
      h('td', {}, timeCell(n.updated_at, n.updated_at_ms)),
      h('td', { class: 'actions' },
        h('button', { type: 'button', class: 'small', 'aria-label': `Details of ${n.id}`, onclick: () => showNote(n.id) }, 'Details'),
        CANCELLABLE.has(n.state) ? h('button', { type: 'button', class: 'small danger', 'aria-label': `Cancel ${n.id}`, onclick: () => cancelNote(n.id) }, 'Cancel') : null,
        n.state === 'dead' ? h('button', { type: 'button', class: 'small', 'aria-label': `Retry ${n.id}`, onclick: () => retryNote(n.id) }, 'Retry') : null))));
    $('#notes-empty').hidden = items.length > 0;
    const dead = $('#n-state').value === 'dead' && items.length > 0;
    $('#dead-bulk').hidden = !dead;
    const topic = $('#n-topic').value.trim();
    $('#dead-bulk-scope').textContent = topic ? `Every dead letter of topic ${topic}` : 'Every dead letter, of every topic';
    $('#notes-page').textContent = `Page ${notes.page + 1}`;
    $('#notes-prev').disabled = notes.page === 0;
    $('#notes-next').disabled = !notes.next;
  }

  $('#notes-filter').addEventListener('submit', (ev) => {
    ev.preventDefault();
    notes.cursors = [null];
    notes.page = 0;
    loadNotes();
  });
  $('#notes-next').addEventListener('click', () => {
    if (!notes.next) return;
    notes.cursors[notes.page + 1] = notes.next;
    notes.page += 1;
    loadNotes();
  });
  $('#notes-prev').addEventListener('click', () => {
    if (notes.page === 0) return;
    notes.page -= 1;
    loadNotes();
  });

  async function showNote(id) {
    try {
      const n = await api(`v1/notifications/${encodeURIComponent(id)}`);
      const rows = [
        ['Id', h('code', {}, n.id)], ['State', badge(n.state)], ['Topic', n.topic || DASH],
        ['Accepted', timeCell(n.accepted_at, n.accepted_at_ms)], ['Due', timeCell(n.due_at, n.due_at_ms)],
        ['Updated', timeCell(n.updated_at, n.updated_at_ms)], ['Attempts', num(n.attempts)],
      ];
      if (n.step) rows.push(['Step', n.step]);
      if (n.next_attempt_at) rows.push(['Next attempt', timeCell(n.next_attempt_at, n.next_attempt_at_ms)]);
      $('#note-fields').replaceChildren(...rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
      const log = n.attempt_log || [];
      $('#attempts-table tbody').replaceChildren(...log.map((a) => h('tr', {},
        h('td', { class: 'num' }, num(a.attempt)), h('td', {}, timeCell(a.at, a.at_ms)), h('td', {}, a.kind ?? DASH),
        h('td', { class: 'num' }, a.status ?? DASH),
        h('td', {}, h('span', { class: `badge ${a.verdict === 'succeeded' || a.verdict === 'ok' ? 'ok' : a.verdict === 'failed' ? 'bad' : ''}` }, a.verdict ?? DASH)),
        h('td', { class: 'num' }, num(a.duration_ms)),
        h('td', {}, (a.error && a.excerpt && !a.error.includes(a.excerpt) ? `${a.error} · ${a.excerpt}` : a.error || a.excerpt) || DASH))));
      $('#attempts-empty').hidden = log.length > 0;
      $('#h-note').textContent = `Notification ${n.id}`;
      const panel = $('#note-detail');
      panel.hidden = false;
      panel.focus();
    } catch (e) {
      if (e.status !== 401) flash(`Notification ${id}: ${explain(e)}`, 'bad');
    }
  }
  $('#note-close').addEventListener('click', () => {
    $('#note-detail').hidden = true;
    $('#notes-table').focus();
  });

  async function cancelNote(id) {
    try {
      const s = await api(`v1/notifications/${encodeURIComponent(id)}`, { method: 'DELETE' });
      flash(`Notification ${id} is ${s.state}.`, 'ok');
    } catch (e) {
      if (e.status === 401) return;
      flash(e.code === 'too_late' ? `Too late to cancel: ${e.message}` : `Cancel failed: ${explain(e)}`, 'bad');
    }
    await loadNotes();
  }

  async function retryNote(id) {
    try {
      const s = await api(`v1/notifications/${encodeURIComponent(id)}/retry`, { method: 'POST' });
      flash(`Dead letter ${id} sent again: now ${s.state.replace('_', ' ')}.`, 'ok');
    } catch (e) {
      if (e.status === 401) return;
      flash(e.code === 'not_dead' ? `Not a dead letter any more: ${e.message}` : `Retry failed: ${explain(e)}`, 'bad');
    }
    await loadNotes();
  }

  // Every dead letter of the filter's topic (or of every topic), through
  // POST /v1/dead-letters/{retry,cancel}: 1,000 a call, until none is left.
  async function bulkDead(action) {
    const topic = $('#n-topic').value.trim();
    const what = topic ? `every dead letter of topic ${topic}` : 'every dead letter, of every topic';
    const verb = action === 'retry' ? 'Send again' : 'Cancel';
    if (!confirm(`${verb} ${what}?`)) return;
    const params = new URLSearchParams();
    if (topic) params.set('topic', topic);
    let done = 0;
    try {
      for (;;) {
        const r = await api(`v1/dead-letters/${action}?${params}`, { method: 'POST' });
        done += r.done;
        if (!r.more || r.done + r.skipped === 0) break;
      }
      flash(`${action === 'retry' ? 'Sent again' : 'Cancelled'}: ${num(done)} dead letter${done === 1 ? '' : 's'}.`, 'ok');
    } catch (e) {
      if (e.status === 401) return;
      flash(`${verb} failed after ${num(done)}: ${explain(e)}`, 'bad');
    }
    notes.cursors = [null];
    notes.page = 0;
    await loadNotes();
  }
  $('#dead-retry-all').addEventListener('click', () => bulkDead('retry'));
  $('#dead-cancel-all').addEventListener('click', () => bulkDead('cancel'));

  // ---- Presence ------------------------------------------------------
  $('#presence-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = $('#presence-form');
    clearFieldErrors(f);
    showError($('#presence-error'), '');
    const out = $('#presence-result');
    const uid = $('#p-uid').value.trim();
    if (!uid) {
      showFieldError(f, { field: 'uid', message: 'Enter a user id.' });
      return;
    }
    const site = $('#p-site').value.trim();
    const query = site ? `?site=${encodeURIComponent(site)}` : '';
    try {
      const p = await api(`v1/presence/users/${encodeURIComponent(uid)}${query}`);
      const by = p?.sessions?.by_transport && typeof p.sessions.by_transport === 'object' ? Object.entries(p.sessions.by_transport) : [];
      const edges = Array.isArray(p?.edges) ? p.edges : [];
      out.replaceChildren(
        h('div', { class: 'presence-head' },
          h('p', { class: 'big' }, p?.user ?? uid),
          p?.online ? h('span', { class: 'badge ok' }, 'online') : h('span', { class: 'badge' }, 'offline')),
        h('dl', { class: 'kv' },
          h('dt', {}, 'Since'), h('dd', {}, p?.since ? timeCell(p.since) : DASH),
          h('dt', {}, 'Sessions'), h('dd', {}, num(total(p?.sessions))),
          h('dt', {}, 'By transport'), h('dd', {}, by.length ? by.map(([t, n]) => `${t.replace(/_/g, '-')} ${num(n)}`).join(' · ') : DASH)),
        edges.length ? h('div', { class: 'table-wrap' }, h('table', { class: 'table' },
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Edge'), h('th', { scope: 'col', class: 'num' }, 'Sessions'), h('th', { scope: 'col' }, 'Since'))),
          h('tbody', {}, edges.map((e) => h('tr', {}, h('td', {}, e.edge ?? DASH), h('td', { class: 'num' }, num(e.sessions)), h('td', {}, e.since ? timeCell(e.since) : DASH)))))) : null);
      out.hidden = false;
    } catch (e) {
      out.hidden = true;
      if (e.status === 401) return;
      if (e.status === 404 || e.status === 405) {
        showError($('#presence-error'), 'Presence lookups are not available on this server (it has no /v1/presence API).');
      } else if (!showFieldError(f, e)) {
        showError($('#presence-error'), explain(e));
      }
    }
  });

  // ---- Disconnect a user, publish a test notification ----------------
  $('#disconnect-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = $('#disconnect-form');
    clearFieldErrors(f);
    showError($('#disconnect-error'), '');
    const uid = $('#d-uid').value.trim();
    const reason = $('#d-reason').value.trim();
    if (!uid) return void showFieldError(f, { field: 'uid', message: 'Enter a user id.' });
    if (!reason) return void showFieldError(f, { field: 'reason', message: 'Say why: the sessions are told.' });
    try {
      const r = await api(`v1/users/${encodeURIComponent(uid)}/disconnect`, { method: 'POST', body: { reason } });
      flash(typeof r?.sessions === 'number'
        ? `${uid}: ${r.sessions === 1 ? '1 session' : `${num(r.sessions)} sessions`} ended.`
        : `${uid}: every edge was told to end the user's sessions.`, 'ok');
    } catch (e) {
      if (e.status === 401) return;
      if (!showFieldError(f, e)) showError($('#disconnect-error'), explain(e));
    }
  });

  $('#test-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = $('#test-form');
    clearFieldErrors(f);
    showError($('#test-error'), '');
    const user = $('#t-user').value.trim();
    const event = $('#t-event').value.trim();
    const raw = $('#t-payload').value;
    if (!user) return void showFieldError(f, { field: 'users', message: 'Enter a user id.' });
    let payload;
    try { payload = JSON.parse(raw); } catch { payload = raw; }
    try {
      const r = await api('v1/notifications', { method: 'POST', body: { users: [user], event, payload } });
      flash(`Published to ${user}: ${(r?.ids ?? []).join(', ')}.`, 'ok');
    } catch (e) {
      if (e.status === 401) return;
      if (!showFieldError(f, e)) showError($('#test-error'), explain(e));
    }
  });
  // The user looked up is the one to act on.
  $('#p-uid').addEventListener('change', () => {
    const uid = $('#p-uid').value.trim();
    if (uid) {
      $('#d-uid').value = uid;
      $('#t-user').value = uid;
    }
  });

  // ---- Start ---------------------------------------------------------
  (async () => {
    if (!key) {
      route();
      $('#login-key').focus();
      return;
    }
    try {
      await signIn(key);
    } catch (e) {
      signOut(loginMessage(e));
    }
  })();
})();

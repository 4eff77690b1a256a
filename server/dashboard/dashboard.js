// The dashboard's script (docs/dashboard.md). It polls the broker's own
// routes once a second with the credential the user typed and draws what
// they answer; the page itself holds no data. No framework and no build
// step: this file is served as it is.
'use strict';

(() => {
  const POLL_MS = 1000;
  // GET /api/v1/system/cell reads the members' rows from PostgreSQL, unlike
  // the in-memory status reads, so it is asked every fifth poll only.
  const CELL_EVERY = 5;
  // A tenant with many queues (100,000 inboxes) makes a listing of
  // megabytes: past LISTING_BIG queues it is read every LISTING_SLOW polls.
  const LISTING_BIG = 1000;
  const LISTING_SLOW = 10;
  // The table draws this many rows, and the skipped column costs one depth
  // read per queue, so it is read for the first DEPTH_READS rows that have
  // groups, in the table's order.
  const ROWS_MAX = 500;
  const DEPTH_READS = 32;
  const HISTORY = 120; // chart points: two minutes
  // The byte budget (QUEEN_EPHEMERAL_MAX_BYTES) beside queen_ephemeral_bytes;
  // a broker too old to publish it gets no bar.
  const BUDGET_SERIES = 'queen_ephemeral_max_bytes';
  const TOKEN_KEY = 'queen.dashboard.token';
  // In a cell every other member's listing is read from its public URL; a
  // member that is paused or unreachable costs the poll no more than this.
  const MEMBER_TIMEOUT_MS = 3000;

  const $ = (id) => document.getElementById(id);

  const state = {
    tick: 0,
    queues: [], // the rows: this broker's listing, or the cell's merged
    local: null, // this broker's last listing answer's body
    listingOK: false,
    skipped: new Map(), // queue -> summed groups[].skipped
    sortKey: 'queue',
    sortDir: 1,
    prev: null, // {t, pushed, delivered}: the last /metrics counters
    pushed: [],
    delivered: [],
    cellMembers: null,
    // The kill switch as last seen: name ('serving', 'paused', 'unknown'),
    // since (when this page first saw the pause), seenStart (whether it
    // saw the broker serving just before, so since is within a poll).
    killSwitch: { name: 'unknown', since: null, seenStart: false },
    // The last listing answer's status (0: unreachable; null before the
    // first), its code, and the refusal in words.
    listingStatus: null,
    listingCode: '',
    listingWhy: '',
    // This member's address in a cell ('' outside one): its listing is
    // what it owns (docs/cell.md, "What a member's listing shows").
    cellSelf: '',
    // The cell's listing (docs/dashboard.md, "Queues"): whether the rows
    // are the whole cell's, the members read ({id, error}), and each
    // queue's owner by this member's view (memoized per set of ids).
    cellWide: false,
    cellRead: [],
    owners: new Map(),
    ownerIds: '',
    // The member URLs of the first view read: about those the page's
    // policy lets it connect to (the server lists the view's members when
    // it serves the page). A member that joined later needs a reload.
    pageUrls: null,
  };

  // ---- the credential -------------------------------------------------

  // sessionStorage: the token lives as long as the tab, never in a cookie
  // (so it is never sent by a request this page did not make) and never in
  // the URL (so it is not logged).
  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  }

  function setupAuth() {
    const input = $('token');
    input.value = token();
    $('auth').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = input.value.trim().replace(/^Bearer\s+/i, '');
      if (v) sessionStorage.setItem(TOKEN_KEY, v);
      else sessionStorage.removeItem(TOKEN_KEY);
      state.prev = null;
      poll();
    });
    $('forget').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      input.value = '';
      state.prev = null;
      poll();
    });
  }

  // get answers {status, body (parsed JSON or null), text}; status 0 means
  // the broker could not be reached. With base (another member's public
  // URL) the request goes there, bounded by MEMBER_TIMEOUT_MS: the member
  // answers it only as a member origin's read (docs/server.md, "Browsers").
  async function get(path, base) {
    const headers = {};
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    let r;
    try {
      const opts = { headers, cache: 'no-store', credentials: 'omit' };
      if (base) opts.signal = AbortSignal.timeout(MEMBER_TIMEOUT_MS);
      r = await fetch(base ? base.replace(/\/+$/, '') + path : path, opts);
    } catch (e) {
      return { status: 0, body: null, text: String(e) };
    }
    const text = await r.text();
    let body = null;
    if ((r.headers.get('Content-Type') || '').startsWith('application/json')) {
      try { body = JSON.parse(text); } catch (e) { body = null; }
    }
    return { status: r.status, body, text };
  }

  // why explains a refusal in a panel's note.
  function why(r, route) {
    if (r.status === 0) return 'broker unreachable';
    const refused = route + ': ' + r.status + (r.body && r.body.code ? ' ' + r.body.code : '');
    switch (r.status) {
      case 401: return refused + ' — type a token above';
      case 403: return refused + ' — this credential may not read it';
      default: return refused;
    }
  }

  // ---- formatting -----------------------------------------------------

  const intFmt = new Intl.NumberFormat('en-US');
  function fmtInt(n) { return n == null ? '–' : intFmt.format(n); }
  function fmtBytes(n) {
    if (n == null) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let v = n;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + units[i];
  }
  function fmtRate(n) {
    if (n == null) return '–';
    return n >= 100 ? intFmt.format(Math.round(n)) : n.toFixed(1);
  }
  function setText(el, text, value) {
    el.textContent = text;
    if (value !== undefined) el.dataset.value = value == null ? '' : String(value);
  }

  // ---- /metrics -------------------------------------------------------

  // parseMetrics reads the Prometheus text format into name -> [{labels,
  // value}]; comments and histograms' buckets are kept like any sample.
  function parseMetrics(text) {
    const out = new Map();
    const lineRe = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
    const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    for (const line of text.split('\n')) {
      if (line === '' || line[0] === '#') continue;
      const m = lineRe.exec(line);
      if (!m) continue;
      const labels = {};
      if (m[2]) {
        for (const l of m[2].matchAll(labelRe)) labels[l[1]] = l[2];
      }
      if (!out.has(m[1])) out.set(m[1], []);
      out.get(m[1]).push({ labels, value: Number(m[3]) });
    }
    return out;
  }
  function sum(metrics, name) {
    const s = metrics.get(name);
    return s ? s.reduce((a, x) => a + x.value, 0) : null;
  }
  function pick(metrics, name, label, value) {
    const s = metrics.get(name);
    if (!s) return null;
    const x = s.find((e) => label === undefined || e.labels[label] === value);
    return x ? x.value : null;
  }

  // ---- charts ---------------------------------------------------------

  function pushPoint(series, v) {
    series.push(v);
    if (series.length > HISTORY) series.shift();
  }

  // drawChart draws series (one point a poll) as a filled line scaled to
  // its own maximum, at the screen's pixel density.
  function drawChart(canvas, series) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 240;
    const h = canvas.clientHeight || 60;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const style = getComputedStyle(document.documentElement);
    const accent = style.getPropertyValue('--accent').trim() || '#2563eb';
    const muted = style.getPropertyValue('--muted').trim() || '#888';
    const max = Math.max(1, ...series);
    const step = w / (HISTORY - 1);
    const x0 = w - (series.length - 1) * step;
    const y = (v) => h - 2 - (v / max) * (h - 14);
    ctx.strokeStyle = muted;
    ctx.globalAlpha = 0.3;
    ctx.beginPath();
    ctx.moveTo(0, h - 1.5);
    ctx.lineTo(w, h - 1.5);
    ctx.stroke();
    ctx.globalAlpha = 1;
    ctx.fillStyle = muted;
    ctx.font = '10px system-ui, sans-serif';
    ctx.fillText('max ' + fmtRate(max), 2, 10);
    if (series.length < 2) return;
    ctx.beginPath();
    series.forEach((v, i) => (i === 0 ? ctx.moveTo(x0, y(v)) : ctx.lineTo(x0 + i * step, y(v))));
    ctx.strokeStyle = accent;
    ctx.lineWidth = 1.5;
    ctx.stroke();
    ctx.lineTo(x0 + (series.length - 1) * step, h);
    ctx.lineTo(x0, h);
    ctx.closePath();
    ctx.globalAlpha = 0.15;
    ctx.fillStyle = accent;
    ctx.fill();
    ctx.globalAlpha = 1;
  }

  // ---- panels ---------------------------------------------------------

  function renderHealth(r) {
    const el = $('broker');
    if (r.status !== 200 || !r.body) {
      el.textContent = r.status === 0 ? 'broker unreachable' : '/health: ' + r.status;
      return null;
    }
    const h = r.body;
    el.textContent = 'version ' + h.version + ' · incarnation ' + h.incarnation + ' · store ' + h.store;
    return h;
  }

  // renderKillSwitch shows the broker's state, "serving" or "paused since
  // …", rather than the switch's: "enabled" in green read as "the switch is
  // engaged". The broker keeps no time of the pause, so "since" is when
  // this page first saw it: within a poll when it saw the broker serving
  // before, "before" the first poll that saw it otherwise.
  function renderKillSwitch(ks, listing) {
    const el = $('killswitch');
    const note = $('killswitch-note');
    let stateName = 'unknown';
    let retry = null;
    let from = '';
    if (ks.status === 200 && ks.body) {
      stateName = ks.body.enabled ? 'serving' : 'paused';
      retry = ks.body.retryAfterSeconds;
    } else if (listing.status === 503 && listing.body && listing.body.code === 'ephemeral_disabled') {
      // A credential that may not read the switch still sees the pause in
      // the listing's refusal.
      stateName = 'paused';
      from = 'from the queue listing (' + why(ks, 'kill switch') + ')';
    } else if (listing.status === 200) {
      stateName = 'serving';
      from = 'from the queue listing (' + why(ks, 'kill switch') + ')';
    }
    const ksState = state.killSwitch;
    if (stateName === 'paused' && ksState.name !== 'paused') {
      ksState.since = new Date();
      ksState.seenStart = ksState.name === 'serving';
    }
    ksState.name = stateName;
    el.dataset.state = stateName;
    if (stateName === 'paused') {
      const at = ksState.since.toLocaleTimeString();
      const since = document.createElement('span');
      since.className = 'since';
      since.textContent = 'since ' + (ksState.seenStart ? at : 'before ' + at);
      el.replaceChildren('paused ', since);
      note.textContent = 'every family route answers 503 ephemeral_disabled' +
        (retry != null ? ', Retry-After ' + Math.max(1, retry) + ' s' : '') +
        '; the queues and their messages are kept' +
        (ksState.seenStart ? '' : ' (this page opened during the pause; the broker does not record when it began)') +
        (from ? ' · ' + from : '');
    } else if (stateName === 'serving') {
      el.textContent = 'serving';
      note.textContent = 'every family route is served: the kill switch has not paused the broker' + (from ? ' · ' + from : '');
    } else {
      el.textContent = '–';
      note.textContent = why(ks, 'kill switch');
    }
  }

  // bytesParts splits the broker's bytes into parts that add up to them
  // (docs/dashboard.md, "Broker bytes"): the listing's Bytes column sums
  // payloads only, while the broker also charges every queue, partition,
  // group, cursor, ring slot and parked pop, every open connection, and
  // counts the arena's slack (docs/engine.md, "What the budgets count").
  // total is the broker's bytes; tenants the queen_ephemeral_tenant_bytes
  // samples (null without /metrics); payload the listed queues' bytes (null
  // without a listing); conns the open connections (null without /metrics).
  // The last part is what the others leave, so the sum is exact.
  function bytesParts(total, tenants, payload, conns) {
    const parts = [];
    const connWord = conns == null ? 'connections' : fmtInt(conns) + (conns === 1 ? ' connection' : ' connections');
    if (tenants != null) {
      const t = tenants.reduce((a, x) => a + x.value, 0);
      const others = tenants.length > 1;
      if (payload != null) {
        parts.push({ key: 'payload', label: others ? 'payload of your queues' : 'payload', value: payload });
        parts.push({ key: 'objects', label: others ? 'object charges and other tenants\' queues' : 'object charges', value: t - payload });
      } else {
        parts.push({ key: 'queues', label: 'queues: payload and object charges', value: t });
      }
      parts.push({ key: 'rest', label: connWord + ' and arena slack', value: total - t });
    } else if (payload != null) {
      parts.push({ key: 'payload', label: 'payload', value: payload });
      parts.push({ key: 'rest', label: 'object charges, connections, slack', value: total - payload });
    }
    return parts;
  }

  function renderBytes(metrics, listed) {
    let bytes = metrics ? pick(metrics, 'queen_ephemeral_bytes', 'scope', 'cell') : null;
    if (bytes == null && listed) bytes = listed.cellBytes;
    const budget = metrics ? pick(metrics, BUDGET_SERIES) : null;
    setText($('bytes'), fmtBytes(bytes), bytes);
    const bar = $('bytes-bar');
    const note = $('bytes-note');
    if (budget && bytes != null) {
      const f = bytes / budget;
      $('budget').textContent = 'of ' + fmtBytes(budget) + ' budget · ' + (100 * f).toFixed(1) + ' %';
      bar.firstElementChild.style.width = Math.min(100, 100 * f).toFixed(2) + '%';
      bar.className = 'bar' + (f >= 0.9 ? ' bad' : f >= 0.75 ? ' warn' : '');
      bar.hidden = false;
    } else {
      $('budget').textContent = metrics ? 'the broker publishes no budget (queen_ephemeral_max_bytes)' : 'the budget needs /metrics';
      bar.hidden = true;
    }
    const tenants = metrics ? metrics.get('queen_ephemeral_tenant_bytes') || [] : null;
    const payload = listed ? (listed.queues || []).reduce((a, q) => a + (q.bytes || 0), 0) : null;
    const conns = metrics ? pick(metrics, 'queen_ephemeral_connections') : null;
    const parts = bytes == null ? [] : bytesParts(bytes, tenants, payload, conns);
    const items = [];
    for (const p of parts) {
      const dt = document.createElement('dt');
      dt.textContent = p.label;
      const dd = document.createElement('dd');
      dd.dataset.part = p.key;
      setText(dd, fmtBytes(p.value), p.value);
      items.push(dt, dd);
    }
    $('bytes-parts').replaceChildren(...items);
    // A cell member's bytes are its own (docs/cell.md, "Status routes").
    const whose = state.cellSelf ? 'this member\'s footprint; ' : '';
    if (!parts.length) note.textContent = whose;
    else if (tenants != null) {
      note.textContent = whose + 'the table\'s Bytes are payloads; the broker also charges every object it keeps and every open connection';
    } else {
      note.textContent = whose + 'from the listing\'s cellBytes; /metrics would split the rest';
    }
  }

  function renderRates(metrics, metricsResp) {
    const now = performance.now();
    if (!metrics) {
      for (const k of ['pushed', 'delivered']) {
        setText($(k + '-rate'), '–', null);
        $(k + '-note').textContent = why(metricsResp, '/metrics');
      }
      setText($('parked'), '–', null);
      $('parked-note').textContent = why(metricsResp, '/metrics');
      for (const k of ['conns', 'client-links', 'gateway-links']) setText($(k), '–', null);
      $('conns-note').textContent = why(metricsResp, '/metrics');
      state.prev = null;
      return;
    }
    const cur = {
      t: now,
      pushed: sum(metrics, 'queen_ephemeral_pushed_messages_total') || 0,
      delivered: sum(metrics, 'queen_ephemeral_delivered_messages_total') || 0,
    };
    const p = state.prev;
    // A counter that went down is a broker that restarted: start again.
    if (p && cur.pushed >= p.pushed && cur.delivered >= p.delivered) {
      const dt = (cur.t - p.t) / 1000;
      pushPoint(state.pushed, (cur.pushed - p.pushed) / dt);
      pushPoint(state.delivered, (cur.delivered - p.delivered) / dt);
    }
    state.prev = cur;
    for (const k of ['pushed', 'delivered']) {
      const s = state[k];
      const last = s.length ? s[s.length - 1] : null;
      setText($(k + '-rate'), fmtRate(last), last);
      $(k + '-note').textContent = 'all tenants, from queen_ephemeral_' + k + '_messages_total';
      drawChart($(k + '-chart'), s);
    }
    const parked = pick(metrics, 'queen_ephemeral_parked_pops');
    setText($('parked'), fmtInt(parked), parked);
    $('parked-note').textContent = 'pops waiting for a message, all tenants';
    // HTTP connections, and the links beside them: a link carries many
    // requests at once and is not counted as a connection (docs/link.md).
    const conns = pick(metrics, 'queen_ephemeral_connections');
    const clientLinks = pick(metrics, 'queen_ephemeral_client_links');
    const gatewayLinks = pick(metrics, 'queen_ephemeral_gateway_links');
    setText($('conns'), fmtInt(conns), conns);
    setText($('client-links'), fmtInt(clientLinks), clientLinks);
    setText($('gateway-links'), fmtInt(gatewayLinks), gatewayLinks);
    $('conns-note').textContent = 'HTTP connections open; each link carries many requests and is not counted among them';
  }

  function renderCell(health, cellResp) {
    const el = $('cell');
    const list = $('cell-members');
    const note = $('cell-note');
    if (!health) { el.textContent = '–'; return; }
    if (!health.cell) {
      el.textContent = 'single broker';
      list.replaceChildren();
      note.textContent = 'no cell (QUEEN_CELL_ADVERTISE is not set)';
      return;
    }
    const c = health.cell;
    el.textContent = c.members + (c.members === 1 ? ' member' : ' members') + (c.fenced ? ' · FENCED' : '');
    if (cellResp && cellResp.status === 200 && cellResp.body) {
      state.cellMembers = cellResp.body.members || [];
      note.textContent = '';
    } else if (cellResp) {
      state.cellMembers = null;
      note.textContent = 'this broker: ' + c.self + ' · ' + why(cellResp, 'members');
    }
    const items = (state.cellMembers || []).map((m) => {
      const li = document.createElement('li');
      const owns = m.declaredQueues + ' declared' + (m.implicitQueues != null ? ', ' + m.implicitQueues + ' implicit' : '');
      li.textContent = m.member + (m.self ? ' (this broker)' : '') + ' · ' + (m.live ? (m.inView ? 'live' : 'live, not in view') : 'down') + ' · owns ' + owns;
      if (!m.live) li.className = 'down';
      return li;
    });
    list.replaceChildren(...items);
  }

  // ---- the queue table ------------------------------------------------

  // renderScope says whose queues the table lists. On a cell member it is
  // the cell's: the page reads every member's listing itself (the status
  // reads are never relayed) and names the members that did not answer.
  // When the cell's view cannot be read, it is this member's listing.
  function renderScope() {
    const el = $('queues-scope');
    $('queues').classList.toggle('single', !state.cellWide);
    if (!state.cellSelf) {
      el.textContent = '';
      delete el.dataset.scope;
      return;
    }
    if (state.cellWide) {
      const missing = state.cellRead.filter((m) => m.error);
      el.dataset.scope = 'cell';
      el.dataset.missing = missing.map((m) => m.id).join(' ');
      el.textContent = 'The cell\'s listing: every member\'s, read from this page, each queue\'s row from its owner (' +
        (state.cellRead.length - missing.length) + ' of ' + state.cellRead.length + ' members answered)' +
        (missing.length
          ? '. Not read: ' + missing.map((m) => m.id + ' (' + m.error + ')').join('; ') + ': the queues it owns are not shown.'
          : '.');
      return;
    }
    delete el.dataset.missing;
    el.dataset.scope = 'member';
    el.textContent = 'This member\'s listing (' + state.cellSelf + '): the implicit queues it owns, and every declared queue, ' +
      'with zero contents where another member owns it. The cell\'s whole is the sum of every member\'s listing: ' +
      'open each member\'s dashboard; the Cell panel counts the queues each one owns.';
  }

  function rowOf(q) {
    const d = q.drops || {};
    return {
      queue: q.queue, owner: q.owner || '', tier: q.tier, depth: q.depth, bytes: q.bytes, partitions: q.partitions,
      // A queue without groups has skipped nothing; one with groups shows
      // its depth read's sum once read (null until then).
      groups: q.groups, skipped: q.groups === 0 ? 0 : state.skipped.has(q.queue) ? state.skipped.get(q.queue) : null,
      // Another member's queue: its depth read is that member's, which
      // this page does not make (only the listing and the view are read
      // across members).
      remote: state.cellWide && q.owner !== state.cellSelf,
      dropsBounds: d.bounds, dropsTtl: d.ttl, dropsRetry: d.retry,
    };
  }

  function sortedRows() {
    const k = state.sortKey;
    const dir = state.sortDir;
    const rows = state.queues.map(rowOf);
    rows.sort((a, b) => {
      const x = a[k];
      const y = b[k];
      let c;
      if (typeof x === 'string' || typeof y === 'string') c = String(x).localeCompare(String(y));
      else c = (x == null ? -1 : x) - (y == null ? -1 : y);
      return c !== 0 ? dir * c : a.queue.localeCompare(b.queue);
    });
    return rows;
  }

  const COLS = ['queue', 'owner', 'tier', 'depth', 'bytes', 'partitions', 'groups', 'skipped', 'dropsBounds', 'dropsTtl', 'dropsRetry'];

  function renderTable() {
    const rows = sortedRows();
    const body = document.querySelector('#queues tbody');
    const out = rows.slice(0, ROWS_MAX).map((r) => {
      const tr = document.createElement('tr');
      tr.dataset.queue = r.queue;
      for (const c of COLS) {
        const td = document.createElement('td');
        td.dataset.col = c;
        const v = r[c];
        if (c === 'queue' || c === 'owner' || c === 'tier') {
          td.textContent = v; // text, never markup: names are the tenant's
          td.className = c;
        } else {
          td.className = 'num' + (c.startsWith('drops') && v > 0 ? ' hot' : '');
          td.textContent = c === 'bytes' ? fmtBytes(v) : fmtInt(v);
          td.dataset.value = v == null ? '' : String(v);
        }
        tr.appendChild(td);
      }
      return tr;
    });
    if (!out.length && state.listingStatus !== null) out.push(emptyRow());
    body.replaceChildren(...out);
    document.querySelectorAll('#queues th').forEach((th) => {
      if (th.dataset.key === state.sortKey) th.setAttribute('aria-sort', state.sortDir > 0 ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    });
    $('queue-count').textContent = queueCount();
    $('queues').classList.toggle('stale', !state.listingOK);
    return rows;
  }

  function pausedListing() {
    return state.listingStatus === 503 && state.listingCode === 'ephemeral_disabled';
  }

  // queueCount is the heading's count: a number only when the listing
  // answered it. "(0)" over a paused broker's refusal read as "no queues".
  function queueCount() {
    const n = state.queues.length;
    if (state.listingStatus === null) return '';
    if (state.listingOK) return n > ROWS_MAX ? '(' + fmtInt(n) + ', the first ' + ROWS_MAX + ' shown)' : '(' + fmtInt(n) + ')';
    if (pausedListing()) return n ? '(' + fmtInt(n) + ' as read before the pause)' : '(not listed while paused)';
    return n ? '(' + fmtInt(n) + ' as last read)' : '(not listed)';
  }

  // emptyRow says why the table has no rows: none exist, the broker is
  // paused, or the listing refused the credential.
  function emptyRow() {
    const tr = document.createElement('tr');
    const td = document.createElement('td');
    td.colSpan = COLS.length;
    td.className = 'empty';
    td.id = 'queues-empty';
    if (state.listingOK) {
      td.dataset.reason = 'none';
      td.textContent = state.cellWide
        ? 'No queues in the cell: a push or a configure creates one.'
        : state.cellSelf
        ? 'No queues on this member: a push or a configure creates one (an implicit queue lands on the member that owns it).'
        : 'No queues yet: a push or a configure creates one.';
    } else if (pausedListing()) {
      td.dataset.reason = 'paused';
      td.textContent = 'The broker is paused: its listing answers 503 ephemeral_disabled until the kill switch is set back to serving ' +
        '(POST /api/v1/system/ephemeral {"enabled":true}). The queues and their messages are kept; they show here once it serves again.';
    } else {
      td.dataset.reason = 'refused';
      td.textContent = 'The listing was not read: ' + state.listingWhy + '.';
    }
    tr.appendChild(td);
    return tr;
  }

  function setupSort() {
    document.querySelectorAll('#queues th').forEach((th) => {
      th.addEventListener('click', () => {
        const k = th.dataset.key;
        if (state.sortKey === k) state.sortDir = -state.sortDir;
        else {
          state.sortKey = k;
          // Names read best A to Z, gauges largest first.
          state.sortDir = th.dataset.type === 'text' ? 1 : -1;
        }
        renderTable();
      });
    });
  }

  // readSkipped asks the depth read of the first DEPTH_READS shown queues
  // that have groups and sums their groups' skipped counts.
  async function readSkipped(rows) {
    const want = rows.slice(0, ROWS_MAX).filter((r) => r.groups > 0 && !r.remote).slice(0, DEPTH_READS);
    const keep = new Set(want.map((r) => r.queue));
    for (const k of state.skipped.keys()) if (!keep.has(k)) state.skipped.delete(k);
    await Promise.all(want.map(async (r) => {
      const d = await get('/api/v1/ephemeral/queues/' + encodeURIComponent(r.queue) + '/depth');
      if (d.status === 200 && d.body && Array.isArray(d.body.groups)) {
        state.skipped.set(r.queue, d.body.groups.reduce((a, g) => a + (g.skipped || 0), 0));
      } else {
        state.skipped.delete(r.queue);
      }
    }));
  }

  // ---- the cell's listing ---------------------------------------------

  // ownerOf is the owner of queue by the view (ids, tenant), memoized
  // until the set of ids or the tenant changes.
  function ownerOf(ids, tenant, queue) {
    const key = tenant + '\n' + ids.join(' ');
    if (state.ownerIds !== key) {
      state.ownerIds = key;
      state.owners.clear();
    }
    let o = state.owners.get(queue);
    if (o === undefined) {
      o = window.queenOwner.ownerOf(ids, tenant, queue);
      state.owners.set(queue, o);
    }
    return o;
  }

  // readCellListing reads the cell's view from this member and every other
  // member's listing from its public URL, in parallel; local is this
  // member's listing, read already. It answers the merged listing, or
  // null when the view cannot be read (a broker before the view read, or
  // a refusal): the page shows this member's listing then.
  async function readCellListing(local) {
    const v = await get('/api/v1/ephemeral/cell');
    if (v.status !== 200 || !v.body || !v.body.generation || !Array.isArray(v.body.members)) return null;
    const view = v.body;
    if (state.pageUrls === null) state.pageUrls = new Set(view.members.map((m) => m.url).filter(Boolean));
    const reads = await Promise.all(view.members.map(async (m) => {
      if (m.id === view.self) return local;
      if (!m.url) return { status: -2, body: null, text: '' };
      if (!state.pageUrls.has(m.url)) return { status: -3, body: null, text: '' };
      return get('/api/v1/ephemeral/queues', m.url);
    }));
    return merge(view, reads);
  }

  // merge builds the cell's rows as queenctl does (docs/cli.md, "A
  // cell"): a queue's row is its owner's by the view. A declared queue is
  // listed by every member, with zero contents where another owns it; an
  // implicit queue only its owner lists, and when the view moved and the
  // member listing it is not the owner by this view, its row is taken
  // anyway, with that member as the owner (it serves it). A queue whose
  // owner did not answer is left out; the scope line names that member.
  function merge(view, reads) {
    const ids = view.members.map((m) => m.id);
    const rows = new Map();
    const read = [];
    view.members.forEach((m, i) => {
      const r = reads[i];
      if (r.status !== 200 || !r.body) {
        read.push({
          id: m.id,
          error: r.status === -2 ? 'it publishes no URL for clients (QUEEN_CELL_PUBLIC_URL)'
            : r.status === -3 ? 'it joined after this page was loaded: reload the page to read it'
            : r.status === 0 ? 'no answer from ' + m.url + ' within ' + MEMBER_TIMEOUT_MS / 1000 + ' s'
            : why(r, 'queue listing'),
        });
        return;
      }
      read.push({ id: m.id, error: '' });
      for (const q of r.body.queues || []) {
        const isOwner = ownerOf(ids, view.tenant, q.queue) === m.id;
        if (isOwner || (q.tier !== 'declared' && !rows.has(q.queue))) rows.set(q.queue, Object.assign({}, q, { owner: m.id }));
      }
    });
    return { queues: [...rows.values()], read };
  }

  // ---- the poll -------------------------------------------------------

  let busy = false;
  let timer = 0;

  async function poll() {
    if (busy) return;
    busy = true;
    clearTimeout(timer);
    const started = performance.now();
    const tick = state.tick++;
    try {
      const readListing = state.queues.length <= LISTING_BIG || tick % LISTING_SLOW === 0;
      const readCell = tick % CELL_EVERY === 0;
      const skip = { status: -1, body: null, text: '' };
      const [health, listing, ks, metricsResp] = await Promise.all([
        get('/health'),
        readListing ? get('/api/v1/ephemeral/queues') : Promise.resolve(skip),
        get('/api/v1/system/ephemeral'),
        get('/metrics'),
      ]);
      const h = renderHealth(health);
      let cellResp = null;
      if (h && h.cell && readCell) cellResp = await get('/api/v1/system/cell');

      const metrics = metricsResp.status === 200 ? parseMetrics(metricsResp.text) : null;
      state.cellSelf = h && h.cell ? h.cell.self : '';
      if (listing.status === 200 && listing.body) {
        state.local = listing.body;
        const cellWide = state.cellSelf ? await readCellListing(listing) : null;
        state.cellWide = !!cellWide;
        state.cellRead = cellWide ? cellWide.read : [];
        state.queues = cellWide ? cellWide.queues : listing.body.queues || [];
        state.listingOK = true;
      } else if (listing.status !== -1) {
        // Keep the last rows, greyed: a paused broker still holds them.
        state.listingOK = false;
      }
      if (listing.status !== -1) {
        state.listingStatus = listing.status;
        state.listingCode = listing.body && listing.body.code ? listing.body.code : '';
        state.listingWhy = why(listing, 'queue listing');
      }
      // The payloads are this broker's listing's bytes (the panel is this
      // broker's): this poll's, or the last one while a long listing is
      // read every LISTING_SLOW polls.
      const listed = listing.status === 200 && listing.body ? listing.body
        : listing.status === -1 && state.listingOK && state.local ? { queues: state.local.queues || [], cellBytes: null } : null;
      renderKillSwitch(ks, listing);
      renderBytes(metrics, listed);
      renderRates(metrics, metricsResp);
      renderCell(h, cellResp);
      renderScope();
      if (state.listingOK) $('queues-note').textContent = '';
      else if (listing.status !== -1) {
        $('queues-note').textContent = pausedListing()
          ? 'paused: ' + state.listingWhy + (state.queues.length ? ' · the rows read before the pause, greyed' : '')
          : state.listingWhy + (state.queues.length ? ' · showing the last rows read' : '');
      }
      const rows = renderTable();
      if (state.listingOK) {
        await readSkipped(rows);
        renderTable();
      }
      $('status').textContent = 'updated ' + new Date().toLocaleTimeString() + ' · poll took ' + Math.round(performance.now() - started) + ' ms';
    } finally {
      busy = false;
      timer = setTimeout(poll, Math.max(0, POLL_MS - (performance.now() - started)));
    }
  }

  setupAuth();
  setupSort();
  poll();
})();

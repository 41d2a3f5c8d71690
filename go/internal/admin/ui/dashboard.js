"use strict";
// The monolock dashboard: it polls the admin API's JSON endpoints once a
// second and draws what they say. Lock names and identities are text that
// any client chooses, so they are only ever set as textContent: nothing
// from the API is parsed as HTML.
(() => {
  const TOKEN_KEY = "monolock.adminToken"; // sessionStorage: this tab only
  const REFRESH_MS = 1000;
  const ARM_MS = 4000; // how long a kick button waits for its confirming click

  const params = new URLSearchParams(location.search);
  // ?limit= and ?pages= bound the listing: locks per request, requests per
  // refresh. Beyond them the page says how many locks it does not show.
  const pageLimit = intParam("limit", 500, 1, 2000);
  const maxPages = intParam("pages", 20, 1, 1000);

  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let lastStats = null; // the previous /v1/stats sample, for grants/s
  let skewMS = 0; // the server's clock minus this browser's
  let shown = { key: null, rows: [] }; // the rows on screen, to update in place

  const $ = (id) => document.getElementById(id);

  function intParam(name, def, min, max) {
    const v = params.get(name);
    if (v === null) return def;
    const n = Number(v);
    return Number.isInteger(n) && n >= min && n <= max ? n : def;
  }

  // api fetches a JSON endpoint of this origin with the token, if any.
  // A non-2xx answer throws its {"error": ...} text, with .status set.
  async function api(path, method = "GET") {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
    if (method !== "GET") {
      // JSON, never a form type: the API refuses those from browsers.
      headers["Content-Type"] = "application/json";
      init.body = "{}";
    }
    const resp = await fetch(path, init);
    let body = null;
    try {
      body = await resp.json();
    } catch (_) {
      body = null;
    }
    if (!resp.ok) {
      const err = new Error(body && typeof body.error === "string" ? body.error : resp.status + " " + resp.statusText);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  // The cell, or null for a standalone server (404).
  async function fetchCell() {
    try {
      return await api("v1/cell");
    } catch (e) {
      if (e.status === 404) return null;
      throw e;
    }
  }

  // fetchLocks follows the listing's pages ("next") up to maxPages.
  async function fetchLocks() {
    const locks = [];
    let pages = 0;
    let next = "";
    do {
      let q = "v1/locks?limit=" + pageLimit;
      if (pages > 0) q += "&after=" + encodeURIComponent(next);
      const page = await api(q);
      pages++;
      locks.push(...page.locks);
      next = typeof page.next === "string" ? page.next : "";
    } while (next !== "" && pages < maxPages);
    return { locks, pages, more: next !== "" };
  }

  function text(el, s) {
    if (el.textContent !== s) el.textContent = s;
  }

  function seconds(ms) {
    if (ms < 1000) return ms + "ms";
    const s = ms / 1000;
    return (Number.isInteger(s) ? s : s.toFixed(1)) + "s";
  }

  function duration(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m" + String(s % 60).padStart(2, "0") + "s";
    const h = Math.floor(m / 60);
    if (h < 48) return h + "h" + String(m % 60).padStart(2, "0") + "m";
    return Math.floor(h / 24) + "d" + String(h % 24).padStart(2, "0") + "h";
  }

  function renderCell(cell) {
    if (cell === null) {
      text($("cell"), "standalone server");
      return;
    }
    const parts = ["role: " + (cell.role === "leader" ? "active" : "passive"), "leader: " + (cell.leader || "none known")];
    if (cell.role !== "leader") parts.push("(the active server lists the locks)");
    else if (cell.grace_remaining_ms > 0) parts.push("grace: " + (cell.grace_remaining_ms / 1000).toFixed(1) + " s left, new claims wait");
    else parts.push("grace: none left, granting");
    text($("cell"), parts.join("  ·  "));
  }

  function renderStats(st) {
    skewMS = Date.parse(st.now) - Date.now();
    text($("t-sessions"), String(st.sessions));
    text($("t-locks"), String(st.locks));
    text($("t-holders"), String(st.holders));
    text($("t-waiters"), String(st.waiters));
    text($("t-grants"), String(st.grants_total));
    text($("t-expiries"), String(st.expiries_total));
    text($("t-kicks"), String(st.kicks_total));
    // A rate needs two samples; the server's clock times them, so a slow
    // request does not distort it.
    if (lastStats !== null) {
      const dt = (Date.parse(st.now) - Date.parse(lastStats.now)) / 1000;
      if (dt > 0) text($("t-rate"), ((st.grants_total - lastStats.grants_total) / dt).toFixed(1));
    }
    lastStats = st;
  }

  // rowsOf flattens the locks into table rows: every holder (or the lock's
  // state without one), then its waiters in queue order. Shared holders
  // and waiters say so, and a semaphore's first row says how many of its
  // permits are taken. A server from before shared locks sends holder only.
  function rowsOf(locks) {
    const rows = [];
    for (const l of locks) {
      const holders = l.holders || (l.holder ? [l.holder] : []);
      const heldBack = l.held_back || 0;
      if (holders.length === 0) {
        rows.push({ lock: l.name, first: true, watchers: l.watchers, state: l.blocked || heldBack > 0 ? "delayed" : "free", s: null, holder: true });
      }
      holders.forEach((h, i) => {
        let state = h.mode === "shared" ? "held shared" : "held";
        if (l.blocked) state += " (delayed)";
        if (i === 0 && h.mode === "shared" && l.limit) state += " (" + (Math.max(l.holders_total || 0, holders.length) + heldBack) + " of " + l.limit + ")";
        rows.push({ lock: l.name, first: i === 0, watchers: l.watchers, state, s: h, holder: true });
      });
      if (holders.length > 0 && heldBack > 0) {
        rows.push({ lock: l.name, first: false, state: "delayed (" + heldBack + " silent)", s: null, holder: true });
      }
      (l.waiters || []).forEach((w, i) => rows.push({
        lock: l.name, first: false, state: "waiting #" + (i + 1) + (w.mode === "shared" ? " shared" : ""), s: w, holder: false,
      }));
    }
    return rows;
  }

  function rowKey(r) {
    return JSON.stringify([r.lock, r.state, r.s ? r.s.session : null]);
  }

  function renderLocks(listing, stats) {
    const rows = rowsOf(listing.locks);
    const key = rows.map(rowKey).join("\n");
    if (key !== shown.key) {
      // The rows changed: draw them anew. Otherwise only their texts are
      // updated, so that a kick button under the pointer stays the same.
      const body = $("rows");
      const drawn = rows.map(buildRow);
      body.replaceChildren(...drawn.map((d) => d.tr));
      shown = { key, rows: drawn };
      if (rows.length === 0) {
        const tr = document.createElement("tr");
        const td = document.createElement("td");
        td.colSpan = 9;
        td.className = "muted";
        td.textContent = "no locks";
        tr.append(td);
        body.append(tr);
      }
    }
    const now = Date.now() + skewMS;
    rows.forEach((r, i) => fillRow(shown.rows[i], r, now));

    const n = listing.locks.length;
    const pages = listing.pages === 1 ? "1 page" : listing.pages + " pages";
    if (!listing.more) {
      text($("paging"), n + (n === 1 ? " lock" : " locks") + " in " + pages + " of up to " + pageLimit);
    } else {
      const rest = stats.locks - n;
      text($("paging"), "showing the first " + n + " locks (" + pages + " of " + pageLimit + "); " +
        (rest > 0 ? "about " + rest + " more" : "more") + " not shown: monolock locks lists them all");
    }
  }

  function cell(tr, cls) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    tr.append(td);
    return td;
  }

  function buildRow(r) {
    const tr = document.createElement("tr");
    if (r.first) tr.className = "first";
    const d = { tr };
    d.name = cell(tr, "name");
    d.state = cell(tr, "state");
    d.session = cell(tr, "num");
    d.identity = cell(tr, "");
    d.remote = cell(tr, "");
    d.token = cell(tr, "num");
    d.lease = cell(tr, "num");
    d.since = cell(tr, "num");
    d.value = cell(tr, "value");
    const act = cell(tr, "");
    if (r.s) {
      tr.dataset.session = String(r.s.session);
      act.append(kickButton(r.s.session, r.lock));
    }
    return d;
  }

  function fillRow(d, r, now) {
    // Live watchers (protocol version 3): followers of an election.
    text(d.name, r.first ? r.lock + (r.watchers ? " · " + r.watchers + " watching" : "") : "");
    text(d.state, r.state);
    d.state.className = "state state-" + r.state.split(" ")[0];
    const s = r.s;
    text(d.session, s ? String(s.session) : "");
    text(d.identity, s ? s.identity : "");
    text(d.remote, s ? s.remote : "");
    text(d.token, s && r.holder ? String(s.token) : "");
    text(d.lease, s ? seconds(s.lease_ms) : "");
    text(d.since, s ? duration(now - Date.parse(s.since)) : "");
    // A claim's value (protocol version 3): who holds the lock and how to
    // reach it; bytes that are not UTF-8 come as hex.
    text(d.value, s ? s.value || (s.value_hex ? "0x" + s.value_hex : "") : "");
  }

  // kickButton asks for a second click before it kicks: a kick ends a
  // client's session, and a stray click should not.
  function kickButton(session, lock) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "kick";
    b.dataset.session = String(session);
    b.textContent = "kick";
    let timer = 0;
    const disarm = () => {
      clearTimeout(timer);
      b.classList.remove("armed");
      b.textContent = "kick";
    };
    b.addEventListener("click", async () => {
      if (!b.classList.contains("armed")) {
        b.classList.add("armed");
        b.textContent = "kick session " + session + "?";
        timer = setTimeout(disarm, ARM_MS);
        return;
      }
      disarm();
      b.disabled = true;
      try {
        await api("v1/sessions/" + encodeURIComponent(String(session)) + "/kick", "POST");
        notice("kicked session " + session + " (lock " + lock + ")", false);
      } catch (e) {
        notice("kick of session " + session + " failed: " + e.message +
          (e.status === 401 ? " (paste the admin token above)" : ""), true);
      } finally {
        b.disabled = false;
      }
      refresh();
    });
    return b;
  }

  function notice(msg, bad) {
    const el = $("notice");
    el.hidden = false;
    el.className = bad ? "notice error" : "notice";
    text(el, msg);
  }

  function showError(msg) {
    const el = $("error");
    el.hidden = msg === "";
    text(el, msg);
  }

  // tokenWanted: the API has asked for a token (401). The token field is
  // shown only then, or while a token is set: a server without
  // --admin-token-file needs none, and the field would only puzzle.
  let tokenWanted = false;

  function showToken() {
    $("auth").hidden = !tokenWanted && !token;
    text($("token-state"), token ? "token set (kept in this tab only)" : "no token");
  }

  function useToken() {
    const v = $("token").value.trim();
    $("token").value = "";
    // A header value: visible ASCII only, else fetch would throw.
    if (!/^[\x21-\x7e]+$/.test(v)) {
      notice("that is not a token: paste the contents of the --admin-token-file (visible ASCII, no spaces)", true);
      return;
    }
    token = v;
    sessionStorage.setItem(TOKEN_KEY, token);
    showToken();
    refresh();
  }

  function forgetToken() {
    token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    showToken();
    refresh();
  }

  let timer = 0;
  let running = false;
  let again = false;

  // refresh reads everything and draws it; one at a time, then the next a
  // second after this one ends, so a slow server is never asked twice at once.
  async function refresh() {
    clearTimeout(timer);
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      const [cell, stats, listing] = await Promise.all([fetchCell(), api("v1/stats"), fetchLocks()]);
      renderCell(cell);
      renderStats(stats);
      renderLocks(listing, stats);
      showError("");
      text($("updated"), "updated " + new Date().toLocaleTimeString());
    } catch (e) {
      if (e.status === 401 && !tokenWanted) {
        tokenWanted = true;
        showToken();
      }
      showError(e.status === 401
        ? "The admin API wants its bearer token: paste it above."
        : "Cannot read the admin API: " + e.message);
    } finally {
      running = false;
      timer = setTimeout(refresh, again ? 0 : REFRESH_MS);
      again = false;
    }
  }

  $("token-use").addEventListener("click", useToken);
  $("token-forget").addEventListener("click", forgetToken);
  $("token").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") useToken();
  });
  showToken();
  refresh();
})();

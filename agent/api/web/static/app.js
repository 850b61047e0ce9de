// meshd live page: a plain script, no build step, no dependencies. It
// reads the daemon's own JSON API (same origin; the page's CSP allows
// nothing else) and draws the power trace on a canvas itself, so the page
// works on a machine with no network but the daemon.
"use strict";

(function () {
  // How much history the trace shows, how many receipts the table keeps,
  // and how often the slower tables (meters, backends) are re-read.
  const SPAN_MS = 60000;
  const MAX_RECEIPTS = 50;
  const REFRESH_MS = 5000;
  // Distinct on light and dark backgrounds; meters take them in order.
  const PALETTE = ["#2f7ed8", "#e0712c", "#2ca25f", "#9b59b6", "#c0392b", "#16a2b8", "#b8860b", "#d63384"];

  const $ = (id) => document.getElementById(id);
  const canvas = $("trace");
  const conn = $("conn");

  // The stream's interval can be set from the page's own query string
  // (?interval_ms=), within the bounds /v1/live accepts.
  let intervalMs = 200;
  const q = new URLSearchParams(location.search).get("interval_ms");
  if (q !== null) {
    const v = Number(q);
    if (Number.isInteger(v) && v >= 50 && v <= 10000) intervalMs = v;
  }
  $("interval").textContent = String(intervalMs);
  $("span-s").textContent = String(SPAN_MS / 1000);

  // meters: name -> {color, points: [{t, uw, healthy, stale}], info (the
  // /v1/meters row), latest (the newest power event's row), li}.
  const meters = new Map();
  let samples = 0; // power events received, for data-samples
  let latestT = 0; // the newest power event's server time (unix ms)
  const shownReceipts = new Set();
  let metersLoaded = false; // /v1/meters answered once: "no meters" is true

  // ---- formatting -------------------------------------------------------

  const intFmt = new Intl.NumberFormat("en");

  function num(v) {
    return typeof v === "number" && Number.isFinite(v);
  }

  function fmtPower(uw) {
    if (!num(uw)) return "—";
    const a = Math.abs(uw);
    if (a >= 1e6) return (uw / 1e6).toFixed(a >= 1e8 ? 1 : a >= 1e7 ? 2 : 3) + " W";
    if (a >= 1e3) return (uw / 1e3).toFixed(a >= 1e5 ? 0 : 1) + " mW";
    return intFmt.format(uw) + " µW";
  }

  // fmtAxis labels a tick of an axis whose top is top µW: one unit for
  // the whole axis, as few decimals as its quarter steps need.
  function fmtAxis(uw, top) {
    const [div, unit] = top >= 1e6 ? [1e6, " W"] : top >= 1e3 ? [1e3, " mW"] : [1, " µW"];
    const step = top / 4 / div;
    const dec = Number.isInteger(step) ? 0 : step * 10 === Math.round(step * 10) ? 1 : 2;
    return (uw / div).toFixed(dec) + unit;
  }

  function fmtEnergy(uj) {
    if (!num(uj)) return "—";
    const a = Math.abs(uj);
    if (a >= 1e6) return (uj / 1e6).toFixed(3) + " J";
    if (a >= 1e4) return (uj / 1e3).toFixed(1) + " mJ";
    return intFmt.format(uj) + " µJ";
  }

  function fmtTime(ms) {
    if (!num(ms)) return "—";
    const d = new Date(ms);
    const p = (n, w) => String(n).padStart(w, "0");
    return p(d.getHours(), 2) + ":" + p(d.getMinutes(), 2) + ":" + p(d.getSeconds(), 2) + "." + p(d.getMilliseconds(), 3);
  }

  function fmtWindow(ns) {
    if (!num(ns)) return "—";
    if (ns >= 1e9) return (ns / 1e9).toFixed(2) + " s";
    return (ns / 1e6).toFixed(ns >= 1e7 ? 0 : 1) + " ms";
  }

  // el builds an element; text goes in as text, never as HTML, since
  // backend and meter names come from the daemon's configuration.
  function el(tag, cls, text, title) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (title) e.title = title;
    return e;
  }

  // absent is the cell for a figure the daemon did not give: a dash that
  // says why, never a number made up here.
  function absent(why) {
    return el("span", "absent", "—", why);
  }

  const PROVENANCES = new Set(["HwShunt", "ModelBased", "Estimator"]);
  const PROV_TITLES = {
    HwShunt: "measured by a hardware meter over the serve's window",
    ModelBased: "from a meter that models power rather than measuring it",
    Estimator: "estimated before the serve: no meter measured it",
  };

  function provBadge(p) {
    const known = PROVENANCES.has(p);
    return el("span", "prov " + (known ? "prov-" + p : "prov-other"), p || "unknown", known ? PROV_TITLES[p] : "a provenance this page does not know");
  }

  function setStatus(cls, text, title) {
    conn.className = "conn " + cls;
    conn.textContent = text;
    conn.title = title || "";
  }

  async function getJSON(path) {
    const r = await fetch(path, { cache: "no-store", headers: { Accept: "application/json" } });
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return r.json();
  }

  // ---- meters and the trace --------------------------------------------

  function meter(name) {
    let m = meters.get(name);
    if (!m) {
      m = { color: PALETTE[meters.size % PALETTE.length], points: [], info: null, latest: null, li: null };
      meters.set(name, m);
    }
    return m;
  }

  function healthyOf(m) {
    if (m.latest && typeof m.latest.healthy === "boolean") return m.latest.healthy;
    if (m.info && typeof m.info.healthy === "boolean") return m.info.healthy;
    return true;
  }

  function renderMeters() {
    const ul = $("meters");
    const names = [...meters.keys()].sort();
    for (const name of names) {
      const m = meters.get(name);
      if (!m.li) {
        m.li = el("li", "meter");
        m.li.dataset.meter = name;
        const sw = el("span", "swatch");
        // CSSOM, not a style attribute: the CSP allows the former only.
        sw.style.backgroundColor = m.color;
        m.li.append(sw, el("span", "meter-name", name), el("span", "meter-kind"), el("span", "meter-power"),
          el("span", "meter-prov"), el("span", "meter-health"));
        ul.append(m.li);
      }
      const healthy = healthyOf(m);
      m.li.classList.toggle("unhealthy", !healthy);
      m.li.dataset.healthy = String(healthy);
      const info = m.info || {};
      m.li.querySelector(".meter-kind").textContent = [info.driver, info.kind].filter(Boolean).join(" · ");
      const pw = m.latest && num(m.latest.power_uw) ? m.latest.power_uw : info.power_uw;
      m.li.querySelector(".meter-power").textContent = num(pw) ? fmtPower(pw) : "no reading";
      const prov = m.li.querySelector(".meter-prov");
      prov.replaceChildren();
      if (info.best_provenance) {
        prov.append(el("span", "best", "at best "), provBadge(info.best_provenance));
      }
      const h = m.li.querySelector(".meter-health");
      h.className = "meter-health " + (healthy ? "ok" : "bad");
      h.textContent = healthy ? "healthy" : "unhealthy";
      h.title = healthy ? "" : info.health || info.last_error || "the meter reports itself unhealthy";
    }
    if (metersLoaded && meters.size === 0 && !ul.querySelector(".empty")) {
      ul.append(el("li", "empty", "This node has no meters: receipts are estimated."));
    } else if (meters.size > 0) {
      const e = ul.querySelector(".empty");
      if (e) e.remove();
    }
  }

  function onPower(ev) {
    let d;
    try {
      d = JSON.parse(ev.data);
    } catch (e) {
      console.warn("meshd: a power event that is not JSON", e);
      return;
    }
    samples++;
    latestT = num(d.t_ms) ? d.t_ms : Date.now();
    for (const [name, row] of Object.entries(d.meters || {})) {
      const m = meter(name);
      m.latest = row;
      if (num(row.power_uw)) {
        // Plotted at the event's time: the trace is what the daemon
        // reported when. A reading much older than the interval is
        // stale and drawn as such.
        const stale = num(row.at_ms) && latestT - row.at_ms > Math.max(2000, 5 * intervalMs);
        m.points.push({ t: latestT, uw: row.power_uw, healthy: row.healthy !== false, stale: stale });
      }
    }
    let total = 0;
    for (const m of meters.values()) {
      while (m.points.length && m.points[0].t < latestT - SPAN_MS) m.points.shift();
      total += m.points.length;
    }
    canvas.dataset.points = String(total);
    canvas.dataset.samples = String(samples);
    renderMeters();
    scheduleDraw();
  }

  let drawPending = false;
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => {
      drawPending = false;
      draw();
    });
  }

  // niceCeil rounds a power up to 1, 2 or 5 times a power of ten, so the
  // axis reads in round figures.
  function niceCeil(v) {
    if (v <= 0) return 1;
    const e = Math.pow(10, Math.floor(Math.log10(v)));
    for (const f of [1, 2, 5, 10]) if (f * e >= v) return f * e;
    return 10 * e;
  }

  function draw() {
    const dpr = window.devicePixelRatio || 1;
    const cssW = canvas.clientWidth || 960;
    const cssH = canvas.clientHeight || 240;
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(cssH * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    const css = getComputedStyle(document.documentElement);
    const fg = css.getPropertyValue("--muted").trim() || "#666";
    const grid = css.getPropertyValue("--grid").trim() || "#ddd";
    const bad = css.getPropertyValue("--bad").trim() || "#c0392b";
    const L = 64, R = 12, T = 10, B = 24;
    const w = cssW - L - R, h = cssH - T - B;
    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;

    let max = 0;
    for (const m of meters.values()) for (const p of m.points) max = Math.max(max, p.uw);
    const top = niceCeil(max * 1.1);
    const now = latestT || Date.now();
    const x = (t) => L + w * (1 - (now - t) / SPAN_MS);
    const y = (uw) => T + h * (1 - uw / top);

    // Grid: four power steps, a line every ten seconds.
    ctx.strokeStyle = grid;
    ctx.fillStyle = fg;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      ctx.beginPath();
      ctx.moveTo(L, Math.round(y(v)) + 0.5);
      ctx.lineTo(L + w, Math.round(y(v)) + 0.5);
      ctx.stroke();
      ctx.fillText(fmtAxis(v, top), L - 6, y(v));
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let s = 0; s <= SPAN_MS / 1000; s += 10) {
      const xx = Math.round(x(now - s * 1000)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(xx, T);
      ctx.lineTo(xx, T + h);
      ctx.stroke();
      ctx.fillText(s === 0 ? "now" : "−" + s + " s", Math.min(Math.max(xx, L + 12), L + w - 14), T + h + 6);
    }

    if (![...meters.values()].some((m) => m.points.length > 0)) {
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(metersLoaded && meters.size === 0 ? "no meters" : "waiting for readings…", L + w / 2, T + h / 2);
      return;
    }

    // One line per meter. Healthy, fresh readings are solid; readings
    // from an unhealthy meter are dashed in the warning colour and stale
    // ones dashed in the meter's, so a flat line never hides a dead meter.
    ctx.lineWidth = 2;
    ctx.lineJoin = "round";
    for (const m of meters.values()) {
      const pts = m.points;
      for (let i = 1; i < pts.length; i++) {
        const a = pts[i - 1], b = pts[i];
        const ok = b.healthy && !b.stale;
        ctx.strokeStyle = b.healthy ? m.color : bad;
        ctx.setLineDash(ok ? [] : [4, 4]);
        ctx.beginPath();
        ctx.moveTo(x(a.t), y(a.uw));
        ctx.lineTo(x(b.t), y(b.uw));
        ctx.stroke();
      }
      ctx.setLineDash([]);
      const last = pts[pts.length - 1];
      if (last) {
        ctx.fillStyle = last.healthy ? m.color : bad;
        ctx.beginPath();
        ctx.arc(x(last.t), y(last.uw), 3, 0, 2 * Math.PI);
        ctx.fill();
      }
    }
  }

  async function loadMeters() {
    const d = await getJSON("/v1/meters");
    const names = new Set();
    for (const row of d.meters || []) {
      meter(row.name).info = row;
      names.add(row.name);
    }
    // A meter a reload removed goes once its trace has aged out.
    for (const [name, m] of meters) {
      if (!names.has(name) && m.points.length === 0) {
        if (m.li) m.li.remove();
        meters.delete(name);
      }
    }
    metersLoaded = true;
    renderMeters();
    scheduleDraw();
  }

  // ---- receipts ---------------------------------------------------------

  // fromLog turns a /v1/receipts row (the receipt under its CBOR field
  // names) into the shape of a live receipt event. The charge is the
  // measured energy when there is one, else the estimate, as the receipt
  // itself defines it.
  function fromLog(r) {
    const c = r.receipt || {};
    return {
      sequence: r.sequence,
      id: r.id,
      backend: c.backend,
      provenance: c.energy_provenance,
      tokens_in: c.tokens_in,
      tokens_out: c.tokens_out,
      tokens_accepted: c.tokens_accepted,
      charged_uj: num(c.measured_uj) ? c.measured_uj : c.estimated_uj,
      uj_per_accepted_token: c.uj_per_accepted_token,
      error_uj: c.x_error_uj,
      window_ns: c.x_window_ns,
      sealed_unix_ms: c.x_sealed_unix_ms,
    };
  }

  function addReceipt(r, fresh) {
    if (!num(r.sequence) || shownReceipts.has(r.sequence)) return;
    shownReceipts.add(r.sequence);
    const tr = el("tr", "receipt prov-row-" + (PROVENANCES.has(r.provenance) ? r.provenance : "other") + (fresh ? " fresh" : ""));
    tr.id = "receipt-" + r.sequence;
    tr.dataset.sequence = String(r.sequence);
    tr.dataset.provenance = r.provenance || "";
    if (r.id) tr.title = "receipt " + r.id;

    const td = (cls, content) => {
      const c = el("td", cls);
      if (content instanceof Node) c.append(content);
      else c.textContent = content;
      tr.append(c);
      return c;
    };
    td("num seq", String(r.sequence));
    td("sealed", fmtTime(r.sealed_unix_ms));
    td("backend", r.backend || "—");
    td("provenance", provBadge(r.provenance));
    const tok = (v) => (num(v) ? intFmt.format(v) : "—");
    td("num tokens", tok(r.tokens_in) + " / " + tok(r.tokens_out) + " / " + tok(r.tokens_accepted));
    const charged = td("num charged", num(r.charged_uj) ? fmtEnergy(r.charged_uj) : absent("no charge in this event"));
    if (num(r.charged_uj)) charged.title = intFmt.format(r.charged_uj) + " µJ";
    td("num error", num(r.error_uj) ? "± " + fmtEnergy(r.error_uj) : absent("this receipt states no error bound"));
    td("num ujpt", num(r.uj_per_accepted_token) ? intFmt.format(r.uj_per_accepted_token) : absent("this receipt carries no µJ/token figure"));
    td("num window", fmtWindow(r.window_ns));

    // Newest first: before the first row with a lower sequence.
    const body = $("receipts").tBodies[0];
    let before = null;
    for (const row of body.rows) {
      if (Number(row.dataset.sequence) < r.sequence) {
        before = row;
        break;
      }
    }
    body.insertBefore(tr, before);
    while (body.rows.length > MAX_RECEIPTS) {
      const last = body.rows[body.rows.length - 1];
      shownReceipts.delete(Number(last.dataset.sequence));
      last.remove();
    }
    $("receipts-empty").hidden = body.rows.length > 0;
  }

  function onReceipt(ev) {
    let r;
    try {
      r = JSON.parse(ev.data);
    } catch (e) {
      console.warn("meshd: a receipt event that is not JSON", e);
      return;
    }
    addReceipt(r, true);
    // A measured receipt may have moved a backend's learned cost.
    scheduleBackends();
  }

  // loadReceipts fills the table with the newest receipts in the log.
  // The stream is opened first, so a receipt sealed in between arrives
  // by one path or both; addReceipt keeps one row per sequence.
  async function loadReceipts() {
    const head = await getJSON("/v1/chain/head");
    const n = num(head.receipts) ? head.receipts : 0;
    let path = "/v1/receipts?limit=" + MAX_RECEIPTS;
    if (n > MAX_RECEIPTS) path += "&after=" + (n - MAX_RECEIPTS - 1);
    const d = await getJSON(path);
    for (const r of d.receipts || []) addReceipt(fromLog(r), false);
  }

  // ---- backends ---------------------------------------------------------

  function renderBackends(list) {
    const body = $("backends").tBodies[0];
    const rows = [];
    for (const b of list) {
      const tr = el("tr", "backend");
      tr.dataset.backend = b.name;
      tr.dataset.learned = String(!!b.learned);
      const td = (cls, content) => {
        const c = el("td", cls);
        if (content instanceof Node) c.append(content);
        else c.textContent = content;
        tr.append(c);
        return c;
      };
      td("name", b.name);
      td("recipe", b.recipe || "—");
      td("num", num(b.fidelity) ? String(b.fidelity) : "—");
      // The state is "ready", "starting" or "restarting: <why>": the
      // first word styles it, the whole of it is shown.
      const word = String(b.state || "unknown").split(":")[0].replace(/[^a-z0-9_-]/gi, "");
      const restarts = num(b.restarts) && b.restarts > 0 ? " (" + b.restarts + (b.restarts === 1 ? " restart)" : " restarts)") : "";
      td("state state-" + word, (b.state || "—") + restarts);
      td("num configured", num(b.configured_uj_per_token) ? intFmt.format(b.configured_uj_per_token) : absent("none configured"));
      td("num learned", b.learned && num(b.routing_uj_per_token) ? intFmt.format(b.routing_uj_per_token) : absent("not learned yet: too few measured receipts"));
      td("source" + (b.learned ? " is-learned" : ""), b.cost_source || "—");
      const ms = (b.meters || []).join(", ");
      td("backend-meters", ms ? ms + (b.span && b.span !== ms ? " (" + b.span + ")" : "") : b.span || "unmetered");
      rows.push(tr);
    }
    if (rows.length === 0) {
      const tr = el("tr");
      const c = el("td", "empty", "No backends.");
      c.colSpan = 8;
      tr.append(c);
      rows.push(tr);
    }
    body.replaceChildren(...rows);
  }

  async function loadBackends() {
    const d = await getJSON("/v1/backends");
    renderBackends(d.backends || []);
  }

  let backendsTimer = 0;
  function scheduleBackends() {
    if (backendsTimer) return;
    backendsTimer = setTimeout(() => {
      backendsTimer = 0;
      loadBackends().then(recovered, failed("backends"));
    }, 300);
  }

  // ---- wiring -----------------------------------------------------------

  let lastError = "";
  let streamOpen = false;
  // recovered clears a read error once a read succeeds again.
  function recovered() {
    if (streamOpen && conn.classList.contains("conn-error")) setStatus("conn-live", "live", "streaming from /v1/live");
  }
  function failed(what) {
    return (err) => {
      lastError = what + ": " + (err && err.message ? err.message : err);
      // A warning, not an error: the daemon restarting is expected and
      // the page retries by itself.
      console.warn("meshd:", lastError);
      setStatus("conn-error", "cannot read " + what, lastError);
    };
  }

  function connect() {
    const es = new EventSource("/v1/live?interval_ms=" + intervalMs);
    let dropped = false;
    es.addEventListener("open", () => {
      streamOpen = true;
      setStatus("conn-live", "live", "streaming from /v1/live");
      // Receipts sealed while the stream was down came on no stream:
      // read them from the log.
      if (dropped) {
        dropped = false;
        refresh();
      }
    });
    es.addEventListener("power", onPower);
    es.addEventListener("receipt", onReceipt);
    es.addEventListener("error", () => {
      streamOpen = false;
      // EventSource retries by itself while it can; once closed, it is
      // reopened after a pause, with the tables re-read.
      if (es.readyState === EventSource.CLOSED) {
        setStatus("conn-error", "disconnected", "the stream closed; retrying");
        setTimeout(() => {
          connect();
          refresh();
        }, 3000);
      } else {
        dropped = true;
        setStatus("conn-connecting", "reconnecting…");
      }
    });
  }

  function refresh() {
    loadMeters().then(recovered, failed("meters"));
    loadBackends().then(recovered, failed("backends"));
    loadReceipts().then(recovered, failed("receipts"));
  }

  connect();
  refresh();
  setInterval(() => {
    loadMeters().then(recovered, failed("meters"));
    loadBackends().then(recovered, failed("backends"));
  }, REFRESH_MS);
  window.addEventListener("resize", scheduleDraw);
  renderMeters();
  scheduleDraw();
})();

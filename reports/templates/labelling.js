// The labelling page of `attnwh patterns label`: draws one map at a time, takes one key per
// type, saves labels in localStorage and exports them as CSV. No network, no eval, no HTML
// built from data: tokens are drawn on the canvas and meta text is set with textContent.
(function () {
  "use strict";
  const maps = JSON.parse(document.getElementById("maps-data").textContent);
  const keys = JSON.parse(document.getElementById("keys-data").textContent);
  const byKey = {};
  for (const [name, list] of Object.entries(keys)) for (const k of list) byKey[k] = name;
  const storeKey = "attnwh-labels-" + document.body.dataset.page;
  const id = (m) => [m.run, m.example, m.layer, m.head].join(":");
  let labels = {};
  try { labels = JSON.parse(window.localStorage.getItem(storeKey) || "{}"); } catch (e) { labels = {}; }
  let index = 0;

  function save() {
    try { window.localStorage.setItem(storeKey, JSON.stringify(labels)); } catch (e) { /* private mode */ }
  }

  function progress() {
    const values = maps.map((m) => labels[id(m)]).filter((v) => v !== undefined);
    const skipped = values.filter((v) => v === "skip").length;
    document.getElementById("progress").textContent =
      `map ${maps.length ? index + 1 : 0} of ${maps.length} · ${values.length - skipped} labelled · ${skipped} skipped`;
  }

  // Zoom: pixels per map cell are the fitted size times this (+ / - keys); a long map drawn
  // large scrolls in its frame. Readout under the map: the cell under the pointer.
  let zoom = 1;
  let layout = null;

  function draw() {
    const canvas = document.getElementById("map");
    const m = maps[index];
    if (!m) {
      document.getElementById("meta").textContent = "No maps in this sample.";
      return;
    }
    const side = Math.round(Math.sqrt(m.cells.length));
    const fitted = Math.max(1, Math.floor((720 - 114) / side));
    const cell = fitted * zoom;
    // Tokens on the axes where they can be read; on longer maps the readout names them.
    const labelled = m.tokens && cell >= 7;
    const margin = labelled ? 110 : 24;
    canvas.width = canvas.height = Math.max(720, margin + side * cell + 4);
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    const top = margin, left = margin;
    layout = { side, cell, top, left };
    let max = 0;
    for (const v of m.cells) max = Math.max(max, v);
    max = max || 1;
    layout.max = max;
    for (let i = 0; i < side; i++) {
      for (let j = 0; j < side; j++) {
        const x = Math.min(1, m.cells[i * side + j] / max);
        ctx.fillStyle = `rgb(${Math.round(255 - 222 * x)},${Math.round(255 - 180 * x)},${Math.round(255 - 100 * x)})`;
        ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
      }
    }
    ctx.strokeStyle = "#999";
    ctx.strokeRect(left - 0.5, top - 0.5, side * cell + 1, side * cell + 1);
    if (labelled) {
      const size = Math.max(7, Math.min(13, cell - 1));
      ctx.font = `${size}px system-ui, sans-serif`;
      ctx.fillStyle = "#222";
      ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      m.tokens.forEach((t, i) => ctx.fillText(String(t).slice(0, 14), left - 4, top + (i + 0.5) * cell));
      ctx.save();
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      m.tokens.forEach((t, j) => ctx.fillText(String(t).slice(0, 14), -(top - 4), left + (j + 0.5) * cell));
      ctx.restore();
    }
    const shown = m.whole ? `${m.n_tokens} tokens` : `${m.n_tokens} tokens, 32 × 32 thumbnail (no whole map stored)`;
    document.getElementById("meta").textContent =
      `${m.model} · ${m.task} · run ${m.run} · example ${m.example} · layer ${m.layer} · head ${m.head} · ${shown}` +
      (zoom > 1 ? ` · zoom ×${zoom}` : "");
    document.getElementById("chosen").textContent = labels[id(m)] || "none yet";
    document.getElementById("readout").textContent = "";
    progress();
  }

  // What a map cell stands for: one token of a whole map, a run of tokens of a thumbnail.
  function span(m, k) {
    if (m.whole) return m.tokens ? `${k} ${String(m.tokens[k])}` : `${k}`;
    const side = Math.round(Math.sqrt(m.cells.length));
    const first = Math.floor((k * m.n_tokens) / side), last = Math.ceil(((k + 1) * m.n_tokens) / side) - 1;
    return first === last ? `${first}` : `${first}–${last}`;
  }

  function readout(event) {
    const m = maps[index];
    if (!m || !layout) return;
    const box = event.target.getBoundingClientRect();
    const scale = event.target.width / box.width;
    const j = Math.floor(((event.clientX - box.left) * scale - layout.left) / layout.cell);
    const i = Math.floor(((event.clientY - box.top) * scale - layout.top) / layout.cell);
    const out = document.getElementById("readout");
    if (i < 0 || j < 0 || i >= layout.side || j >= layout.side) { out.textContent = ""; return; }
    const share = m.cells[i * layout.side + j] / layout.max;
    out.textContent = `query ${span(m, i)} → key ${span(m, j)} · ${(100 * share).toFixed(0)} % of the map's largest weight`;
  }

  function go(step) {
    index = Math.max(0, Math.min(maps.length - 1, index + step));
    draw();
  }

  function nextUnlabelled() {
    for (let k = index + 1; k < maps.length; k++) {
      if (labels[id(maps[k])] === undefined) { index = k; draw(); return; }
    }
    go(1);
  }

  function exportCsv() {
    const lines = ["run,example,layer,head,type"];
    for (const m of maps) {
      const label = labels[id(m)];
      if (label && label !== "skip") lines.push([m.run, m.example, m.layer, m.head, label].join(","));
    }
    const blob = new Blob([lines.join("\n") + "\n"], { type: "text/csv" });
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = "labels.csv";
    document.body.appendChild(link);
    link.click();
    link.remove();
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "ArrowLeft" || event.key === "Backspace") { event.preventDefault(); go(-1); return; }
    if (event.key === "ArrowRight") { event.preventDefault(); go(1); return; }
    if (event.key === "+" || event.key === "=") { event.preventDefault(); zoom = Math.min(8, zoom * 2); draw(); return; }
    if (event.key === "-") { event.preventDefault(); zoom = Math.max(1, zoom / 2); draw(); return; }
    const name = byKey[event.key.toLowerCase()];
    if (!name || !maps[index]) return;
    event.preventDefault();
    labels[id(maps[index])] = name;
    save();
    nextUnlabelled();
  });
  document.getElementById("export").addEventListener("click", exportCsv);
  document.getElementById("map").addEventListener("mousemove", readout);
  draw();
})();

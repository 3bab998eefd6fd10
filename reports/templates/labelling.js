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

  function draw() {
    const canvas = document.getElementById("map");
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    const m = maps[index];
    if (!m) {
      document.getElementById("meta").textContent = "No maps in this sample.";
      return;
    }
    const side = Math.round(Math.sqrt(m.cells.length));
    const margin = m.tokens ? 110 : 24;
    const cell = Math.max(1, Math.floor((canvas.width - margin - 4) / side));
    const top = margin, left = margin;
    let max = 0;
    for (const v of m.cells) max = Math.max(max, v);
    max = max || 1;
    for (let i = 0; i < side; i++) {
      for (let j = 0; j < side; j++) {
        const x = Math.min(1, m.cells[i * side + j] / max);
        ctx.fillStyle = `rgb(${Math.round(255 - 222 * x)},${Math.round(255 - 180 * x)},${Math.round(255 - 100 * x)})`;
        ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
      }
    }
    ctx.strokeStyle = "#999";
    ctx.strokeRect(left - 0.5, top - 0.5, side * cell + 1, side * cell + 1);
    if (m.tokens) {
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
      `${m.model} · ${m.task} · run ${m.run} · example ${m.example} · layer ${m.layer} · head ${m.head} · ${shown}`;
    document.getElementById("chosen").textContent = labels[id(m)] || "none yet";
    progress();
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
    const name = byKey[event.key.toLowerCase()];
    if (!name || !maps[index]) return;
    event.preventDefault();
    labels[id(maps[index])] = name;
    save();
    nextUnlabelled();
  });
  document.getElementById("export").addEventListener("click", exportCsv);
  draw();
})();

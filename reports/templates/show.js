// The `attnwh show` page: every head of a layer as a small map, as many across as fit, and the
// head clicked drawn large with its tokens (templates/token_map.js draws both); menus switch the
// lens and the layer. The maps come as bytes per lens and layer (#show-data), decoded only when
// that lens and layer are on screen. Tokens only ever go in through textContent or the canvas.
(function () {
  "use strict";
  var maps = window.attnwhTokenMap;
  var data = JSON.parse(document.getElementById("show-data").textContent);
  var n = data.tokens.length;
  var state = { lens: data.lens, layer: data.layer, head: 0 };
  var decoded = {};
  var lensMenu = document.getElementById("lens"), layerMenu = document.getElementById("layer");
  var grid = document.getElementById("grid"), detail = document.getElementById("detail");
  var canvas = document.getElementById("detail-map"), readout = document.getElementById("readout");

  function cells(lens, layer) {
    var key = lens + " " + layer;
    if (!decoded[key]) decoded[key] = maps.decode(data.maps[lens][String(layer)]);
    return decoded[key];
  }

  function panels() { return state.lens === "block" ? 1 : data.heads; }
  // Grouped-query attention: which key/value head a query head reads (data.groupSize heads share one).
  function group(panel) { return Math.floor(panel / data.groupSize); }
  function name(panel) {
    if (state.lens === "block") return "whole block";
    return "head " + panel + (data.groupSize > 1 ? " · kv " + group(panel) : "");
  }
  function lensTitle() {
    return data.lenses.filter(function (l) { return l[0] === state.lens; })[0][1];
  }

  function option(menu, value, text) {
    var o = document.createElement("option");
    o.value = String(value);
    o.textContent = text;
    menu.appendChild(o);
  }
  data.lenses.forEach(function (l) { option(lensMenu, l[0], l[1]); });
  data.layers.forEach(function (layer) { option(layerMenu, layer, String(layer)); });
  lensMenu.value = state.lens;
  layerMenu.value = String(state.layer);
  lensMenu.disabled = data.lenses.length < 2;
  layerMenu.disabled = data.layers.length < 2;

  function drawDetail() {
    var width = detail.clientWidth || 600;
    maps.draw(canvas, cells(state.lens, state.layer), state.head * n * n, data.tokens, data.kinds, width, 22, data.causal);
    canvas.setAttribute("aria-label", "layer " + state.layer + ", " + name(state.head) + ": " + lensTitle());
    document.getElementById("detail-title").textContent =
      "Layer " + state.layer + ", " + name(state.head) + " · " + lensTitle();
    readout.textContent = "";
  }

  function drawHeads() {
    var all = cells(state.lens, state.layer);
    grid.textContent = "";
    for (var p = 0; p < panels(); p++) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "head";
      button.setAttribute("data-head", String(p));
      button.setAttribute("aria-pressed", String(p === state.head));
      var thumb = maps.image(all, p * n * n, n, data.causal);
      thumb.setAttribute("aria-hidden", "true");
      button.appendChild(thumb);
      button.appendChild(document.createTextNode(name(p)));
      button.addEventListener("click", select.bind(null, p));
      grid.appendChild(button);
    }
    document.getElementById("heads-title").textContent =
      "Layer " + state.layer + (state.lens === "block" ? "" : ": its " + data.heads + " heads") + " (click one)";
  }

  function drawn() {
    // What is on screen, for whoever drives the page (the tests wait on it).
    document.body.setAttribute("data-drawn", state.lens + " " + state.layer + " " + state.head);
    // Inline in a notebook the page sits in a frame of its own: fit the frame to the page.
    try {
      if (window.frameElement) window.frameElement.style.height = document.documentElement.scrollHeight + 4 + "px";
    } catch (error) { /* a frame of another origin: it keeps its height */ }
  }

  function select(panel) {
    state.head = panel;
    grid.querySelectorAll("button.head").forEach(function (b) {
      b.setAttribute("aria-pressed", String(Number(b.getAttribute("data-head")) === panel));
    });
    drawDetail();
    drawn();
  }

  function redraw() {
    state.lens = lensMenu.value;
    state.layer = Number(layerMenu.value);
    if (state.head >= panels()) state.head = 0;
    drawHeads();
    drawDetail();
    drawn();
  }

  lensMenu.addEventListener("change", redraw);
  layerMenu.addEventListener("change", redraw);
  canvas.addEventListener("mousemove", function (event) {
    var at = maps.cellAt(canvas, event);
    if (!at) { readout.textContent = ""; return; }
    var share = cells(state.lens, state.layer)[state.head * n * n + at[0] * n + at[1]] / 255;
    var pair = "query " + at[0] + " “" + data.tokens[at[0]] + "” → key " + at[1] + " “" + data.tokens[at[1]] + "”";
    readout.textContent = data.causal && at[1] > at[0]
      ? pair + ": not visible (a decoder's row " + at[0] + " sees keys 0 to " + at[0] + " only)"
      : pair + ": share " + share.toFixed(3) + " (± 0.002)";
  });
  canvas.addEventListener("mouseleave", function () { readout.textContent = ""; });
  // The large map follows the page's width.
  var pending = false;
  window.addEventListener("resize", function () {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () { pending = false; drawDetail(); drawn(); });
  });
  redraw();
})();

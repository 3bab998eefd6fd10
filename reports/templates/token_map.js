// Attention maps drawn from bytes on a canvas, shared by the report's head panel and the
// `attnwh show` page (window.attnwhTokenMap). A map is n × n bytes, row-major, 0 … 255 for
// shares 0 … 1 (reports/token_maps.py map_bytes); row i is query token i, column j key token j.
// A map is painted as an image of one pixel a cell and then scaled without smoothing: a long
// input costs n² pixel writes, not n² rectangles.
(function () {
  "use strict";
  var COLOURS = { cls: "#b2182b", sep: "#2166ac", punct: "#1b7837" };
  var TINTS = { cls: "#fbe3e6", sep: "#dfeaf6", punct: "#d9f0de" };
  var FONT = 13; // label size in CSS px: readable at 100 % zoom
  var PUNCT_FONT = 17; // a comma or full stop at 13 px is a speck
  var STRIP = 6; // the colour strip beside the map that marks special rows and columns
  var FAMILY = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  // A decoder's (causal) map is a triangle: row i sees keys 0 … i. The cells above the diagonal
  // are not part of it: grey (hatched in the large map), never the white of a weight of 0.
  var BLANK = 239, HATCH = "rgb(200, 200, 200)";

  // The square-root ramp from white through #6baed6 to #08306b (ColorBrewer's Blues): the small
  // shares most of a map holds stay visible, 0 is white. RAMP[3 v .. 3 v + 2] colours byte v.
  var RAMP = (function () {
    var ramp = new Uint8ClampedArray(256 * 3), stops = [[255, 255, 255], [107, 174, 214], [8, 48, 107]];
    for (var v = 0; v < 256; v++) {
      var t = 2 * Math.sqrt(v / 255), k = Math.min(1, Math.floor(t)), f = t - k;
      for (var c = 0; c < 3; c++) ramp[3 * v + c] = Math.round(stops[k][c] + f * (stops[k + 1][c] - stops[k][c]));
    }
    return ramp;
  })();

  function decode(base64) {
    var raw = atob(base64), bytes = new Uint8Array(raw.length);
    for (var k = 0; k < raw.length; k++) bytes[k] = raw.charCodeAt(k);
    return bytes;
  }

  // The map of `n` tokens starting at `offset` in `cells` as an n × n canvas, a pixel a cell;
  // `causal`: a decoder's, whose cells above the diagonal are grey (not part of the map).
  function image(cells, offset, n, causal) {
    var canvas = document.createElement("canvas");
    canvas.width = canvas.height = n;
    var context = canvas.getContext("2d");
    var pixels = context.createImageData(n, n), data = pixels.data;
    for (var k = 0; k < n * n; k++) {
      if (causal && k % n > Math.floor(k / n)) {
        data[4 * k] = data[4 * k + 1] = data[4 * k + 2] = BLANK;
      } else {
        var v = 3 * cells[offset + k];
        data[4 * k] = RAMP[v];
        data[4 * k + 1] = RAMP[v + 1];
        data[4 * k + 2] = RAMP[v + 2];
      }
      data[4 * k + 3] = 255;
    }
    context.putImageData(pixels, 0, 0);
    return canvas;
  }

  function label(token) {
    return token.length > 12 ? token.slice(0, 11) + "…" : token;
  }

  function font(kind) {
    return (kind === "punct" ? "bold " + PUNCT_FONT : (kind ? "bold " : "") + FONT) + "px " + FAMILY;
  }

  // Draws the map with its tokens on both axes into `canvas`, at most `width` CSS px wide and
  // cells at most `maxCell` px: rows are query tokens (labels left), columns key tokens (labels
  // above, turned). [CLS], [SEP] and punctuation are in their colour on a tint, punctuation
  // larger, and a strip beside the map marks their rows and columns. Where the cells are
  // smaller than a line of text, every k-th token is labelled (the strip still marks all).
  // Returns the geometry, kept on the canvas for cellAt.
  // `causal`: a decoder's map, its cells above the diagonal hatched grey.
  function draw(canvas, cells, offset, tokens, kinds, width, maxCell, causal) {
    var n = tokens.length, context = canvas.getContext("2d");
    var widest = 0;
    tokens.forEach(function (token, i) {
      context.font = font(kinds[i]);
      widest = Math.max(widest, context.measureText(label(token)).width);
    });
    var margin = Math.ceil(widest) + 10 + STRIP + 4;
    var cell = Math.min(maxCell || 22, Math.max(0.25, (width - margin - 2) / n));
    if (cell >= 2) cell = Math.floor(cell); // whole pixels: crisp cell edges
    var size = n * cell, side = Math.ceil(margin + size + 2);
    var step = Math.max(1, Math.ceil(FONT / cell)); // a label a row where a row holds a line
    var ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(side * ratio);
    canvas.height = Math.round(side * ratio);
    canvas.style.width = side + "px";
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, side, side);
    context.imageSmoothingEnabled = false;
    context.drawImage(image(cells, offset, n, causal), margin, margin, size, size);
    if (causal && cell >= 3) hatch(context, margin, cell, n);
    context.strokeStyle = "#d0d7de";
    context.lineWidth = 1;
    context.strokeRect(margin - 0.5, margin - 0.5, size + 1, size + 1);
    context.textBaseline = "middle";
    tokens.forEach(function (token, i) {
      var kind = kinds[i], centre = margin + (i + 0.5) * cell;
      if (kind) { // the strip: full length of the row and of the column
        context.fillStyle = COLOURS[kind];
        context.fillRect(margin - STRIP - 2, margin + i * cell, STRIP, Math.max(cell, 1));
        context.fillRect(margin + i * cell, margin - STRIP - 2, Math.max(cell, 1), STRIP);
      }
      if (i % step) return;
      var text = label(token), band = Math.min(Math.max(cell, FONT), FONT + 4);
      context.font = font(kind);
      var w = context.measureText(text).width, gap = STRIP + 6;
      // The row's label ends at the strip; the column's, turned, starts there and reads upwards.
      for (var axis = 0; axis < 2; axis++) {
        context.save();
        if (axis === 0) context.translate(margin - gap, centre);
        else { context.translate(centre, margin - gap); context.rotate(-Math.PI / 2); }
        var from = axis === 0 ? -w : 0;
        if (kind) {
          context.fillStyle = TINTS[kind];
          context.fillRect(from - 3, -band / 2, w + 6, band);
        }
        context.fillStyle = COLOURS[kind] || "#1f2328";
        context.textAlign = "left";
        context.fillText(text, from, 0);
        context.restore();
      }
    });
    var geometry = { n: n, margin: margin, cell: cell, side: side };
    canvas.attnwhGeometry = geometry;
    // The geometry on the element too, for whoever reads the drawing (the tests do).
    canvas.setAttribute("data-tokens", String(n));
    canvas.setAttribute("data-margin", String(margin));
    canvas.setAttribute("data-cell", String(cell));
    canvas.setAttribute("data-strip", String(STRIP));
    canvas.setAttribute("data-font", String(FONT));
    canvas.setAttribute("data-label-step", String(step));
    canvas.setAttribute("data-causal", String(Boolean(causal)));
    return geometry;
  }

  // Diagonal lines over the cells above the diagonal of an n × n map at (margin, margin).
  function hatch(context, margin, cell, n) {
    context.save();
    context.beginPath();
    for (var i = 0; i < n - 1; i++) context.rect(margin + (i + 1) * cell, margin + i * cell, (n - 1 - i) * cell, cell);
    context.clip();
    context.strokeStyle = HATCH;
    context.lineWidth = 1;
    context.beginPath();
    var size = n * cell;
    for (var d = -size; d < size; d += 7) {
      context.moveTo(margin + d, margin + size);
      context.lineTo(margin + d + size, margin);
    }
    context.stroke();
    context.restore();
  }

  // The [query, key] cell under a mouse event on a canvas `draw` drew, or null.
  function cellAt(canvas, event) {
    var g = canvas.attnwhGeometry, box = canvas.getBoundingClientRect();
    if (!g || !box.width) return null;
    var scale = g.side / box.width;
    var x = (event.clientX - box.left) * scale - g.margin, y = (event.clientY - box.top) * scale - g.margin;
    var i = Math.floor(y / g.cell), j = Math.floor(x / g.cell);
    return i >= 0 && j >= 0 && i < g.n && j < g.n ? [i, j] : null;
  }

  window.attnwhTokenMap = { decode: decode, image: image, draw: draw, cellAt: cellAt, colours: COLOURS, blank: BLANK };
})();

// The report's own script: draws every chart with vega-embed and runs the head panel.
// Clicking a cell of a layer × head chart selects that head in every such chart (two Vega
// signals, selected_layer and selected_head) and fills the panel from the embedded
// #head-data JSON: no server, no request. Text from the warehouse only ever goes in through
// textContent, never as markup.
(function () {
  "use strict";
  var options = { renderer: "svg", actions: { export: true, source: false, compiled: false, editor: false } };
  var selectable = []; // views that declare the selection signals
  var selected = null; // [layer, head] or null
  var panel = (window.attnwhHeadPanel = { select: null, views: selectable, drawn: 0 });

  function setSignals(view) {
    view.signal("selected_layer", selected ? selected[0] : -1);
    view.signal("selected_head", selected ? selected[1] : -1);
    view.runAsync();
  }

  document.querySelectorAll('script[type="application/json"][data-chart]').forEach(function (holder) {
    var target = document.getElementById(holder.getAttribute("data-chart"));
    var spec = JSON.parse(holder.textContent);
    vegaEmbed(target, spec, options)
      .then(function (result) {
        panel.drawn += 1;
        var names = (spec.params || []).map(function (p) { return p.name; });
        if (names.indexOf("selected_layer") < 0 || !panel.select) return;
        selectable.push(result.view);
        target.classList.add("selectable");
        setSignals(result.view);
        result.view.addEventListener("click", function (event, item) {
          var datum = item && item.datum;
          if (datum && typeof datum.layer === "number" && typeof datum.head === "number") {
            panel.select(datum.layer, datum.head);
          }
        });
      })
      .catch(function (error) {
        target.textContent = "This chart could not be drawn: " + error;
        console.error(error);
      });
  });

  var holder = document.getElementById("head-data");
  if (!holder) return;
  var data = JSON.parse(holder.textContent);
  var aside = document.getElementById("head-panel");
  var body = document.getElementById("head-panel-body");
  var closer = document.getElementById("head-panel-close");
  var col = {};
  data.columns.forEach(function (name, k) { col[name] = k; });
  var SEP = "\u0000";

  function element(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function format(value, signed) {
    if (value === null || value === undefined) return "–";
    var text = Math.abs(value) >= 100 ? value.toFixed(1) : value.toFixed(signed ? 4 : 3);
    return signed && value > 0 ? "+" + text : text;
  }

  function cell(row) {
    var interval = row[col.ci_low] !== null;
    var td = element("td");
    td.appendChild(element("span", format(row[col.value], interval), "value"));
    if (interval) {
      td.appendChild(
        element("span", "95 % CI [" + format(row[col.ci_low], true) + ", " + format(row[col.ci_high], true) + "]", "detail")
      );
    }
    if (row[col.p_value] !== null) {
      var adjusted = row[col.p_adjusted] === null ? "–" : row[col.p_adjusted].toPrecision(3);
      td.appendChild(element("span", "p " + row[col.p_value].toPrecision(3) + " · adjusted " + adjusted, "detail"));
    }
    td.setAttribute("data-value", String(row[col.value]));
    return td;
  }

  // A stored map pooled to side × side bytes (0 white … 255 black), drawn 4 px a cell.
  function thumbnail(map) {
    var side = data.thumbnailSide, bytes = atob(map[3]), scale = 4;
    var canvas = element("canvas");
    canvas.width = canvas.height = side * scale;
    var context = canvas.getContext("2d");
    for (var k = 0; k < bytes.length; k++) {
      var shade = 255 - bytes.charCodeAt(k);
      context.fillStyle = "rgb(" + shade + "," + shade + "," + shade + ")";
      context.fillRect((k % side) * scale, Math.floor(k / side) * scale, scale, scale);
    }
    var figure = element("figure", null, "thumb");
    figure.appendChild(canvas);
    figure.appendChild(element("figcaption", "run " + map[0] + " · " + map[1] + " · " + map[2] + " tokens"));
    return figure;
  }

  // What each statistic of the examples list means, as the list's heading says it.
  var STATISTICS = {
    to_cls: "attends most to [CLS]",
    to_sep: "attends most to [SEP]",
    to_punct: "attends most to punctuation",
    to_self: "attends most to the token itself (diagonal)",
    cosine: "changed most by fine-tuning (lowest cosine)",
    flip: "predictions that change when this head alone is disabled",
    induction: "induction probes with the highest induction score",
    retrieval: "needle probes with the highest retrieval score (the answer in the label)"
  };
  var FLIPS = { "1": "fixed", "-1": "broken", "0": "changed" };

  // A head's map of one example with the tokens on both axes ([CLS] red, [SEP] blue,
  // punctuation green), from the embedded bytes (templates/token_map.js draws it).
  function tokenMap(key, bytes) {
    var canvas = element("canvas", null, "token-map");
    var example = data.tokenMaps.examples[key];
    // example[2]: a decoder's example, whose map is a triangle (the cells above it hatched).
    window.attnwhTokenMap.draw(canvas, window.attnwhTokenMap.decode(bytes), 0, example[0], example[1], 560, 16, example[2]);
    return canvas;
  }

  // The examples behind the head's numbers: per run and statistic its top examples with their
  // text, and the predictions its disabling flips; the first of each list opens its map.
  function examples(layer, head) {
    var rows = data.examples[layer + "-" + head] || [];
    var box = element("div", null, "examples");
    if (!rows.length) return null;
    var lists = {};
    rows.forEach(function (row) {
      var key = row[0] + SEP + row[1];
      (lists[key] = lists[key] || []).push(row);
    });
    Object.keys(lists).forEach(function (key) {
      var items = lists[key], run = items[0][0], statistic = items[0][1];
      var heading = (data.runs[run] || ["run " + run])[0] + ": " + (STATISTICS[statistic] || statistic);
      box.appendChild(element("h4", heading));
      var list = box.appendChild(element("ol", null, "example-list"));
      list.setAttribute("data-statistic", statistic);
      items.forEach(function (row) {
        var li = list.appendChild(element("li"));
        li.setAttribute("data-example", row[4]);
        var value = statistic === "flip" ? FLIPS[String(row[3])] : row[3].toFixed(3);
        li.appendChild(element("span", value, "value"));
        li.appendChild(element("span", " " + data.strings[row[5]], "text"));
        var gold = row[6] === null ? "" : "gold " + data.strings[row[6]];
        if (row[7] !== null) gold += " · now " + data.strings[row[7]];
        if (gold) li.appendChild(element("span", " (" + gold + ")", "detail"));
        var mapKey = run + "-" + row[4] + "-" + layer + "-" + head;
        var bytes = data.tokenMaps.maps[mapKey];
        if (bytes) {
          var button = li.appendChild(element("button", "token map", "open-map"));
          button.type = "button";
          button.addEventListener("click", function () {
            var open = li.querySelector("canvas.token-map");
            if (open) { open.remove(); return; }
            li.appendChild(tokenMap(run + "-" + row[4], bytes));
          });
        }
      });
    });
    var notes = data.tokenMaps.notes || [];
    var caption = "Token maps: this head's attention weights for the example, recomputed with the run's model when " +
      "the report was built; `attnwh show --run R --example E` draws every head and lens. Queries head_examples and " +
      "ablation_flips list more.";
    if (notes.length) caption += " Not embedded: " + notes.join("; ");
    box.appendChild(element("p", caption, "caption"));
    return box;
  }

  // One table per section: a row per (subject, measure), a column per run.
  function table(section, rows) {
    var runs = [], keys = [], values = {};
    rows.forEach(function (row) {
      var run = row[col.run_id];
      var key = data.strings[row[col.subject]] + SEP + data.strings[row[col.measure]];
      if (runs.indexOf(run) < 0) runs.push(run);
      if (keys.indexOf(key) < 0) keys.push(key);
      values[key + SEP + run] = row;
    });
    var t = element("table");
    t.setAttribute("data-section", section);
    var head = element("tr");
    head.appendChild(element("th", ""));
    runs.forEach(function (run) {
      var th = element("th");
      (data.runs[run] || ["run " + run]).forEach(function (line) { th.appendChild(element("span", line, "line")); });
      head.appendChild(th);
    });
    t.appendChild(element("thead")).appendChild(head);
    var tbody = t.appendChild(element("tbody"));
    keys.forEach(function (key) {
      var parts = key.split(SEP), tr = element("tr");
      tr.appendChild(element("th", parts[0] ? parts[0] + " · " + parts[1] : parts[1]));
      runs.forEach(function (run) {
        var row = values[key + SEP + run];
        var td = row ? cell(row) : element("td", "");
        if (row) {
          td.setAttribute("data-run", String(run));
          td.setAttribute("data-subject", parts[0]);
          td.setAttribute("data-measure", parts[1]);
        }
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    var wrap = element("div", null, "table-wrap");
    wrap.appendChild(t);
    return wrap;
  }

  function show(layer, head) {
    selected = [layer, head];
    selectable.forEach(setSignals);
    var rows = data.rows.filter(function (row) { return row[col.layer] === layer && row[col.head] === head; });
    document.getElementById("head-panel-title").textContent = "Layer " + layer + ", head " + head;
    aside.setAttribute("data-layer", String(layer));
    aside.setAttribute("data-head", String(head));
    body.textContent = "";
    body.appendChild(
      element(
        "p",
        "Numbered from 0. Everything the warehouse holds for this head, a column per run; each heading leads to " +
          "its section. `attnwh query head_profile -p layer=" + layer + " -p head=" + head + "` gives the same rows.",
        "caption"
      )
    );
    var runs = {};
    rows.forEach(function (row) { runs[data.strings[row[col.section]] + SEP + row[col.run_id]] = true; });
    var widest = 0;
    Object.keys(data.sections).forEach(function (section) {
      var n = Object.keys(runs).filter(function (key) { return key.split(SEP)[0] === section; }).length;
      widest = Math.max(widest, n);
    });
    aside.classList.toggle("wide", widest > 4);
    Object.keys(data.sections).forEach(function (section) {
      var mine = rows.filter(function (row) { return data.strings[row[col.section]] === section; });
      var maps = section === "pattern-types" ? data.thumbnails[layer + "-" + head] || [] : [];
      if (!mine.length && !maps.length) return;
      var link = body.appendChild(element("h3")).appendChild(element("a", data.sections[section]));
      link.href = "#section-" + section;
      if (mine.length) body.appendChild(table(section, mine));
      if (maps.length) {
        var gallery = body.appendChild(element("div", null, "thumbs"));
        maps.forEach(function (map) { gallery.appendChild(thumbnail(map)); });
      }
    });
    var listed = examples(layer, head);
    if (listed) {
      body.appendChild(element("h3", "Examples"));
      body.appendChild(listed);
    }
    if (!rows.length && !listed) body.appendChild(element("p", "The warehouse holds nothing for this head.", "note"));
    aside.hidden = false;
    // The address names the head, so it can be linked to; replaceState does not scroll.
    if (window.history && history.replaceState) history.replaceState(null, "", "#head-" + layer + "-" + head);
  }

  panel.select = show;
  closer.addEventListener("click", function () {
    aside.hidden = true;
    selected = null;
    selectable.forEach(setSignals);
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && !aside.hidden) closer.click();
  });
  // #head-3-7 in the address opens the page with that head selected.
  function fromAddress() {
    var match = /^#head-(\d+)-(\d+)$/.exec(location.hash);
    if (match) show(Number(match[1]), Number(match[2]));
  }
  window.addEventListener("hashchange", fromAddress);
  fromAddress();
})();

// Payloads the report packs (gzip, then base64: report_cells.pack) sit in
// <script type="application/x-study-packed"> elements; unpack resolves to their bytes.
function studyUnpack(el) {
  var bin = atob(el.textContent.trim());
  var bytes = new Uint8Array(bin.length);
  for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).arrayBuffer();
}

// Embeds every chart whose packed spec sits in a script element with data-chart, into each
// div that names that spec (data-spec): a figure shown on the first screen and in its own
// section is stored once.
(function () {
  var optsEl = document.getElementById("embed-options");
  var opts = optsEl ? JSON.parse(optsEl.textContent) : {};
  var specs = document.querySelectorAll('script[type="application/x-study-packed"][data-chart]');
  for (var i = 0; i < specs.length; i++) {
    (function (el) {
      var targets = document.querySelectorAll('div.chart[data-spec="' + el.getAttribute("data-chart") + '"]');
      if (!targets.length) return;
      if (typeof window.vegaEmbed !== "function") {
        for (var j = 0; j < targets.length; j++) {
          targets[j].textContent = "Charts need the inlined vega-embed script, which did not load.";
        }
        return;
      }
      studyUnpack(el).then(function (buffer) {
        var text = new TextDecoder().decode(buffer);
        for (var j = 0; j < targets.length; j++) {
          (function (target) {
            window.vegaEmbed(target, JSON.parse(text), opts).catch(function (err) {
              target.textContent = "This chart failed to render: " + err;
            });
          })(targets[j]);
        }
      }).catch(function (err) {
        for (var j = 0; j < targets.length; j++) {
          targets[j].textContent = "This chart's data could not be unpacked: " + err;
        }
      });
    })(specs[i]);
  }
})();

// Downloads whose file is packed in the page: the link gets the unpacked file as a blob.
(function () {
  var links = document.querySelectorAll("a.download[data-packed]");
  for (var i = 0; i < links.length; i++) {
    (function (link) {
      var el = document.getElementById(link.getAttribute("data-packed"));
      if (!el) return;
      studyUnpack(el).then(function (buffer) {
        var type = (el.getAttribute("data-mime") || "text/plain") + ";charset=utf-8";
        link.href = URL.createObjectURL(new Blob([buffer], {type: type}));
      });
    })(links[i]);
  }
})();

// Click a column header of a table.sortable to sort by it (numbers by value).
function studySortables() {
  var tables = document.querySelectorAll("table.sortable");
  for (var t = 0; t < tables.length; t++) {
    (function (table) {
      var heads = table.querySelectorAll("thead th");
      for (var c = 0; c < heads.length; c++) {
        (function (th, col) {
          th.addEventListener("click", function () {
            var asc = th.getAttribute("aria-sort") !== "ascending";
            for (var h = 0; h < heads.length; h++) heads[h].removeAttribute("aria-sort");
            th.setAttribute("aria-sort", asc ? "ascending" : "descending");
            var body = table.tBodies[0];
            var rows = Array.prototype.slice.call(body.rows);
            rows.sort(function (a, b) {
              var x = a.cells[col].getAttribute("data-v") || "";
              var y = b.cells[col].getAttribute("data-v") || "";
              var nx = parseFloat(x), ny = parseFloat(y);
              if (x === "" || y === "") return (x === "") - (y === "");  // blanks last
              var cmp = !isNaN(nx) && !isNaN(ny) ? nx - ny : x.localeCompare(y);
              return asc ? cmp : -cmp;
            });
            for (var r = 0; r < rows.length; r++) body.appendChild(rows[r]);
          });
        })(heads[c], c);
      }
    })(tables[t]);
  }
}

// Filters of a table: the controls in div.table-filters[data-table="<table id>"], hidden in
// the page and shown here, so that without JavaScript every row stays listed. Unsupported rows
// are hidden until "show unsupported" is ticked; each select keeps the rows whose
// data-<column> equals its value; the text box keeps rows whose text contains it.
function studyFilters() {
  var boxes = document.querySelectorAll("div.table-filters[data-table]");
  for (var b = 0; b < boxes.length; b++) {
    (function (box) {
      var table = document.getElementById(box.getAttribute("data-table"));
      if (!table || !table.tBodies.length) return;
      var body = table.tBodies[0];
      var unsupported = box.querySelector("input[data-filter-unsupported]");
      var selects = box.querySelectorAll("select[data-filter]");
      var text = box.querySelector("input[data-filter-text]");
      var count = box.querySelector(".filter-count");
      function apply() {
        var rows = body.rows, shown = 0, hiddenUnsupported = 0;
        var needle = text ? text.value.trim().toLowerCase() : "";
        for (var r = 0; r < rows.length; r++) {
          var row = rows[r], visible = true;
          for (var s = 0; s < selects.length && visible; s++) {
            var want = selects[s].value;
            var column = selects[s].getAttribute("data-filter");
            if (want !== "" && row.getAttribute("data-" + column) !== want) visible = false;
          }
          if (visible && needle && row.textContent.toLowerCase().indexOf(needle) < 0) {
            visible = false;
          }
          if (visible && unsupported && !unsupported.checked &&
              row.getAttribute("data-status") === "unsupported") {
            visible = false;
            hiddenUnsupported++;
          }
          row.hidden = !visible;
          if (visible) shown++;
        }
        if (count) {
          count.textContent = "showing " + shown + " of " + rows.length + " rows" +
            (hiddenUnsupported ? " (" + hiddenUnsupported + " unsupported hidden)" : "");
        }
      }
      for (var s = 0; s < selects.length; s++) {
        selects[s].addEventListener("change", function (event) {
          // Asking for the unsupported rows by status shows them.
          var select = event.target;
          if (unsupported && select.getAttribute("data-filter") === "status" &&
              select.value === "unsupported") {
            unsupported.checked = true;
          }
          apply();
        });
      }
      if (unsupported) unsupported.addEventListener("change", apply);
      if (text) text.addEventListener("input", apply);
      box.hidden = false;
      apply();
    })(boxes[b]);
  }
}

// Tables whose rows are packed in the page (the sweep table: thousands of rows) are built
// here: each row a <tr class="row-<status>" data-<filter>=…> of cells (text, sort key, a
// long message as a <details>), as the template would have written them.
function studyFillPacked() {
  var bodies = document.querySelectorAll("tbody[data-packed-rows]");
  var jobs = [];
  for (var i = 0; i < bodies.length; i++) {
    (function (body) {
      var el = document.getElementById(body.getAttribute("data-packed-rows"));
      if (!el) return;
      jobs.push(studyUnpack(el).then(function (buffer) {
        var rows = JSON.parse(new TextDecoder().decode(buffer));
        var fragment = document.createDocumentFragment();
        for (var r = 0; r < rows.length; r++) {
          var row = rows[r], tr = document.createElement("tr");
          tr.className = "row-" + row.s;
          for (var key in row.f) tr.setAttribute("data-" + key, row.f[key]);
          for (var c = 0; c < row.c.length; c++) {
            var cell = row.c[c], td = document.createElement("td");
            td.setAttribute("data-v", cell.k);
            if (cell.kind === "status") {
              td.className = "status-cell";
              var badge = document.createElement("span");
              badge.className = "status status-" + cell.t;
              badge.textContent = cell.t;
              td.appendChild(badge);
            } else if (cell.kind === "long") {
              td.className = "err";
              if (cell.full === null) {
                td.textContent = cell.t;
              } else {
                var details = document.createElement("details");
                var summary = document.createElement("summary");
                var pre = document.createElement("pre");
                summary.textContent = cell.t;
                pre.textContent = cell.full;
                details.appendChild(summary);
                details.appendChild(pre);
                td.appendChild(details);
              }
            } else {
              if (cell.num) td.className = "num";
              td.textContent = cell.t;
            }
            tr.appendChild(td);
          }
          fragment.appendChild(tr);
        }
        body.appendChild(fragment);
      }));
    })(bodies[i]);
  }
  return Promise.all(jobs);
}

studyFillPacked().then(function () {
  studySortables();
  studyFilters();
}, function (err) {
  var bodies = document.querySelectorAll("tbody[data-packed-rows]");
  for (var i = 0; i < bodies.length; i++) {
    bodies[i].textContent = "This table's rows could not be unpacked: " + err;
  }
  studySortables();
  studyFilters();
});

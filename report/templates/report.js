// Embeds every chart whose spec sits in a <script type="application/json" data-chart>
// element, into each div that names that spec (data-spec): a figure shown on the first
// screen and in its own section is stored once.
(function () {
  var optsEl = document.getElementById("embed-options");
  var opts = optsEl ? JSON.parse(optsEl.textContent) : {};
  var specs = document.querySelectorAll('script[type="application/json"][data-chart]');
  for (var i = 0; i < specs.length; i++) {
    var el = specs[i];
    var targets = document.querySelectorAll('div.chart[data-spec="' + el.getAttribute("data-chart") + '"]');
    if (!targets.length) continue;
    var spec = JSON.parse(el.textContent);
    for (var j = 0; j < targets.length; j++) {
      var target = targets[j];
      if (typeof window.vegaEmbed !== "function") {
        target.textContent = "Charts need the inlined vega-embed script, which did not load.";
        continue;
      }
      (function (target, spec) {
        window.vegaEmbed(target, spec, opts).catch(function (err) {
          target.textContent = "This chart failed to render: " + err;
        });
      })(target, JSON.parse(JSON.stringify(spec)));
    }
  }
})();

// Click a column header of a table.sortable to sort by it (numbers by value).
(function () {
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
})();

// Filters of a table: the controls in div.table-filters[data-table="<table id>"], hidden in
// the page and shown here, so that without JavaScript every row stays listed. Unsupported rows
// are hidden until "show unsupported" is ticked; each select keeps the rows whose
// data-<column> equals its value; the text box keeps rows whose text contains it.
(function () {
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
})();

// Embeds every chart whose spec sits in a <script type="application/json" data-chart> element.
(function () {
  var optsEl = document.getElementById("embed-options");
  var opts = optsEl ? JSON.parse(optsEl.textContent) : {};
  var specs = document.querySelectorAll('script[type="application/json"][data-chart]');
  for (var i = 0; i < specs.length; i++) {
    var el = specs[i];
    var target = document.getElementById(el.getAttribute("data-chart"));
    if (!target) continue;
    if (typeof window.vegaEmbed !== "function") {
      target.textContent = "Charts need the inlined vega-embed script, which did not load.";
      continue;
    }
    (function (target, spec) {
      window.vegaEmbed(target, spec, opts).catch(function (err) {
        target.textContent = "This chart failed to render: " + err;
      });
    })(target, JSON.parse(el.textContent));
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

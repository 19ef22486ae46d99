// Sortable tables: a click on a header sorts by that column (numbers by
// their data-value), a second click reverses. The start time is shown in
// the reader's own time zone.
(function () {
  "use strict";
  function value(cell) {
    var number = cell.getAttribute("data-value");
    return number === null ? cell.textContent.toLowerCase() : parseFloat(number);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (header, column) {
      header.addEventListener("click", function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var descending = header.getAttribute("data-order") !== "desc";
        table.querySelectorAll("th").forEach(function (other) {
          other.removeAttribute("data-order");
        });
        header.setAttribute("data-order", descending ? "desc" : "asc");
        rows.sort(function (a, b) {
          var x = value(a.cells[column]), y = value(b.cells[column]);
          var order = x < y ? -1 : x > y ? 1 : 0;
          return descending ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
  document.querySelectorAll("[data-epoch-ms]").forEach(function (element) {
    var ms = parseFloat(element.getAttribute("data-epoch-ms"));
    element.textContent = new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  });
})();

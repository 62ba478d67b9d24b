// ivypy report: records every uncaught error and unhandled rejection into the page, so that a
// reader (and the tests' headless browser) sees them: the root element's data-script-errors
// attribute counts them, the list #script-errors shows them.
(function () {
  "use strict";
  var seen = [];
  function show() {
    var list = document.getElementById("script-errors");
    if (!list) { return; }
    while (seen.length) {
      var li = document.createElement("li");
      li.textContent = seen.shift();
      list.appendChild(li);
    }
  }
  function record(text) {
    var root = document.documentElement;
    root.setAttribute("data-script-errors",
      String(Number(root.getAttribute("data-script-errors") || "0") + 1));
    seen.push(text);
    show();
  }
  window.addEventListener("error", function (e) {
    record("error: " + e.message + " at " + (e.filename || "page") + ":" + e.lineno);
  });
  window.addEventListener("unhandledrejection", function (e) {
    record("unhandled rejection: " + String(e.reason));
  });
  document.addEventListener("DOMContentLoaded", show);
})();

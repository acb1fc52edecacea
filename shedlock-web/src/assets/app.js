// shedlock dashboard: refreshes the page's content every few seconds (body[data-refresh],
// 0: never) without reloading, while the page is visible and nothing is being typed.
(function () {
  "use strict";
  var every = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  // A message shown after an action stays until the next navigation.
  var flash = document.getElementById("flash");
  if (flash && window.history && window.history.replaceState) {
    var url = new URL(window.location.href);
    url.searchParams.delete("flash");
    url.searchParams.delete("failed");
    window.history.replaceState(null, "", url.toString());
  }
  // A form that changes much asks first (data-confirm), also after a refresh.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  }, true);
  if (!every || every < 1) return;
  var busy = false;
  function typing() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA");
  }
  function refresh() {
    if (busy || document.visibilityState !== "visible" || typing()) return;
    busy = true;
    fetch(window.location.href, { headers: { "X-Shedlock-Refresh": "1" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (!text || typing()) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("content");
        var content = document.getElementById("content");
        if (!fresh || !content) return;
        var shown = document.getElementById("flash");
        content.innerHTML = fresh.innerHTML;
        if (shown && !document.getElementById("flash")) {
          var h1 = content.querySelector("h1");
          if (h1) h1.insertAdjacentElement("afterend", shown);
        }
        document.body.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, every * 1000);
})();

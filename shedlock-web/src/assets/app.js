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
  // A file chosen for a form's text (input[type=file][data-into=ID], the calendar's .ics
  // import) is read into that text area: the form sends text, not a file.
  document.addEventListener("change", function (event) {
    var input = event.target;
    var into = input && input.getAttribute && input.getAttribute("data-into");
    var area = into && document.getElementById(into);
    if (!area || !input.files || !input.files[0]) return;
    var reader = new FileReader();
    reader.onload = function () { area.value = String(reader.result || ""); };
    reader.readAsText(input.files[0]);
  }, true);
  if (!every || every < 1) return;
  var busy = false;
  // Something typed or chosen that a refresh would throw away: a field whose value is not the
  // page's own.
  // A select none of whose options the page marks selected shows its first one (a single
  // select): that is its own value too.
  function chosen(f) {
    var options = Array.prototype.slice.call(f.options);
    var marked = options.some(function (o) { return o.defaultSelected; });
    return options.some(function (o, i) {
      return o.selected !== (marked ? o.defaultSelected : (!f.multiple && i === 0));
    });
  }
  function edited() {
    var fields = document.querySelectorAll("#content input, #content textarea, #content select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "hidden" || f.type === "submit") continue;
      // A box's value is "on" whatever it shows: what it shows is `checked`.
      var box = f.type === "checkbox" || f.type === "radio";
      if (f.type === "file" ? f.files && f.files.length : f.tagName === "SELECT"
          ? chosen(f)
          : box ? f.checked !== f.defaultChecked
          : f.value !== f.defaultValue) return true;
    }
    return false;
  }
  function typing() {
    var el = document.activeElement;
    return (el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA")) || edited();
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

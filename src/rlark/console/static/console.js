/* RLark console: the little that needs JavaScript (htmx does the rest).
 *  - forms with data-confirm ask before they submit (delete names the Job);
 *  - a YAML file chosen on the Create page fills the YAML text box;
 *  - the Logs tab follows new lines over Server-Sent Events (the REST API's log stream),
 *    marking error lines as the server does;
 *  - the project switcher goes to the chosen project as soon as one is chosen;
 *  - a newly made API token is selected when its box gets focus, ready to copy;
 *  - a polling element with data-poll-hold (a CSS selector) skips its refresh while something
 *    matches it (a menu being used), in place of an htmx trigger filter: those are eval'd,
 *    which the Content-Security-Policy forbids.
 */
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var message = form && form.getAttribute && form.getAttribute("data-confirm");
    if (message && !window.confirm(message)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  document.addEventListener("change", function (event) {
    var select = event.target;
    if (select && select.hasAttribute && select.hasAttribute("data-autosubmit") && select.form) {
      select.form.submit();
    }
  });

  document.addEventListener("focusin", function (event) {
    var box = event.target;
    if (box && box.hasAttribute && box.hasAttribute("data-select-all")) box.select();
  });

  document.addEventListener("change", function (event) {
    var input = event.target;
    var targetId = input && input.getAttribute && input.getAttribute("data-fill");
    if (!targetId || !input.files || !input.files.length) return;
    var target = document.getElementById(targetId);
    if (!target) return;
    var reader = new FileReader();
    reader.onload = function () { target.value = String(reader.result || ""); };
    reader.readAsText(input.files[0]);
  });

  // the lines the Logs tab marks as errors (logview.ERROR_LINE on the server)
  var ERROR_LINE = /Traceback \(most recent call last\)|\b(?:ERROR|FATAL|CRITICAL)\b|^\s*[\w.]*(?:Error|Exception)\b(?::|$)|exited with code [1-9]/;

  function setupFollow() {
    var button = document.getElementById("log-follow");
    var pre = document.getElementById("log-lines");
    var status = document.getElementById("log-status");
    if (!button || !pre || button.getAttribute("data-ready")) return;
    button.setAttribute("data-ready", "1");
    pre.scrollTop = pre.scrollHeight; // logs are read from their end
    var source = null;
    var query = (button.getAttribute("data-q") || "").toLowerCase();
    var prefix = button.getAttribute("data-prefix") === "true";

    function say(text) { if (status) status.textContent = text || ""; }

    function stop(text) {
      if (source) { source.close(); source = null; }
      button.setAttribute("aria-pressed", "false");
      button.textContent = button.getAttribute("data-label-start");
      say(text);
    }

    function append(worker, line) {
      if (query && line.toLowerCase().indexOf(query) < 0) return;
      var span = document.createElement("span");
      span.className = "ln" + (line.indexOf("RLARK_EVENT ") === 0 ? " ln-event"
        : (ERROR_LINE.test(line) ? " ln-err" : ""));
      span.setAttribute("data-worker", worker);
      if (prefix) {
        var w = document.createElement("span");
        w.className = "ln-w";
        w.textContent = "[" + worker + "]";
        span.appendChild(w);
        span.appendChild(document.createTextNode(" "));
      }
      span.appendChild(document.createTextNode(line.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "") + "\n"));
      var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.appendChild(span);
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }

    button.addEventListener("click", function () {
      if (source) { stop(""); return; }
      var empty = document.getElementById("log-empty");
      if (empty) empty.remove();
      pre.hidden = false;
      var first = true;
      source = new EventSource(button.getAttribute("data-url"));
      button.setAttribute("aria-pressed", "true");
      button.textContent = button.getAttribute("data-label-stop");
      say(button.getAttribute("data-status-following"));
      source.addEventListener("workers", function () {
        if (first) { pre.textContent = ""; first = false; } // the stream repeats the tail
      });
      source.addEventListener("line", function (e) {
        var item = JSON.parse(e.data);
        append(item.worker, item.line);
      });
      source.addEventListener("end", function () {
        stop(button.getAttribute("data-status-ended"));
      });
      source.onerror = function () {
        stop(button.getAttribute("data-status-error"));
      };
    });
  }

  // a failed live update says so (instead of a page that silently stops changing)
  function connectionNotice(key) {
    var text = document.body.getAttribute(key);
    var box = document.getElementById("conn-notice");
    if (!box) {
      box = document.createElement("div");
      box.id = "conn-notice";
      box.className = "notice notice-error";
      box.setAttribute("role", "alert");
      var main = document.getElementById("main");
      if (main) main.insertBefore(box, main.firstChild);
    }
    box.textContent = text;
  }
  document.addEventListener("htmx:sendError", function () { connectionNotice("data-msg-offline"); });
  document.addEventListener("htmx:responseError", function () { connectionNotice("data-msg-server"); });
  document.addEventListener("htmx:afterRequest", function (e) {
    var box = document.getElementById("conn-notice");
    if (box && e.detail && e.detail.successful) box.remove();
  });

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    var hold = elt && elt.getAttribute && elt.getAttribute("data-poll-hold");
    if (hold && document.querySelector(hold)) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", setupFollow);
  document.addEventListener("htmx:afterSettle", setupFollow);
})();

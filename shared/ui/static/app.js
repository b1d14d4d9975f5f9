// ForgeCI dashboard: live-follows a job's log (ANSI colours rendered as
// spans whose text is set with textContent, never parsed as HTML) and
// refreshes a running run's page.
(function () {
  "use strict";
  var TERMINAL = { PASSED: 1, FAILED: 1, CANCELED: 1, ABORTED: 1, SKIPPED: 1 };

  function appendAnsi(pre, state, text) {
    var parts = text.split(/\x1b\[([0-9;]*)m/);
    for (var i = 0; i < parts.length; i++) {
      if (i % 2 === 1) {
        parts[i].split(";").forEach(function (c) {
          var n = parseInt(c || "0", 10);
          if (n === 0) { state.fg = null; state.bold = false; }
          else if (n === 1) state.bold = true;
          else if (n === 22) state.bold = false;
          else if (n === 39) state.fg = null;
          else if (n >= 30 && n <= 37) state.fg = n;
          else if (n >= 90 && n <= 97) state.fg = n - 60;
        });
        continue;
      }
      if (!parts[i]) continue;
      var span = document.createElement("span");
      var cls = [];
      if (state.fg) cls.push("ansi-" + state.fg);
      if (state.bold) cls.push("ansi-bold");
      span.className = cls.join(" ");
      span.textContent = parts[i].replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "");
      pre.appendChild(span);
    }
  }

  function followLog(pre) {
    var offset = 0, state = {}, decoder = new TextDecoder();
    var gen = pre.getAttribute("data-generation") || "0";
    var badge = document.getElementById("job-state");
    function poll() {
      fetch(pre.getAttribute("data-url") + "?offset=" + offset + "&generation=" + gen, { credentials: "same-origin" })
        .then(function (r) {
          if (!r.ok) throw new Error("log: " + r.status);
          var next = parseInt(r.headers.get("X-Next-Offset") || "0", 10);
          var jobState = r.headers.get("X-Job-State") || "";
          return r.arrayBuffer().then(function (b) { return { next: next, jobState: jobState, bytes: b }; });
        })
        .then(function (res) {
          // Offsets count stored bytes; the text is masked, so its length
          // differs and may even be empty while the offset moves on.
          var moved = res.next > offset;
          if (res.bytes.byteLength > 0) {
            appendAnsi(pre, state, decoder.decode(res.bytes, { stream: true }));
          }
          if (moved) offset = res.next;
          if (badge && res.jobState && badge.textContent !== res.jobState) {
            badge.textContent = res.jobState;
            badge.className = "state " + res.jobState;
          }
          if (TERMINAL[res.jobState] && !moved && gen === "0") return;
          if (gen !== "0" && !moved) return;
          setTimeout(poll, moved ? 150 : 700);
        })
        .catch(function () { setTimeout(poll, 2000); });
    }
    poll();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var pre = document.getElementById("log");
    if (pre) followLog(pre);
    var run = document.getElementById("run-state");
    if (run && run.getAttribute("data-terminal") === "false") setTimeout(function () { location.reload(); }, 2000);
  });
})();

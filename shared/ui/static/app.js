// ForgeCI dashboard: live-follows a job's log in step sections (ANSI
// colours rendered as spans whose text is set with textContent, never
// parsed as HTML), folds ::group:: lines, shows the lines' times on
// demand, finds text, and refreshes a running run's page.
(function () {
  "use strict";
  var TERMINAL = { PASSED: 1, FAILED: 1, CANCELED: 1, ABORTED: 1, SKIPPED: 1 };
  var NL = 10;

  function appendAnsi(el, state, text) {
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
      el.appendChild(span);
    }
  }

  function pad(n, w) { n = String(n); while (n.length < w) n = "0" + n; return n; }
  function clock(ms) {
    var d = new Date(ms);
    return pad(d.getUTCHours(), 2) + ":" + pad(d.getUTCMinutes(), 2) + ":" + pad(d.getUTCSeconds(), 2) + "." + pad(d.getUTCMilliseconds(), 3);
  }
  function duration(s) {
    if (s < 60) return s.toFixed(1) + "s";
    return Math.floor(s / 60) + "m " + Math.round(s % 60) + "s";
  }

  // A section of the log: [start, next section's start), a <details>
  // whose body holds its lines, with a stack of open ::group:: folds.
  function Section(view, start, title) {
    this.start = start;
    this.el = document.createElement("details");
    this.el.className = "section";
    this.summary = document.createElement("summary");
    this.summary.textContent = title;
    this.el.appendChild(this.summary);
    this.body = document.createElement("div");
    this.el.appendChild(this.body);
    this.groups = [this.body];
    this.el.open = true;
    this.ended = false;
    view.root.appendChild(this.el);
    view.sections.push(this);
  }

  Section.prototype.line = function (view, bytes, offset) {
    var text = view.decoder.decode(bytes);
    var m = /^::group::(.*)/.exec(text);
    if (m && this.groups.length < 16) {
      var g = document.createElement("details");
      g.className = "group";
      var s = document.createElement("summary");
      s.textContent = m[1].replace(/\r?\n$/, "") || "group";
      g.appendChild(s);
      this.groups[this.groups.length - 1].appendChild(g);
      this.groups.push(g);
      return;
    }
    if (/^::endgroup::/.test(text)) {
      if (this.groups.length > 1) this.groups.pop();
      return;
    }
    var el = document.createElement("span");
    el.className = "line";
    var ms = view.timeAt(offset);
    if (ms) el.setAttribute("data-ts", clock(ms));
    appendAnsi(el, view.ansi, text);
    this.groups[this.groups.length - 1].appendChild(el);
    if (view.query && el.textContent.toLowerCase().indexOf(view.query) >= 0) view.hit(el);
  };

  function LogView(root) {
    this.root = root;
    this.base = root.getAttribute("data-url");
    this.stepsURL = root.getAttribute("data-steps");
    this.gen = root.getAttribute("data-generation") || "0";
    this.decoder = new TextDecoder();
    this.ansi = {};
    this.offset = 0;        // stored bytes shown so far
    this.partial = null;    // bytes of the line not ended yet
    this.partialAt = 0;     // its stored offset
    this.times = [];        // [offset, ms], rising
    this.timesTo = 0;
    this.sections = [];
    this.steps = {};
    this.query = "";
    this.hits = 0;
    this.badge = document.getElementById("job-state");
  }

  // timeAt is the time of the last mark at or before offset.
  LogView.prototype.timeAt = function (offset) {
    var lo = 0, hi = this.times.length - 1, ms = 0;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (this.times[mid][0] <= offset) { ms = this.times[mid][1]; lo = mid + 1; } else hi = mid - 1;
    }
    return ms;
  };

  // sectionAt is the section the byte at offset is in: the last that
  // starts at or before it.
  LogView.prototype.sectionAt = function (offset) {
    for (var i = this.sections.length - 1; i >= 0; i--) if (this.sections[i].start <= offset) return this.sections[i];
    return this.sections[0];
  };

  // update makes and titles the sections of the steps the index lists.
  LogView.prototype.update = function (idx) {
    var view = this;
    if (this.sections.length === 0) {
      var first = idx.steps.length ? idx.steps[0].log_offset : Infinity;
      if (first > 0) this.setup = new Section(this, 0, "Log");
    }
    idx.steps.forEach(function (st) {
      var s = view.steps[st.index];
      if (!s) {
        if (view.setup && view.sections.length === 1) {
          // The runner reports steps: what came before them is set-up.
          view.setup.summary.textContent = "Set up job";
          view.setup.el.open = false;
        }
        s = view.steps[st.index] = new Section(view, st.log_offset, st.name);
        s.el.id = "step-" + st.index;
      }
      var title = st.name + " ";
      if (st.conclusion) {
        title += st.conclusion === "skipped" ? "(skipped)" : duration(st.seconds);
        if (st.exit_code) title += " (exit " + st.exit_code + ")";
        if (!s.ended) {
          s.ended = true;
          s.el.setAttribute("data-conclusion", st.conclusion);
          s.el.open = st.conclusion === "failure";
        }
      } else {
        title += duration(st.seconds) + "…";
      }
      s.summary.textContent = title;
      s.end = st.end_offset;
    });
  };

  // nextBoundary is where the next known section starts after offset.
  LogView.prototype.nextBoundary = function (idx) {
    var b = Infinity, off = this.offset;
    idx.steps.forEach(function (st) { if (st.log_offset > off && st.log_offset < b) b = st.log_offset; });
    var last = idx.steps[idx.steps.length - 1];
    if (last && last.end_offset != null && last.end_offset > off && last.end_offset < b) b = last.end_offset;
    return b;
  };

  // take shows bytes, the stored bytes from this.offset, line by line.
  LogView.prototype.take = function (bytes, next, idx) {
    var last = idx.steps[idx.steps.length - 1];
    if (last && last.end_offset != null && this.offset >= last.end_offset && !this.complete) {
      this.flush();
      this.complete = new Section(this, last.end_offset, "Complete job");
    }
    var s = this.sectionAt(this.offset);
    if (this.partial && s !== this.partialIn) this.flush();
    this.partialIn = s;
    var i = 0;
    for (var j = 0; j < bytes.length; j++) {
      if (bytes[j] !== NL) continue;
      var line = bytes.subarray(i, j + 1), at = this.offset + i;
      if (this.partial) {
        var joined = new Uint8Array(this.partial.length + line.length);
        joined.set(this.partial); joined.set(line, this.partial.length);
        line = joined; at = this.partialAt; this.partial = null;
      }
      s.line(this, line, at);
      i = j + 1;
    }
    if (i < bytes.length) {
      var rest = bytes.slice(i);
      if (this.partial) {
        var p = new Uint8Array(this.partial.length + rest.length);
        p.set(this.partial); p.set(rest, this.partial.length); rest = p;
      } else this.partialAt = this.offset + i;
      this.partial = rest;
      // A line without end is shown in pieces, not copied for ever.
      if (rest.length > 65536) this.flush();
    }
    this.offset = next;
  };

  // flush shows the line not ended yet (a section or the log has ended).
  LogView.prototype.flush = function () {
    if (!this.partial) return;
    (this.partialIn || this.sections[this.sections.length - 1]).line(this, this.partial, this.partialAt);
    this.partial = null;
  };

  LogView.prototype.hit = function (el) {
    el.classList.add("hit");
    this.hits++;
    for (var p = el.parentNode; p && p !== this.root; p = p.parentNode) if (p.tagName === "DETAILS") p.open = true;
    var found = document.getElementById("log-found");
    if (found) found.textContent = this.hits + (this.hits === 1 ? " line" : " lines");
  };

  LogView.prototype.find = function (q) {
    var view = this, first = null;
    this.query = q.toLowerCase();
    this.hits = 0;
    [].forEach.call(this.root.querySelectorAll(".line.hit"), function (e) { e.classList.remove("hit"); });
    var found = document.getElementById("log-found");
    if (found) found.textContent = "";
    if (!this.query) return;
    [].forEach.call(this.root.querySelectorAll(".line"), function (e) {
      if (e.textContent.toLowerCase().indexOf(view.query) >= 0) { view.hit(e); first = first || e; }
    });
    if (found && this.hits === 0) found.textContent = "not found";
    if (first && first.scrollIntoView) first.scrollIntoView({ block: "center" });
  };

  LogView.prototype.fetchIndex = function () {
    var url = this.stepsURL + "?generation=" + this.gen + "&times=1&from=" + this.timesTo;
    return fetch(url, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error("steps: " + r.status);
      return r.json();
    });
  };

  LogView.prototype.setState = function (state) {
    if (this.badge && state && this.badge.textContent !== state) {
      this.badge.textContent = state;
      this.badge.className = "state " + state;
    }
  };

  // poll reads the index (steps, times, the stored end, the job's state)
  // and then the log from where it stands: up to the next section, and
  // no further than the lines whose times are known.
  LogView.prototype.poll = function () {
    var view = this, idx;
    this.fetchIndex().then(function (i) {
      idx = i;
      (idx.times || []).forEach(function (t) {
        var n = view.times.length;
        if (!n || t[0] > view.times[n - 1][0]) view.times.push(t);
      });
      view.timesTo = Math.max(view.timesTo, idx.times_to || idx.log_end);
      view.update(idx);
      view.setState(idx.job_state);
      var to = Math.min(view.nextBoundary(idx), idx.log_end, view.timesTo);
      if (to <= view.offset) return { next: view.offset, bytes: new ArrayBuffer(0) };
      return fetch(view.base + "?offset=" + view.offset + "&limit=" + Math.min(to - view.offset, 262144) + "&generation=" + view.gen,
        { credentials: "same-origin" }).then(function (r) {
        if (!r.ok) throw new Error("log: " + r.status);
        var next = parseInt(r.headers.get("X-Next-Offset") || "0", 10);
        view.setState(r.headers.get("X-Job-State"));
        return r.arrayBuffer().then(function (b) { return { next: next, bytes: b }; });
      });
    }).then(function (res) {
      // Offsets count stored bytes; the text is masked, so its length
      // may differ, and be empty while the offset moves on.
      var moved = res.next > view.offset;
      if (moved || res.bytes.byteLength) view.take(new Uint8Array(res.bytes), Math.max(res.next, view.offset), idx);
      var done = (TERMINAL[idx.job_state] || view.gen !== "0") && view.offset >= idx.log_end;
      if (done && !moved) {
        view.flush();
        view.root.setAttribute("data-complete", "true"); // all shown: the log will not grow
        return;
      }
      setTimeout(function () { view.poll(); }, moved ? 150 : 700);
    }).catch(function () { setTimeout(function () { view.poll(); }, 2000); });
  };

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("log");
    if (root) {
      var view = new LogView(root);
      view.poll();
      var times = document.getElementById("log-times");
      if (times) times.addEventListener("change", function () { root.classList.toggle("show-times", times.checked); });
      var find = document.getElementById("log-find");
      if (find) find.addEventListener("input", function () { view.find(find.value); });
    }
    var run = document.getElementById("run-state");
    if (run && run.getAttribute("data-terminal") === "false") setTimeout(function () { location.reload(); }, 2000);
  });
})();

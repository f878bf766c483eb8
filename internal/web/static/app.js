// Outpost UI: follows a session's transcript live over server-sent events,
// building steps, folded machine events and messages the way the server
// renders them (internal/web/transcript.go). Everything from the server is
// added as text (textContent, text nodes), never as HTML.
"use strict";
(function () {
  function plain(status, detail) {
    switch (status) {
      case "new": return "Waiting in the queue for a machine";
      case "claimed": return "Claimed by a machine, starting";
      case "running":
        if (detail === "waiting_for_user") return "Waiting for your message";
        if (detail === "waiting_for_machine") return "Waiting for its machine to reconnect";
        if (detail === "waiting_for_approval") return "Waiting for a person's approval";
        return "Running";
      case "suspended": return "Suspended";
      case "resuming": return "Resuming";
      case "exit":
        switch (detail) {
          case "finished": return "Finished";
          case "user_request": return "Terminated by a user";
          case "inactivity": return "Ended after waiting too long";
          case "usage_limit_exceeded": return "Ended: usage limit reached";
          case "outpost_deleted": return "Ended: its outpost was deleted";
        }
        return "Ended";
      case "error": return "Failed";
    }
    return status || "Unknown";
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function str(v) { return typeof v === "string" ? v : ""; }

  function pre(cls, text) { return el("pre", cls, text); }

  // diffBlock renders a unified diff, one line a span, as text only
  // (splitDiff in Go): the lines before a file's first hunk are its header.
  function diffBlock(diff) {
    var block = el("pre", "diff"), header = true;
    diff.replace(/\n$/, "").split("\n").forEach(function (line) {
      var cls = "";
      if (line.startsWith("diff ")) { cls = "meta"; header = true; }
      else if (line.startsWith("@@")) { cls = "hunk"; header = false; }
      else if (header) cls = "meta";
      else if (line.startsWith("+")) cls = "add";
      else if (line.startsWith("-")) cls = "del";
      block.appendChild(el("span", cls, line + "\n"));
    });
    return block;
  }

  function pretty(v) {
    if (v === undefined || v === null) return "";
    if (typeof v === "string") return v;
    try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
  }

  function size(n) {
    if (n >= 1048576) return (n / 1048576).toFixed(1) + " MiB";
    if (n >= 1024) return (n / 1024).toFixed(1) + " KiB";
    return n + " B";
  }

  // media returns a figure showing the image or video artifact a tool
  // result refers to (value.artifact, or upload_artifact's value), or null.
  var ARTIFACT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
  function media(ev) {
    var v = ev.value, ref = null;
    if (!v || typeof v !== "object") return null;
    if (shot(ev)) {
      // The computer tool's screenshot: a thumbnail of the image the
      // server decodes from the event, linked to full size.
      var src = "/ui/sessions/" + encodeURIComponent(ev.session_id) + "/events/" + Number(ev.seq) + "/image";
      var f = el("figure", "media shot"), link = el("a"), im = el("img");
      link.href = src;
      im.src = src;
      im.alt = "screenshot of call " + Number(ev.call_seq);
      im.loading = "lazy";
      link.appendChild(im);
      f.appendChild(link);
      return f;
    }
    if (v.artifact && typeof v.artifact === "object") ref = v.artifact;
    else if (ev.tool === "upload_artifact") ref = v;
    if (!ref || typeof ref.name !== "string" || !ARTIFACT_NAME.test(ref.name) || !ev.session_id) return null;
    var ct = String(ref.content_type || "").toLowerCase().split(";")[0].trim();
    var url = "/ui/sessions/" + encodeURIComponent(ev.session_id) + "/artifacts/" + ref.name;
    var fig = el("figure", "media");
    if (ct.startsWith("image/")) {
      var a = el("a");
      a.href = url;
      var img = el("img");
      img.src = url;
      img.alt = ref.name;
      img.loading = "lazy";
      a.appendChild(img);
      fig.appendChild(a);
    } else if (ct === "video/webm" || ct === "video/mp4" || ct === "video/ogg") {
      var video = el("video");
      video.src = url;
      video.controls = true;
      video.preload = "metadata";
      video.setAttribute("aria-label", ref.name);
      fig.appendChild(video);
    } else {
      return null;
    }
    return fig;
  }

  function time(ms) {
    var d = new Date(ms);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + ":" + two(d.getUTCSeconds());
  }

  // tookText says how long a call took: 340ms, 4.2s, 37s, 2m 5s, 1h 3m.
  function tookText(ms) {
    ms = Math.max(0, Math.floor(ms));
    if (ms < 1000) return ms + "ms";
    if (ms < 10000) return Math.floor(ms / 1000) + "." + Math.floor(ms % 1000 / 100) + "s";
    if (ms < 60000) return Math.floor(ms / 1000) + "s";
    if (ms < 3600000) return Math.floor(ms / 60000) + "m " + Math.floor(ms % 60000 / 1000) + "s";
    return Math.floor(ms / 3600000) + "h " + Math.floor(ms % 3600000 / 60000) + "m";
  }

  // oneLine cuts a target to its first line and 160 characters: [line, full or ""].
  function oneLine(s) {
    var line = s, i = line.indexOf("\n");
    if (i >= 0) line = line.slice(0, i).replace(/\r+$/, "") + " …";
    var chars = Array.from(line);
    if (chars.length > 160) line = chars.slice(0, 160).join("") + "…";
    return [line, line !== s ? s : ""];
  }

  // ---- the transcript

  var NOISE = { machine: 1, claim: 1, release: 1, remote_connected: 1, remote_disconnected: 1, status: 1 };
  var SLOTS = ["args", "content", "term", "err", "diff", "value", "media", "arts", "raw"];

  function isStepEvent(ev) {
    if (ev.type === "call" || ev.type === "result") return true;
    return (ev.type === "output" || ev.type === "artifact") && ev.call_seq > 0;
  }

  // place puts a block into a step's body in its slot's order.
  function place(body, node) {
    var k = SLOTS.indexOf(node.classList[0]);
    for (var c = body.firstElementChild; c; c = c.nextElementSibling) {
      if (SLOTS.indexOf(c.classList[0]) > k) { body.insertBefore(node, c); return node; }
    }
    body.appendChild(node);
    return node;
  }

  // shot says whether an event is a computer result with its image inline.
  function shot(ev) {
    var v = ev.value;
    return ev.type === "result" && ev.tool === "computer" && ev.session_id && ev.seq > 0 &&
      v && typeof v === "object" && v.image && typeof v.image.data === "string" && v.image.data !== "";
  }

  function rawBlock(ev, raw) {
    // The page holds a screenshot's base64 nowhere: the image shows from
    // its own URL.
    if (shot(ev)) {
      try {
        var copy = JSON.parse(raw);
        copy.value.image.data = "(the image, shown above)";
        raw = JSON.stringify(copy);
      } catch (e) { raw = ""; }
    }
    var p = el("pre", "raw-ev", raw);
    p.dataset.seq = String(ev.seq || 0);
    return p;
  }

  function rawDetails(label) {
    var d = el("details", "raw");
    d.appendChild(el("summary", "", label));
    return d;
  }

  // plan is a script session's planned calls by call number from 1
  // (label, tool, target), from the transcript's data-plan; [] otherwise.
  var plan = [];

  function newStep(call) {
    var li = el("li", "step s-running");
    li.id = "call-" + call;
    li.dataset.call = String(call);
    var d = el("details", "step");
    d.open = true;
    var sum = el("summary");
    sum.appendChild(el("span", "icon")).setAttribute("aria-hidden", "true");
    var p = plan[call - 1];
    var seq = sum.appendChild(el("span", "seq", p ? p.label : "#" + call));
    if (p) seq.title = "call #" + call;
    sum.appendChild(el("span", "tool", "call"));
    sum.appendChild(el("code", "what", ""));
    sum.appendChild(el("span", "took", ""));
    sum.appendChild(el("span", "res", "running"));
    d.appendChild(sum);
    var body = el("div", "body");
    body.appendChild(rawDetails("raw JSON"));
    d.appendChild(body);
    li.appendChild(d);
    return li;
  }

  function setState(li, state, status) {
    li.className = "step s-" + state;
    li.querySelector("summary .res").textContent = status;
  }

  function Transcript(list) {
    this.list = list;
    this.steps = {};
    // targets are what each call works on, by call number, as the server
    // sends them in "step" events just before the calls.
    this.targets = {};
    var self = this;
    list.querySelectorAll("li.step[data-call]").forEach(function (li) { self.steps[li.dataset.call] = li; });
  }

  Transcript.prototype.add = function (ev, raw) {
    if (isStepEvent(ev)) this.stepEvent(ev, raw);
    else if (NOISE[ev.type]) this.noiseEvent(ev, raw);
    else this.list.appendChild(loneEvent(ev, raw));
    if (ev.type === "end") this.end();
  };

  Transcript.prototype.stepEvent = function (ev, raw) {
    var li = this.steps[ev.call_seq];
    if (!li) {
      li = this.steps[ev.call_seq] = newStep(ev.call_seq);
      this.list.appendChild(li);
    }
    var body = li.querySelector(".body");
    if (ev.tool && li.querySelector("summary .tool").textContent === "call") li.querySelector("summary .tool").textContent = ev.tool;
    switch (ev.type) {
      case "call": this.call(li, body, ev); break;
      case "output": this.output(li, body, ev); break;
      case "result": this.result(li, body, ev); break;
      case "artifact":
        if (ev.artifact) {
          var arts = body.querySelector(":scope > ul.arts") || place(body, el("ul", "arts"));
          arts.appendChild(el("li", "", "artifact " + ev.artifact.name + " (" + size(ev.artifact.size) + ")"));
        }
        break;
    }
    body.querySelector(":scope > details.raw").appendChild(rawBlock(ev, raw));
  };

  Transcript.prototype.call = function (li, body, ev) {
    var a = ev.args, tool = String(ev.tool || "");
    li.querySelector("summary .tool").textContent = tool;
    var target = this.targets[ev.call_seq] || "";
    var t = oneLine(target), what = li.querySelector("summary .what");
    what.textContent = t[0];
    if (t[1]) what.title = t[1];
    li.dataset.start = String(ev.time_ms);
    li.querySelector("summary .took").title = "started " + time(ev.time_ms) + " UTC";
    if (a && typeof a === "object") {
      if (tool === "write_file") {
        if (str(a.content)) place(body, pre("content", a.content));
      } else if (tool === "apply_patch") {
        if (str(a.patch)) place(body, diffBlock(a.patch));
      } else if (tool !== "exec" && tool !== "edit_file" && Object.keys(a).length > 1) {
        place(body, pre("args", pretty(a)));
      }
    }
    if (tool === "exec") {
      var term = body.querySelector(":scope > pre.term") || place(body, el("pre", "term"));
      var cmd = target;
      if (cmd && !term.querySelector(".cmd")) term.insertBefore(el("span", "cmd", "$ " + cmd + "\n"), term.firstChild);
    }
  };

  Transcript.prototype.output = function (li, body, ev) {
    if (!li.terminal) {
      var term = body.querySelector(":scope > pre.term") || place(body, el("pre", "term"));
      li.terminal = window.OutpostTerminal.attach(term);
    }
    li.terminal.write(String(ev.text || ""), ev.stream === "stderr");
  };

  Transcript.prototype.result = function (li, body, ev) {
    var ok = ev.ok === true, state = ok ? "ok" : "failed", status = ok ? "ok" : "failed";
    if (typeof ev.exit_code === "number") {
      status = "exit " + ev.exit_code;
      if (ev.exit_code !== 0) state = "failed";
    }
    setState(li, state, status);
    var start = Number(li.dataset.start || 0);
    if (start > 0 && ev.time_ms >= start) li.querySelector("summary .took").textContent = tookText(ev.time_ms - start);
    if (ev.error) place(body, el("p", "err", ev.error));
    var v = ev.value, tool = String(ev.tool || ""), fig = media(ev);
    // exec's value repeats its exit code, apply_patch's the files of its
    // patch, a screenshot's or recording's its file.
    if (tool === "exec" || tool === "apply_patch" || fig) {
      // nothing more to show
    } else if (v && typeof v === "object" && typeof v.diff === "string" && v.diff) {
      place(body, diffBlock(v.diff));
    } else if (v !== undefined) {
      var text = tool === "read_file" && v && typeof v.content === "string" ? v.content :
        tool === "browser_text" && v && typeof v.text === "string" ? v.text : null;
      if (text !== null) {
        if (text) place(body, pre("content", text));
      } else if (pretty(v)) {
        place(body, pre("value", pretty(v)));
      }
    }
    if (fig) place(body, fig);
    // A step that succeeded closes, unless it shows an image or a video.
    li.querySelector("details.step").open = state !== "ok" || !!fig;
  };

  // end marks the calls that never got a result.
  Transcript.prototype.end = function () {
    this.list.querySelectorAll("li.step.s-running").forEach(function (li) {
      setState(li, "lost", "no result");
      li.querySelector("summary .took").textContent = "";
      li.querySelector("details.step").open = true;
    });
    // A script that stopped early shows the steps it never reached, as
    // the server renders them once the session has ended.
    var last = 0;
    for (var k in this.steps) last = Math.max(last, Number(k));
    if (last === 0 && document.getElementById("earlier")) return;
    for (var n = last + 1; n <= plan.length; n++) {
      var li = this.steps[n] = newStep(n);
      setState(li, "skipped", "skipped");
      li.querySelector("summary .tool").textContent = plan[n - 1].tool;
      li.querySelector("summary .what").textContent = plan[n - 1].target;
      li.querySelector("details.step").open = false;
      this.list.appendChild(li);
    }
  };

  Transcript.prototype.noiseEvent = function (ev, raw) {
    var group = this.list.lastElementChild;
    if (!group || !group.classList.contains("noise")) {
      group = el("li", "noise");
      var d = el("details", "noise");
      d.appendChild(el("summary"));
      d.appendChild(el("ol", "lines"));
      d.appendChild(rawDetails("raw JSON"));
      group.appendChild(d);
      this.list.appendChild(group);
    }
    var l = noiseLine(ev), line = el("li", l.failed ? "failed" : "");
    line.dataset.type = String(ev.type);
    line.dataset.kind = l.kind;
    line.appendChild(el("span", "t", time(ev.time_ms)));
    line.appendChild(document.createTextNode(" "));
    line.appendChild(el("span", "x", l.text));
    group.querySelector("ol.lines").appendChild(line);
    group.querySelector("details.raw").appendChild(rawBlock(ev, raw));
    summarize(group);
  };

  // noiseLine describes a machine, claim, connection or status event
  // (noiseLineOf in Go).
  function noiseLine(ev) {
    var l = { kind: "", text: "", failed: false };
    switch (ev.type) {
      case "machine":
        l.kind = str(ev.step);
        l.text = "machine " + str(ev.step) + (ev.machine ? " " + ev.machine : "") + (ev.backend ? " (" + ev.backend + ")" : "") +
          (typeof ev.exit_code === "number" ? " exit " + ev.exit_code : "");
        l.failed = ev.step === "failed";
        break;
      case "claim": l.kind = "claimed"; l.text = "claimed by " + str(ev.acceptor_id); break;
      case "release": l.kind = "released"; l.text = "released by " + str(ev.acceptor_id); break;
      case "remote_connected":
        l.kind = "connected";
        l.text = "remote connected" + (ev.capabilities && ev.capabilities.os ? " (" + ev.capabilities.os + "/" + ev.capabilities.arch + ")" : "");
        break;
      case "remote_disconnected": l.kind = "disconnected"; l.text = "remote disconnected"; break;
      case "status":
        l.kind = str(ev.status);
        l.text = plain(ev.status, ev.status_detail);
        l.failed = ev.status === "error";
        break;
    }
    if (ev.reason) l.text += " — " + ev.reason;
    return l;
  }

  // summarize writes a fold's one line (noise.summarize in Go).
  function summarize(group) {
    var lines = Array.prototype.map.call(group.querySelectorAll("ol.lines > li"), function (li) {
      return { type: li.dataset.type, kind: li.dataset.kind, failed: li.classList.contains("failed"), text: li.querySelector(".x").textContent };
    });
    var last = lines[lines.length - 1], failed = null, machines = true;
    lines.forEach(function (l) {
      if (l.failed && !failed) failed = l;
      machines = machines && l.type === "machine";
    });
    group.classList.toggle("failed", !!failed);
    var summary;
    if (lines.length === 1) {
      summary = last.text;
    } else {
      var kinds = [];
      lines.forEach(function (l) {
        var k = l.type === "machine" && !machines ? "machine " + l.kind : l.kind;
        if (kinds.indexOf(k) < 0) kinds.push(k);
      });
      if (kinds.length > 6) kinds = kinds.slice(0, 6).concat(["…"]);
      summary = lines.length + (machines ? " machine events: " : " events: ") + kinds.join(", ") + " — " +
        (failed ? "failed: " + failed.text : "last: " + last.text);
    }
    group.querySelector("summary").textContent = summary;
  }

  // loneEvent renders an event shown on its own (the "event" template).
  function loneEvent(ev, raw) {
    var type = String(ev.type).replace(/[^a-z_]/g, "");
    var li = el("li", "ev ev-" + type + (type === "message" ? " msg-" + String(ev.role).replace(/[^a-z]/g, "") : ""));
    li.appendChild(el("span", "t", time(ev.time_ms)));
    li.appendChild(document.createTextNode(" "));
    function k(text, failed) { li.appendChild(el("span", "k" + (failed ? " failed" : ""), text)); }
    function text(s) { li.appendChild(document.createTextNode(s)); }
    switch (ev.type) {
      case "message":
        k(ev.role);
        if (ev.usage) li.appendChild(el("span", "hint", " " + ev.usage.prompt_tokens + " + " + ev.usage.completion_tokens + " tokens"));
        if (ev.text) li.appendChild(el("div", "text", ev.text));
        if (ev.tool_calls && ev.tool_calls.length) {
          var p = el("p", "calls", "Runs ");
          ev.tool_calls.forEach(function (c, i) {
            if (i) p.appendChild(document.createTextNode(", "));
            var a = el("a", "", "#" + c.call_seq + " " + c.tool);
            a.href = "#call-" + Number(c.call_seq);
            p.appendChild(a);
          });
          li.appendChild(p);
        }
        break;
      case "end":
        k("session ended");
        text(" " + plain(ev.status, ev.status_detail) + (ev.reason ? " — " + ev.reason : ""));
        break;
      case "resume": k("resumed"); text(" " + str(ev.reason)); break;
      case "desktop":
        k(ev.action === "take_control" ? "took control" : ev.action === "hand_back" ? "handed back" : "desktop");
        text(" " + str(ev.reason));
        break;
      case "restore": k("restore", ev.ok === false); if (ev.reason) text(" " + ev.reason); break;
      case "artifact":
        k("artifact");
        if (ev.artifact) text(" " + ev.artifact.name + " (" + size(ev.artifact.size) + ")");
        break;
      case "network_request":
        var r = ev.network_request || {};
        k("network request", r.state === "denied");
        text(" " + str(r.id) + " " + str(r.state));
        if (r.state === "pending") {
          text(": " + (r.domains || []).join(", ") + " — " + JSON.stringify(str(r.reason)) + " ");
          var reload = el("a", "", "answer it");
          reload.href = location.pathname + "#network-requests";
          reload.addEventListener("click", function () { location.reload(); });
          li.appendChild(reload);
        } else {
          if (r.state === "granted") text(" for the " + str(r.scope));
          if (r.answered_by) text(" by " + r.answered_by);
          if (r.answer) text(": " + r.answer);
        }
        break;
      case "approval":
        var a = ev.approval || {};
        k("approval", a.state === "denied" || (a.state === "timed_out" && a.on_timeout !== "allow"));
        text(" #" + Number(a.call_seq) + " " + str(a.tool));
        if (a.state === "pending") {
          text(" waits for approval (rule " + str(a.rule) + (a.rule_reason ? ": " + a.rule_reason : "") + ") ");
          var decide = el("a", "", "decide it");
          decide.href = location.pathname + "#approvals";
          decide.addEventListener("click", function () { location.reload(); });
          li.appendChild(decide);
        } else {
          if (a.state === "timed_out") text(" timed out, so " + (a.on_timeout === "allow" ? "allowed" : "denied"));
          else text(" " + str(a.state) + (a.by === "rule" ? " by rule " + str(a.rule) : a.by ? " by " + a.by : ""));
          if (a.reason) text(": " + a.reason);
        }
        break;
      default:
        k(ev.type);
        if (ev.acceptor_id) text(" " + ev.acceptor_id);
        if (ev.reason) text(" " + ev.reason);
    }
    var d = rawDetails("raw");
    d.appendChild(rawBlock(ev, raw));
    li.appendChild(d);
    return li;
  }

  // tick shows how long running calls have run so far, in whole seconds.
  function tick(list) {
    list.querySelectorAll("li.step.s-running[data-start]").forEach(function (li) {
      var ms = Math.max(0, Date.now() - Number(li.dataset.start));
      li.querySelector("summary .took").textContent = ms < 60000 ? Math.floor(ms / 1000) + "s" : tookText(ms);
    });
  }

  // addUsage adds a model answer's usage to the session's usage shown
  // (the text budget.DescribeUsage writes on the server).
  function addUsage(u) {
    var dd = document.getElementById("usage");
    if (!dd) return;
    var d = dd.dataset;
    function add(key, v) { d[key] = String(Number(d[key] || 0) + Number(v || 0)); return Number(d[key]); }
    var calls = add("modelCalls", u.model_calls), p = add("prompt", u.prompt_tokens), c = add("completion", u.completion_tokens);
    var tools = add("toolCalls", u.tool_calls), cost = add("cost", u.cost_usd);
    var text = calls + " model calls, " + p + " prompt + " + c + " completion tokens";
    if (tools > 0) text += ", " + tools + " tool calls";
    if (cost > 0) text += ", about $" + (cost < 1 ? cost.toFixed(4) : cost.toFixed(2));
    dd.textContent = text;
  }

  function follow(list) {
    var url = list.dataset.events + "?after=" + encodeURIComponent(list.dataset.after || "0");
    var state = document.getElementById("live-state");
    var status = document.getElementById("status");
    var reason = document.getElementById("reason");
    try { plan = JSON.parse(list.dataset.plan || "[]"); } catch (e) { plan = []; }
    var transcript = new Transcript(list);
    var timer = window.setInterval(function () { tick(list); }, 500);
    tick(list);
    var src = new EventSource(url);
    src.addEventListener("step", function (msg) {
      var s;
      try { s = JSON.parse(msg.data); } catch (e) { return; }
      if (s && s.call_seq) transcript.targets[s.call_seq] = String(s.target || "");
    });
    src.onmessage = function (msg) {
      var ev;
      try { ev = JSON.parse(msg.data); } catch (e) { return; }
      var stick = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      transcript.add(ev, msg.data);
      if (stick) window.scrollTo(0, document.body.scrollHeight);
      if (ev.type === "message" && ev.usage) addUsage(ev.usage);
      if ((ev.type === "status" || ev.type === "end") && ev.status) {
        status.textContent = plain(ev.status, ev.status_detail);
        status.className = "st st-" + String(ev.status).replace(/[^a-z]/g, "");
        reason.textContent = ev.reason || "";
      }
      if (ev.type === "end") {
        src.close();
        window.clearInterval(timer);
        if (state) state.textContent = "The session has ended.";
        document.dispatchEvent(new CustomEvent("outpost:session-ended"));
        var t = document.getElementById("terminate-form");
        if (t) t.hidden = true;
      }
    };
    src.onerror = function () {
      if (state && src.readyState !== EventSource.CLOSED) state.textContent = "Reconnecting…";
    };
    src.onopen = function () {
      if (state) state.textContent = "Following live…";
    };
  }

  // Forms marked data-confirm ask first; without JavaScript they post as is.
  document.addEventListener("submit", function (e) {
    var f = e.target;
    if (f && f.dataset && f.dataset.confirm && !window.confirm(f.dataset.confirm)) e.preventDefault();
  });

  // The network policy form's "Add another rule" copies the blank row at
  // its end; without JavaScript the button stays hidden and each save
  // brings a new blank row.
  document.addEventListener("click", function (e) {
    var b = e.target && e.target.closest ? e.target.closest("[data-add-rule]") : null;
    if (!b) return;
    var rows = document.getElementById(b.dataset.addRule);
    var blanks = rows ? rows.querySelectorAll("tr.new-rule") : [];
    if (!blanks.length) return;
    var copy = blanks[blanks.length - 1].cloneNode(true);
    copy.querySelectorAll("input").forEach(function (i) { i.value = ""; });
    copy.querySelectorAll("select").forEach(function (s) { s.selectedIndex = 0; });
    rows.appendChild(copy);
    var v = copy.querySelector("input[name=value]");
    if (v) v.focus();
  });

  // The first page of the sessions list refreshes itself: it fetches the
  // page again every data-live milliseconds while the tab is visible and
  // swaps in the new list, so new sessions and status changes appear
  // without a reload. Later pages stay as they were loaded.
  function liveList(box) {
    var every = parseInt(box.dataset.live, 10) || 5000;
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(box.id);
          if (fresh) box.replaceChildren.apply(box, Array.prototype.slice.call(fresh.childNodes));
        })
        .catch(function () {})
        .then(function () { busy = false; });
    }, every);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var list = document.getElementById("transcript");
    if (list && list.dataset.events) follow(list);
    var sessions = document.getElementById("sessions-list");
    if (sessions && sessions.dataset.live) liveList(sessions);
    document.querySelectorAll("[data-add-rule]").forEach(function (b) { b.hidden = false; });
    // Copy buttons copy the text of the element they name.
    document.querySelectorAll("button[data-copy]").forEach(function (b) {
      b.addEventListener("click", function () {
        var el = document.getElementById(b.dataset.copy);
        if (!el || !navigator.clipboard) return;
        navigator.clipboard.writeText(el.textContent).then(function () {
          b.textContent = "Copied";
          setTimeout(function () { b.textContent = "Copy"; }, 2000);
        });
      });
    });
  });
})();

// The fleet dashboard is drawn by the server; it is kept current by
// loading it again, unless the reader has opened a table of numbers.
(function () {
  var dash = document.getElementById("dashboard");
  if (!dash) return;
  var secs = parseInt(dash.getAttribute("data-refresh-seconds"), 10);
  if (!(secs > 0)) return;
  setInterval(function () {
    if (document.hidden || dash.querySelector("details[open]")) return;
    location.reload();
  }, secs * 1000);
})();

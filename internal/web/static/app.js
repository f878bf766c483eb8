// Outpost UI: follows a session's transcript live over server-sent events.
// Everything from the server is added with textContent, never as HTML.
"use strict";
(function () {
  function plain(status, detail) {
    switch (status) {
      case "new": return "Waiting in the queue for a machine";
      case "claimed": return "Claimed by a machine, starting";
      case "running":
        if (detail === "waiting_for_user") return "Waiting for your message";
        if (detail === "waiting_for_machine") return "Waiting for its machine to reconnect";
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

  // diffBlock renders a unified diff, one line a span, as text only.
  function diffBlock(diff) {
    var pre = el("pre", "diff");
    diff.split("\n").forEach(function (line) {
      var cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
      pre.appendChild(el("span", cls, line + "\n"));
    });
    return pre;
  }

  function pretty(v) {
    if (v === undefined || v === null) return "";
    if (typeof v === "string") return v;
    try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
  }

  // ansi appends text to parent, turning SGR colour codes into spans with
  // fixed class names and dropping every other escape sequence.
  var ANSI = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b[^\[]?/g;
  function ansi(parent, text) {
    var fg = -1, bold = false, pos = 0, m;
    function flush(s) {
      if (!s) return;
      if (fg < 0 && !bold) { parent.appendChild(document.createTextNode(s)); return; }
      var cls = [];
      if (fg >= 0) cls.push("fg" + fg);
      if (bold) cls.push("b");
      parent.appendChild(el("span", cls.join(" "), s));
    }
    ANSI.lastIndex = 0;
    while ((m = ANSI.exec(text)) !== null) {
      flush(text.slice(pos, m.index));
      pos = ANSI.lastIndex;
      if (m[0].length === 0) { ANSI.lastIndex++; continue; }
      if (m[2] !== "m") continue;
      (m[1] || "0").split(";").forEach(function (p) {
        var n = parseInt(p, 10);
        if (isNaN(n)) return;
        if (n === 0) { fg = -1; bold = false; }
        else if (n === 1) bold = true;
        else if (n === 22) bold = false;
        else if (n >= 30 && n <= 37) fg = n - 30;
        else if (n >= 90 && n <= 97) fg = n - 90 + 8;
        else if (n === 39) fg = -1;
      });
    }
    flush(text.slice(pos));
  }

  // media returns a figure showing the image or video artifact a tool
  // result refers to (value.artifact, or upload_artifact's value), or null.
  var ARTIFACT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
  function media(ev) {
    var v = ev.value, ref = null;
    if (!v || typeof v !== "object") return null;
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

  function render(ev) {
    var li = el("li", "ev ev-" + String(ev.type).replace(/[^a-z_]/g, ""));
    li.dataset.seq = String(ev.seq || 0);
    li.appendChild(el("span", "t", time(ev.time_ms)));
    li.appendChild(document.createTextNode(" "));
    switch (ev.type) {
      case "call":
        li.appendChild(el("span", "k", "call #" + ev.call_seq));
        li.appendChild(document.createTextNode(" "));
        li.appendChild(el("strong", "", ev.tool));
        if (ev.args !== undefined) li.appendChild(el("pre", "args", pretty(ev.args)));
        break;
      case "output":
        var pre = el("pre", "out out-" + String(ev.stream || "").replace(/[^a-z]/g, ""));
        ansi(pre, String(ev.text || ""));
        li.appendChild(pre);
        break;
      case "result":
        li.appendChild(el("span", "k", "result #" + ev.call_seq));
        li.appendChild(document.createTextNode(" "));
        if (ev.ok !== undefined) li.appendChild(el("span", ev.ok ? "ok" : "failed", ev.ok ? "ok" : "failed"));
        if (ev.exit_code !== undefined) li.appendChild(document.createTextNode(" exit " + ev.exit_code));
        if (ev.error) { li.appendChild(document.createTextNode(" ")); li.appendChild(el("span", "failed", ev.error)); }
        if (ev.value && typeof ev.value.diff === "string") {
          li.appendChild(diffBlock(ev.value.diff));
        } else if (ev.value !== undefined) {
          li.appendChild(el("pre", "args", pretty(ev.value)));
        }
        var fig = media(ev);
        if (fig) li.appendChild(fig);
        break;
      case "message":
        li.appendChild(el("span", "k", ev.role));
        if (ev.text) li.appendChild(el("pre", "wrap msg", ev.text));
        (ev.tool_calls || []).forEach(function (c) {
          li.appendChild(el("div", "k", "asks for " + c.tool));
          li.appendChild(el("pre", "args", c.arguments));
        });
        break;
      case "status":
      case "end":
        li.appendChild(el("span", "k", ev.type === "end" ? "session ended" : "status"));
        li.appendChild(document.createTextNode(" " + plain(ev.status, ev.status_detail) + (ev.reason ? " — " + ev.reason : "")));
        break;
      case "claim":
        li.appendChild(el("span", "k", "claimed by"));
        li.appendChild(document.createTextNode(" " + (ev.acceptor_id || "")));
        break;
      case "machine":
        li.appendChild(el("span", "k", "machine " + (ev.step || "")));
        li.appendChild(document.createTextNode(" " + (ev.machine || "") + (ev.backend ? " (" + ev.backend + ")" : "") +
          (ev.exit_code !== undefined ? " exit " + ev.exit_code : "") + (ev.reason ? " — " + ev.reason : "")));
        if (ev.step === "failed") li.classList.add("failed");
        break;
      case "restore":
        li.appendChild(el("span", "k" + (ev.ok === false ? " failed" : ""), "restore"));
        if (ev.reason) li.appendChild(document.createTextNode(" " + ev.reason));
        break;
      case "artifact":
        li.appendChild(el("span", "k", "artifact"));
        if (ev.artifact) li.appendChild(document.createTextNode(" " + ev.artifact.name + " (" + ev.artifact.size + " B)"));
        break;
      default:
        li.appendChild(el("span", "k", ev.type));
        if (ev.acceptor_id) li.appendChild(document.createTextNode(" " + ev.acceptor_id));
        if (ev.reason) li.appendChild(document.createTextNode(" " + ev.reason));
    }
    return li;
  }

  function follow(list) {
    var url = list.dataset.events + "?after=" + encodeURIComponent(list.dataset.after || "0");
    var state = document.getElementById("live-state");
    var status = document.getElementById("status");
    var reason = document.getElementById("reason");
    var src = new EventSource(url);
    src.onmessage = function (msg) {
      var ev;
      try { ev = JSON.parse(msg.data); } catch (e) { return; }
      var stick = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      list.appendChild(render(ev));
      if (stick) window.scrollTo(0, document.body.scrollHeight);
      if ((ev.type === "status" || ev.type === "end") && ev.status) {
        status.textContent = plain(ev.status, ev.status_detail);
        status.className = "st st-" + String(ev.status).replace(/[^a-z]/g, "");
        reason.textContent = ev.reason || "";
      }
      if (ev.type === "end") {
        src.close();
        if (state) state.textContent = "The session has ended.";
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

  document.addEventListener("DOMContentLoaded", function () {
    var list = document.getElementById("transcript");
    if (list && list.dataset.events) follow(list);
  });
})();

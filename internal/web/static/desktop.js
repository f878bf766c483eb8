// The session page's live desktop: a canvas drawn from the tiles of the
// live view's WebSocket (GET /v1/sessions/{id}/desktop, opened with the
// sign-in cookie), view-only until the person takes control, when the
// canvas sends their mouse and keyboard. No inline script: the page's CSP
// allows only scripts from /static/.
(function () {
  "use strict";

  // Frames wait for decoding in order; past this many waiting (the
  // server's own queue per viewer) the viewer is behind: it drops what
  // comes until a keyframe, asks for one, and so never queues without
  // bound. Not fewer: a keyframe over 4 MiB comes in several messages.
  var MAX_PENDING = 8;
  var MOVE_EVERY_MS = 33; // pointer moves sent at most ~30 a second
  var BACKOFF_MIN = 1000, BACKOFF_MAX = 30000;

  // Named keys: KeyboardEvent.key to the key names the desktop accepts
  // (X keysym names). Printable characters go as themselves.
  var KEYS = {
    Enter: "Return", Tab: "Tab", Backspace: "BackSpace", Escape: "Escape", Delete: "Delete",
    Insert: "Insert", Home: "Home", End: "End", PageUp: "Page_Up", PageDown: "Page_Down",
    ArrowLeft: "Left", ArrowRight: "Right", ArrowUp: "Up", ArrowDown: "Down",
    CapsLock: "Caps_Lock", NumLock: "Num_Lock", ScrollLock: "Scroll_Lock", Pause: "Pause",
    PrintScreen: "Print", ContextMenu: "Menu", " ": "space"
  };
  // Modifiers by KeyboardEvent.code, so left and right stay apart.
  var MODS = {
    ShiftLeft: "Shift_L", ShiftRight: "Shift_R", ControlLeft: "Control_L", ControlRight: "Control_R",
    AltLeft: "Alt_L", AltRight: "Alt_R", MetaLeft: "Super_L", MetaRight: "Super_R", OSLeft: "Super_L", OSRight: "Super_R"
  };

  // keyName is the desktop's name for a key event, or "" for keys it
  // does not take (dead keys, IME composition).
  function keyName(e) {
    if (MODS[e.code]) return MODS[e.code];
    if (KEYS[e.key]) return KEYS[e.key];
    if (/^F([1-9]|1[0-9]|2[0-4])$/.test(e.key)) return e.key;
    if (e.key && Array.from(e.key).length === 1) return e.key;
    return "";
  }

  // parse reads a binary tiles message (api.DesktopTiles).
  function parse(buf) {
    var d = new DataView(buf);
    if (buf.byteLength < 8 || d.getUint8(0) !== 100) return null; // 'd'
    var f = { key: (d.getUint8(1) & 1) !== 0, w: d.getUint16(2), h: d.getUint16(4), tiles: [] };
    var n = d.getUint16(6), off = 8;
    for (var i = 0; i < n; i++) {
      if (off + 12 > buf.byteLength) return null;
      var len = d.getUint32(off + 8);
      if (off + 12 + len > buf.byteLength) return null;
      f.tiles.push({ x: d.getUint16(off), y: d.getUint16(off + 2), png: new Blob([new Uint8Array(buf, off + 12, len)], { type: "image/png" }) });
      off += 12 + len;
    }
    return f;
  }

  function Desk(root) {
    this.root = root;
    this.url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + root.dataset.desktop;
    this.canvas = root.querySelector("canvas");
    this.ctx = this.canvas.getContext("2d");
    this.state = root.querySelector(".desk-state");
    this.take = root.querySelector("[data-take]");
    this.back = root.querySelector("[data-hand-back]");
    this.ws = null;
    this.backoff = BACKOFF_MIN;
    this.canControl = false;
    this.controller = "";
    this.you = false;
    this.pending = 0;
    this.chain = Promise.resolve();
    this.needKey = true;  // the canvas is blank until a keyframe
    this.asked = false;   // a keyframe was asked for and has not come
    this.lastMove = 0;
    this.down = {};       // keys pressed, by code: the name sent
    this.frames = 0;      // drawn, for tests and the curious
    this.dropped = 0;
    this.ended = false;
    this.retry = 0;
    root.desk = this;
    var self = this;
    this.take.addEventListener("click", function () { self.send({ type: "take_control" }); });
    this.back.addEventListener("click", function () { self.send({ type: "hand_back" }); });
    document.addEventListener("visibilitychange", function () { self.visibility(); });
    // An ended session's desktop is gone for good: stop trying.
    document.addEventListener("outpost:session-ended", function () {
      self.ended = true;
      window.clearTimeout(self.retry);
      if (self.ws) self.ws.close();
      self.take.hidden = self.back.hidden = true;
      self.state.textContent = "The session has ended; its desktop is gone.";
    });
    this.inputs();
    this.connect();
  }

  Desk.prototype.say = function (text) { if (!this.ended) this.state.textContent = text; };

  Desk.prototype.send = function (m) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(m));
  };

  Desk.prototype.connect = function () {
    var self = this, ws = new WebSocket(this.url), opened = false;
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    this.needKey = true;
    this.asked = true; // joining brings a keyframe
    ws.onopen = function () { opened = true; self.backoff = BACKOFF_MIN; };
    ws.onmessage = function (msg) {
      if (typeof msg.data === "string") self.message(msg.data);
      else self.frame(msg.data);
    };
    ws.onclose = function (e) {
      if (self.ws !== ws || self.ended) return;
      self.you = false;
      self.controls();
      var wait = self.backoff;
      self.backoff = Math.min(self.backoff * 2, BACKOFF_MAX);
      var again = " Trying again in " + Math.round(wait / 1000) + " s…";
      self.retry = window.setTimeout(function () { self.connect(); }, wait);
      if (opened) {
        self.say("Disconnected from the desktop" + (e.reason ? ": " + e.reason : ".") + again);
        return;
      }
      // A refused handshake says nothing to the page; the same request
      // without the upgrade gets the server's sentence.
      fetch(self.root.dataset.desktop, { credentials: "same-origin" }).then(function (r) {
        return r.json();
      }).then(function (b) {
        var why = b && b.error && b.error.message ? b.error.message : "";
        self.say("No desktop" + (why ? ": " + why : ".") + again);
      }).catch(function () {
        self.say("No desktop." + again);
      });
    };
  };

  Desk.prototype.message = function (text) {
    var m;
    try { m = JSON.parse(text); } catch (e) { return; }
    switch (m.type) {
      case "hello":
        this.canControl = !!m.can_control;
      // falls through: hello says who has control, as control does
      case "control":
        this.controller = m.controller || "";
        this.you = !!m.you;
        this.controls();
        break;
      case "error":
        this.say(String(m.error || "The desktop refused a message."));
        break;
    }
  };

  // controls shows the buttons this viewer may use and who has control.
  Desk.prototype.controls = function () {
    var open = this.ws && this.ws.readyState === WebSocket.OPEN;
    this.take.hidden = !(open && this.canControl && !this.controller);
    this.back.hidden = !(open && this.you);
    this.root.classList.toggle("in-control", !!this.you);
    this.canvas.tabIndex = this.you ? 0 : -1;
    if (this.you) this.canvas.focus();
    if (!open) return;
    if (this.you) this.say("You have control: the agent's screen actions wait until you hand back.");
    else if (this.controller) this.say("Watching; token " + this.controller + " has control.");
    else this.say("Watching; the agent has control." + (this.canControl ? "" : " This token may only watch."));
  };

  Desk.prototype.visibility = function () {
    if (document.visibilityState === "visible" && this.needKey) this.askKey();
  };

  Desk.prototype.askKey = function () {
    if (this.asked) return;
    this.asked = true;
    this.send({ type: "keyframe" });
  };

  Desk.prototype.frame = function (buf) {
    var f = parse(buf);
    if (!f) return;
    if (f.key) this.asked = false;
    var hidden = document.visibilityState === "hidden";
    if (hidden || (this.needKey && !f.key) || this.pending >= MAX_PENDING) {
      // A tab nobody sees draws nothing; a viewer that cannot keep up
      // skips to the next keyframe instead of queueing.
      this.dropped++;
      this.needKey = true;
      if (!hidden) this.askKey();
      return;
    }
    this.needKey = false;
    this.pending++;
    var self = this;
    this.chain = this.chain.then(function () {
      return Promise.all(f.tiles.map(function (t) { return createImageBitmap(t.png); }));
    }).then(function (bitmaps) {
      var c = self.canvas;
      if (c.width !== f.w || c.height !== f.h) {
        c.width = f.w;
        c.height = f.h;
        c.style.aspectRatio = f.w + " / " + f.h;
      }
      bitmaps.forEach(function (b, i) {
        self.ctx.drawImage(b, f.tiles[i].x, f.tiles[i].y);
        b.close();
      });
      self.frames++;
      self.root.dataset.frames = String(self.frames);
    }).catch(function () {
      self.needKey = true; // a tile that did not decode leaves a hole only a keyframe mends
    }).then(function () { self.pending--; });
  };

  // at maps a pointer event on the scaled canvas to display pixels.
  Desk.prototype.at = function (e) {
    var c = this.canvas, r = c.getBoundingClientRect();
    var x = Math.floor((e.clientX - r.left) * c.width / r.width);
    var y = Math.floor((e.clientY - r.top) * c.height / r.height);
    return { x: Math.max(0, Math.min(c.width - 1, x)), y: Math.max(0, Math.min(c.height - 1, y)) };
  };

  Desk.prototype.input = function (input) { this.send({ type: "input", input: input }); };

  Desk.prototype.inputs = function () {
    var self = this, c = this.canvas;
    function pointer(kind, e, button) {
      var p = self.at(e);
      var input = { kind: kind, x: p.x, y: p.y };
      if (button) input.button = button;
      self.input(input);
    }
    c.addEventListener("mousemove", function (e) {
      if (!self.you) return;
      var now = performance.now();
      if (now - self.lastMove < MOVE_EVERY_MS) return;
      self.lastMove = now;
      pointer("pointer_move", e);
    });
    // X numbers buttons 1 left, 2 middle, 3 right; the DOM 0, 1, 2.
    c.addEventListener("mousedown", function (e) {
      if (!self.you || e.button > 2) return;
      e.preventDefault();
      c.focus();
      pointer("pointer_down", e, e.button + 1);
    });
    c.addEventListener("mouseup", function (e) {
      if (!self.you || e.button > 2) return;
      e.preventDefault();
      pointer("pointer_up", e, e.button + 1);
    });
    c.addEventListener("contextmenu", function (e) { if (self.you) e.preventDefault(); });
    c.addEventListener("wheel", function (e) {
      if (!self.you) return;
      e.preventDefault();
      var b = 0;
      if (e.deltaY) b = e.deltaY < 0 ? 4 : 5;
      else if (e.deltaX) b = e.deltaX < 0 ? 6 : 7;
      if (!b) return;
      pointer("pointer_down", e, b);
      pointer("pointer_up", e, b);
    }, { passive: false });
    c.addEventListener("keydown", function (e) {
      if (!self.you || e.isComposing) return;
      var name = keyName(e);
      if (!name) return;
      e.preventDefault(); // the keys go to the desktop, not the page
      if (e.repeat && self.down[e.code] !== name) return;
      self.down[e.code] = name;
      self.input({ kind: "key_down", key: name });
    });
    c.addEventListener("keyup", function (e) {
      if (!self.you) return;
      var name = self.down[e.code];
      if (!name) return;
      e.preventDefault();
      delete self.down[e.code];
      self.input({ kind: "key_up", key: name });
    });
    // Keys held when the canvas loses focus would stay down on the desktop.
    c.addEventListener("blur", function () {
      Object.keys(self.down).forEach(function (code) { self.input({ kind: "key_up", key: self.down[code] }); });
      self.down = {};
    });
  };

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("desktop");
    if (root && root.dataset.desktop && window.WebSocket && window.createImageBitmap) new Desk(root);
  });
})();

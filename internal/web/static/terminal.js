// Outpost UI: renders terminal output (text with ANSI escape sequences)
// into a <pre> exactly as the server does (internal/web/terminal.go): both
// pass the cases of internal/web/testdata/terminal.json. Text is added as
// text nodes, never as HTML; colours and attributes become spans with
// fixed class names; every other escape sequence is dropped.
"use strict";
window.OutpostTerminal = (function () {
  var BOLD = 1, DIM = 2, ITALIC = 4, UNDERLINE = 8, INVERSE = 16, STRIKE = 32;
  var ATTRS = [[BOLD, "b"], [DIM, "d"], [ITALIC, "i"], [UNDERLINE, "u"], [STRIKE, "s"]];
  var MAX_CSI = 128, MAX_STRING = 4096;
  var CUBE = [0, 95, 135, 175, 215, 255];

  // escLen is the length of the escape sequence at s[i] (an ESC), or -1
  // when s ends inside it.
  function escLen(s, i) {
    var n = s.length, j, b;
    if (n - i < 2) return -1;
    var c = s.charCodeAt(i + 1);
    if (c === 0x5b) { // CSI
      for (j = i + 2; j < n; j++) {
        b = s.charCodeAt(j);
        if (b >= 0x40 && b <= 0x7e) return j - i + 1;
        if (b < 0x20 || b > 0x3f || j - i >= MAX_CSI) return j - i;
      }
      return -1;
    }
    if (c === 0x5d || c === 0x50 || c === 0x58 || c === 0x5e || c === 0x5f) { // ] P X ^ _: a string
      for (j = i + 2; j < n; j++) {
        b = s.charCodeAt(j);
        if (j - i >= MAX_STRING) return 2;
        if (b === 0x07) return j - i + 1;
        if (b === 0x1b) {
          if (j + 1 === n) return -1;
          if (s.charCodeAt(j + 1) === 0x5c) return j - i + 2;
          return j - i;
        }
      }
      return -1;
    }
    if (c >= 0x20 && c <= 0x2f) {
      for (j = i + 2; j < n; j++) {
        b = s.charCodeAt(j);
        if (b >= 0x30 && b <= 0x7e) return j - i + 1;
        if (b < 0x20 || b > 0x2f || j - i >= MAX_CSI) return j - i;
      }
      return -1;
    }
    if (c >= 0x30 && c <= 0x7e) return 2;
    return 1;
  }

  // number reads one SGR parameter: digits, or empty for 0; NaN otherwise.
  function number(f) {
    if (f === "") return 0;
    if (f.length > 6 || !/^[0-9]+$/.test(f)) return NaN;
    return parseInt(f, 10);
  }

  function nearest256(r, g, b) {
    function level(v) { return v < 48 ? 0 : v < 115 ? 1 : Math.floor((v - 35) / 40); }
    var cr = level(r), cg = level(g), cb = level(b);
    var cube = 16 + 36 * cr + 6 * cg + cb;
    var grey = Math.floor((r + g + b) / 3);
    var gi = grey > 238 ? 23 : Math.max(0, Math.floor((grey - 3) / 10));
    var gv = 8 + 10 * gi;
    function dist(x, y, z) { return (r - x) * (r - x) + (g - y) * (g - y) + (b - z) * (b - z); }
    return dist(gv, gv, gv) < dist(CUBE[cr], CUBE[cg], CUBE[cb]) ? 232 + gi : cube;
  }

  // extColour reads the colour after 38 or 48: [index or -1, parameters used].
  function extColour(p) {
    if (p.length === 0) return [0, 0];
    if (p[0] === "5") {
      if (p.length < 2) return [0, 0];
      var n = number(p[1]);
      return isNaN(n) || n > 255 ? [-1, 2] : [n, 2];
    }
    if (p[0] === "2") {
      if (p.length < 4) return [0, 0];
      var rgb = [];
      for (var k = 0; k < 3; k++) {
        var v = number(p[1 + k]);
        if (isNaN(v)) return [-1, 4];
        rgb.push(Math.min(v, 255));
      }
      return [nearest256(rgb[0], rgb[1], rgb[2]), 4];
    }
    return [0, 0];
  }

  function Terminal(pre) {
    this.pre = pre;
    this.fg = -1;
    this.bg = -1;
    this.a = 0;
    this.pending = "";
    this.cr = false;
    // A call still running when the page was rendered: go on from the
    // server's state.
    if (pre.dataset.term) {
      try {
        var s = JSON.parse(pre.dataset.term);
        this.fg = s.fg; this.bg = s.bg; this.a = s.a; this.pending = s.p || ""; this.cr = !!s.cr;
      } catch (e) { /* start afresh */ }
      delete pre.dataset.term;
    }
  }

  // write adds a chunk of output; stderr marks it as standard error.
  Terminal.prototype.write = function (text, stderr) {
    if (!text) return;
    if (this.pending) { text = this.pending + text; this.pending = ""; }
    if (this.cr) {
      this.cr = false;
      if (text.charCodeAt(0) !== 10) this.dropLine();
    }
    var start = 0, i = 0, n = text.length;
    while (i < n) {
      var c = text.charCodeAt(i);
      if ((c >= 0x20 && c !== 0x7f) || c === 10 || c === 9) { i++; continue; }
      this.add(text.slice(start, i), stderr);
      if (c === 0x1b) {
        var len = escLen(text, i);
        if (len < 0) { this.pending = text.slice(i); return; }
        if (len > 2 && text.charCodeAt(i + 1) === 0x5b && text.charCodeAt(i + len - 1) === 0x6d) this.apply(text.slice(i + 2, i + len - 1));
        i += len;
      } else if (c === 13) {
        if (i + 1 === n) this.cr = true;
        else if (text.charCodeAt(i + 1) !== 10) this.dropLine();
        i++;
      } else {
        i++;
      }
      start = i;
    }
    this.add(text.slice(start), stderr);
  };

  Terminal.prototype.add = function (text, stderr) {
    if (!text) return;
    var cls = this.cls(stderr), last = this.pre.lastChild;
    if (cls === "") {
      if (last && last.nodeType === Node.TEXT_NODE) last.appendData(text);
      else this.pre.appendChild(document.createTextNode(text));
      return;
    }
    if (last && last.nodeName === "SPAN" && last.className === cls && last.firstChild) {
      last.firstChild.appendData(text);
      return;
    }
    var span = document.createElement("span");
    span.className = cls;
    span.textContent = text;
    this.pre.appendChild(span);
  };

  // dropLine removes the text after the last newline.
  Terminal.prototype.dropLine = function () {
    for (var node = this.pre.lastChild; node; node = this.pre.lastChild) {
      var t = node.textContent, k = t.lastIndexOf("\n");
      if (k >= 0) {
        if (k + 1 < t.length) node.textContent = t.slice(0, k + 1);
        return;
      }
      this.pre.removeChild(node);
    }
  };

  Terminal.prototype.cls = function (stderr) {
    var parts = [], fg = this.fg, bg = this.bg;
    if (this.a & INVERSE) {
      fg = this.bg; bg = this.fg;
      if (fg < 0) parts.push("fgr");
      if (bg < 0) parts.push("bgr");
    }
    if (fg >= 0) parts.push("fg" + fg);
    if (bg >= 0) parts.push("bg" + bg);
    for (var k = 0; k < ATTRS.length; k++) if (this.a & ATTRS[k][0]) parts.push(ATTRS[k][1]);
    if (stderr) parts.push("se");
    return parts.join(" ");
  };

  Terminal.prototype.setColour = function (n, c) {
    if (c < 0) return;
    if (n === 38) this.fg = c; else this.bg = c;
  };

  // apply applies the parameters of an SGR sequence (ESC [ params m).
  Terminal.prototype.apply = function (params) {
    if (/[<=>?]/.test(params)) return;
    var fields = params.split(";");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.indexOf(":") >= 0) { this.applySub(f.split(":")); continue; }
      var n = number(f);
      if (isNaN(n)) continue;
      if (n === 38 || n === 48) {
        var ext = extColour(fields.slice(i + 1));
        if (ext[1] === 0) return;
        this.setColour(n, ext[0]);
        i += ext[1];
        continue;
      }
      this.applyOne(n);
    }
  };

  Terminal.prototype.applySub = function (sub) {
    var n = number(sub[0]);
    if (n === 38 || n === 48) {
      if (sub.length >= 5 && sub[1] === "2") sub = sub.slice(0, 2).concat(sub.slice(sub.length - 3));
      var ext = extColour(sub.slice(1));
      if (ext[1] > 0) this.setColour(n, ext[0]);
    } else if (n === 4) {
      if (sub.length > 1 && sub[1] === "0") this.a &= ~UNDERLINE; else this.a |= UNDERLINE;
    }
  };

  Terminal.prototype.applyOne = function (n) {
    if (n === 0) { this.fg = -1; this.bg = -1; this.a = 0; }
    else if (n === 1) this.a |= BOLD;
    else if (n === 2) this.a |= DIM;
    else if (n === 3) this.a |= ITALIC;
    else if (n === 4 || n === 21) this.a |= UNDERLINE;
    else if (n === 7) this.a |= INVERSE;
    else if (n === 9) this.a |= STRIKE;
    else if (n === 22) this.a &= ~(BOLD | DIM);
    else if (n === 23) this.a &= ~ITALIC;
    else if (n === 24) this.a &= ~UNDERLINE;
    else if (n === 27) this.a &= ~INVERSE;
    else if (n === 29) this.a &= ~STRIKE;
    else if (n >= 30 && n <= 37) this.fg = n - 30;
    else if (n === 39) this.fg = -1;
    else if (n >= 40 && n <= 47) this.bg = n - 40;
    else if (n === 49) this.bg = -1;
    else if (n >= 90 && n <= 97) this.fg = n - 90 + 8;
    else if (n >= 100 && n <= 107) this.bg = n - 100 + 8;
  };

  return {
    // attach returns a terminal that writes into pre, after what it holds.
    attach: function (pre) { return new Terminal(pre); }
  };
})();

package web

import (
	"strconv"
	"strings"
)

// This file reads SGR sequences (ESC [ params m) into a terminal's
// graphic state, as static/terminal.js does.

// SGR attribute bits.
const (
	attrBold = 1 << iota
	attrDim
	attrItalic
	attrUnderline
	attrInverse
	attrStrike
)

// sgr is the graphic state of a terminal.
type sgr struct {
	FG    int `json:"fg"` // 0–255, or -1 for the default
	BG    int `json:"bg"`
	Attrs int `json:"a"`
}

// apply applies the parameters of an SGR sequence (ESC [ params m).
func (s *sgr) apply(params string) {
	if strings.ContainsAny(params, "<=>?") { // private sequences
		return
	}
	fields := strings.Split(params, ";")
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.Contains(f, ":") {
			s.applySub(strings.Split(f, ":"))
			continue
		}
		n, ok := sgrNumber(f)
		if !ok {
			continue
		}
		if n == 38 || n == 48 {
			c, used := extColour(fields[i+1:])
			if used == 0 {
				return // not a colour: the rest cannot be read
			}
			s.setColour(n, c)
			i += used
			continue
		}
		s.applyOne(n)
	}
}

// applySub applies one parameter written with sub-parameters (38:5:n,
// 38:2::r:g:b, 4:3).
func (s *sgr) applySub(sub []string) {
	n, ok := sgrNumber(sub[0])
	if !ok {
		return
	}
	switch n {
	case 38, 48:
		if len(sub) >= 2 && sub[1] == "2" && len(sub) >= 5 {
			sub = append(sub[:2:2], sub[len(sub)-3:]...) // drop the colour space id
		}
		if c, used := extColour(sub[1:]); used > 0 {
			s.setColour(n, c)
		}
	case 4:
		if len(sub) > 1 && sub[1] == "0" {
			s.Attrs &^= attrUnderline
		} else {
			s.Attrs |= attrUnderline
		}
	}
}

func (s *sgr) setColour(n, c int) {
	if c < 0 {
		return
	}
	if n == 38 {
		s.FG = c
	} else {
		s.BG = c
	}
}

func (s *sgr) applyOne(n int) {
	switch {
	case n == 0:
		*s = sgr{FG: -1, BG: -1}
	case n == 1:
		s.Attrs |= attrBold
	case n == 2:
		s.Attrs |= attrDim
	case n == 3:
		s.Attrs |= attrItalic
	case n == 4 || n == 21:
		s.Attrs |= attrUnderline
	case n == 7:
		s.Attrs |= attrInverse
	case n == 9:
		s.Attrs |= attrStrike
	case n == 22:
		s.Attrs &^= attrBold | attrDim
	case n == 23:
		s.Attrs &^= attrItalic
	case n == 24:
		s.Attrs &^= attrUnderline
	case n == 27:
		s.Attrs &^= attrInverse
	case n == 29:
		s.Attrs &^= attrStrike
	case n >= 30 && n <= 37:
		s.FG = n - 30
	case n == 39:
		s.FG = -1
	case n >= 40 && n <= 47:
		s.BG = n - 40
	case n == 49:
		s.BG = -1
	case n >= 90 && n <= 97:
		s.FG = n - 90 + 8
	case n >= 100 && n <= 107:
		s.BG = n - 100 + 8
	}
}

// sgrNumber reads one SGR parameter, digits only; an empty one is 0.
func sgrNumber(f string) (int, bool) {
	if f == "" {
		return 0, true
	}
	if len(f) > 6 || strings.Trim(f, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(f)
	return n, err == nil
}

// extColour reads the colour after 38 or 48: "5;n" or "2;r;g;b". It
// returns the palette index (-1 when the values are not a colour) and how
// many parameters it used (0 when the form is unknown).
func extColour(p []string) (int, int) {
	if len(p) == 0 {
		return 0, 0
	}
	switch p[0] {
	case "5":
		if len(p) < 2 {
			return 0, 0
		}
		n, ok := sgrNumber(p[1])
		if !ok || n > 255 {
			return -1, 2
		}
		return n, 2
	case "2":
		if len(p) < 4 {
			return 0, 0
		}
		var rgb [3]int
		for k := range rgb {
			v, ok := sgrNumber(p[1+k])
			if !ok {
				return -1, 4
			}
			rgb[k] = min(v, 255)
		}
		return nearest256(rgb[0], rgb[1], rgb[2]), 4
	}
	return 0, 0
}

// cubeLevels are the channel values of the xterm 6×6×6 colour cube.
var cubeLevels = [6]int{0, 95, 135, 175, 215, 255}

// nearest256 is the xterm palette colour (16–255) nearest to r, g, b.
func nearest256(r, g, b int) int {
	level := func(v int) int {
		switch {
		case v < 48:
			return 0
		case v < 115:
			return 1
		}
		return (v - 35) / 40
	}
	cr, cg, cb := level(r), level(g), level(b)
	cube := 16 + 36*cr + 6*cg + cb
	grey := (r + g + b) / 3
	gi := 23
	if grey <= 238 {
		gi = max(0, (grey-3)/10)
	}
	gv := 8 + 10*gi
	dist := func(x, y, z int) int { return (r-x)*(r-x) + (g-y)*(g-y) + (b-z)*(b-z) }
	if dist(gv, gv, gv) < dist(cubeLevels[cr], cubeLevels[cg], cubeLevels[cb]) {
		return 232 + gi
	}
	return cube
}

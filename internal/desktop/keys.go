package desktop

import (
	"fmt"
	"strings"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// keymap is the display's keyboard mapping: which keycode (and whether
// with Shift) produces a keysym. Keysyms the layout lacks are bound to a
// spare keycode on demand, as xdotool does, so any character can be typed.
type keymap struct {
	conn     *xgb.Conn
	min, max xproto.Keycode
	per      int
	syms     []xproto.Keysym // (max-min+1)*per
	// spare are keycodes bound to nothing, used for missing keysyms in
	// turn; next is the one to use next.
	spare []xproto.Keycode
	next  int
}

func loadKeymap(conn *xgb.Conn) (*keymap, error) {
	setup := xproto.Setup(conn)
	k := &keymap{conn: conn, min: setup.MinKeycode, max: setup.MaxKeycode}
	count := byte(k.max - k.min + 1)
	reply, err := xproto.GetKeyboardMapping(conn, k.min, count).Reply()
	if err != nil {
		return nil, fmt.Errorf("read the keyboard mapping: %w", err)
	}
	k.per, k.syms = int(reply.KeysymsPerKeycode), reply.Keysyms
	for code := int(k.min); code <= int(k.max); code++ {
		empty := true
		for _, s := range k.row(xproto.Keycode(code)) {
			if s != 0 {
				empty = false
			}
		}
		if empty {
			k.spare = append(k.spare, xproto.Keycode(code))
		}
	}
	return k, nil
}

func (k *keymap) row(code xproto.Keycode) []xproto.Keysym {
	i := (int(code) - int(k.min)) * k.per
	return k.syms[i : i+k.per]
}

// lookup returns the keycode producing sym and whether Shift is needed,
// binding a spare keycode when the layout has none.
func (k *keymap) lookup(sym xproto.Keysym) (xproto.Keycode, bool, error) {
	for code := int(k.min); code <= int(k.max); code++ {
		row := k.row(xproto.Keycode(code))
		if row[0] == sym {
			return xproto.Keycode(code), false, nil
		}
		if k.per > 1 && row[1] == sym {
			return xproto.Keycode(code), true, nil
		}
	}
	if len(k.spare) == 0 {
		return 0, false, fmt.Errorf("no keycode is free to bind keysym 0x%x", uint32(sym))
	}
	code := k.spare[k.next%len(k.spare)]
	k.next++
	// Unbind what an earlier lookup bound there, then bind sym in every
	// column so no modifier changes it.
	row := k.row(code)
	for i := range row {
		row[i] = sym
	}
	if err := xproto.ChangeKeyboardMappingChecked(k.conn, 1, code, byte(k.per), row).Check(); err != nil {
		return 0, false, fmt.Errorf("bind keysym 0x%x: %w", uint32(sym), err)
	}
	return code, false, nil
}

// keysymOfRune is the keysym of a character: Latin-1 ones are their code
// point, others 0x01000000 plus it.
func keysymOfRune(r rune) xproto.Keysym {
	switch r {
	case '\n', '\r':
		return keysyms["return"]
	case '\t':
		return keysyms["tab"]
	case '\b':
		return keysyms["backspace"]
	}
	if (r >= 0x20 && r <= 0x7e) || (r >= 0xa0 && r <= 0xff) {
		return xproto.Keysym(r)
	}
	return xproto.Keysym(0x01000000 + r)
}

// keysyms maps xdotool's key names, lower-cased, to keysyms, with the
// aliases models use (ctrl, cmd, enter, esc, pageup…).
var keysyms = func() map[string]xproto.Keysym {
	m := map[string]xproto.Keysym{
		"backspace": 0xff08, "tab": 0xff09, "linefeed": 0xff0a, "clear": 0xff0b, "return": 0xff0d, "enter": 0xff0d,
		"pause": 0xff13, "scroll_lock": 0xff14, "sys_req": 0xff15, "escape": 0xff1b, "esc": 0xff1b, "delete": 0xffff, "del": 0xffff,
		"home": 0xff50, "left": 0xff51, "up": 0xff52, "right": 0xff53, "down": 0xff54,
		"prior": 0xff55, "page_up": 0xff55, "pageup": 0xff55, "next": 0xff56, "page_down": 0xff56, "pagedown": 0xff56,
		"end": 0xff57, "begin": 0xff58, "select": 0xff60, "print": 0xff61, "execute": 0xff62, "insert": 0xff63,
		"undo": 0xff65, "redo": 0xff66, "menu": 0xff67, "find": 0xff68, "cancel": 0xff69, "help": 0xff6a, "break": 0xff6b,
		"num_lock": 0xff7f, "kp_space": 0xff80, "kp_tab": 0xff89, "kp_enter": 0xff8d,
		"kp_home": 0xff95, "kp_left": 0xff96, "kp_up": 0xff97, "kp_right": 0xff98, "kp_down": 0xff99,
		"kp_prior": 0xff9a, "kp_page_up": 0xff9a, "kp_next": 0xff9b, "kp_page_down": 0xff9b, "kp_end": 0xff9c,
		"kp_begin": 0xff9d, "kp_insert": 0xff9e, "kp_delete": 0xff9f, "kp_equal": 0xffbd, "kp_multiply": 0xffaa,
		"kp_add": 0xffab, "kp_separator": 0xffac, "kp_subtract": 0xffad, "kp_decimal": 0xffae, "kp_divide": 0xffaf,
		"shift_l": 0xffe1, "shift_r": 0xffe2, "control_l": 0xffe3, "control_r": 0xffe4, "caps_lock": 0xffe5,
		"shift_lock": 0xffe6, "meta_l": 0xffe7, "meta_r": 0xffe8, "alt_l": 0xffe9, "alt_r": 0xffea,
		"super_l": 0xffeb, "super_r": 0xffec, "hyper_l": 0xffed, "hyper_r": 0xffee,
		"shift": 0xffe1, "ctrl": 0xffe3, "control": 0xffe3, "alt": 0xffe9, "meta": 0xffe7,
		"super": 0xffeb, "win": 0xffeb, "cmd": 0xffeb, "command": 0xffeb,
		"space": 0x20, "exclam": 0x21, "quotedbl": 0x22, "numbersign": 0x23, "dollar": 0x24, "percent": 0x25,
		"ampersand": 0x26, "apostrophe": 0x27, "parenleft": 0x28, "parenright": 0x29, "asterisk": 0x2a,
		"plus": 0x2b, "comma": 0x2c, "minus": 0x2d, "period": 0x2e, "slash": 0x2f, "colon": 0x3a,
		"semicolon": 0x3b, "less": 0x3c, "equal": 0x3d, "greater": 0x3e, "question": 0x3f, "at": 0x40,
		"bracketleft": 0x5b, "backslash": 0x5c, "bracketright": 0x5d, "asciicircum": 0x5e, "underscore": 0x5f,
		"grave": 0x60, "braceleft": 0x7b, "bar": 0x7c, "braceright": 0x7d, "asciitilde": 0x7e,
		"xf86audiomute": 0x1008ff12, "xf86audiolowervolume": 0x1008ff11, "xf86audioraisevolume": 0x1008ff13,
	}
	for i := 1; i <= 35; i++ {
		m[fmt.Sprintf("f%d", i)] = xproto.Keysym(0xffbe + i - 1)
	}
	for i := 0; i <= 9; i++ {
		m[fmt.Sprintf("kp_%d", i)] = xproto.Keysym(0xffb0 + i)
	}
	return m
}()

// parseKey turns one key name ("Return", "a", "F5", "ctrl") into a keysym.
func parseKey(name string) (xproto.Keysym, error) {
	if r := []rune(name); len(r) == 1 {
		return keysymOfRune(r[0]), nil
	}
	if s, ok := keysyms[strings.ToLower(name)]; ok {
		return s, nil
	}
	return 0, fmt.Errorf("unknown key %q: use xdotool's key names (Return, Tab, Escape, BackSpace, Page_Down, F5, ctrl, shift, alt, super) or one character", name)
}

// parseCombo turns "ctrl+shift+t" into keysyms, pressed in order and
// released in reverse.
func parseCombo(combo string) ([]xproto.Keysym, error) {
	combo = strings.TrimSpace(combo)
	if combo == "" {
		return nil, fmt.Errorf("no key given")
	}
	var out []xproto.Keysym
	// "+" alone, or a combination ending in "+" ("ctrl++"), names the
	// plus key.
	parts := strings.Split(combo, "+")
	for i := 0; i < len(parts); i++ {
		p := strings.TrimSpace(parts[i])
		if p == "" && i+1 < len(parts) && strings.TrimSpace(parts[i+1]) == "" {
			p, i = "+", i+1
		}
		if p == "" {
			return nil, fmt.Errorf("bad key combination %q: an empty key between '+'", combo)
		}
		s, err := parseKey(p)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

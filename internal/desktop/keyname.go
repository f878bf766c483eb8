package desktop

import (
	"unicode/utf8"

	"github.com/jezek/xgb/xproto"
)

// keyNames maps each keysym of keysyms back to one of its names, the
// shortest and then the first in byte order, so the answer is stable.
var keyNames = func() map[xproto.Keysym]string {
	m := map[xproto.Keysym]string{}
	for name, sym := range keysyms {
		if old, ok := m[sym]; !ok || len(name) < len(old) || len(name) == len(old) && name < old {
			m[sym] = name
		}
	}
	return m
}()

// KeyName returns a name the desktop's key input accepts (an
// api.DesktopInput Key) for an X keysym, as VNC clients send them: one
// character for printable Latin-1 and Unicode keysyms, else a key name.
// It reports false for keysyms the desktop has no name for.
func KeyName(keysym uint32) (string, bool) {
	sym := xproto.Keysym(keysym)
	if n, ok := keyNames[sym]; ok && (keysym < 0x20 || keysym > 0xff) {
		return n, true
	}
	var r rune
	switch {
	case keysym >= 0x21 && keysym <= 0x7e, keysym >= 0xa0 && keysym <= 0xff:
		r = rune(keysym)
	case keysym == 0x20:
		return "space", true
	case keysym >= 0x01000100 && keysym <= 0x0110ffff:
		r = rune(keysym - 0x01000000)
	default:
		return "", false
	}
	if !utf8.ValidRune(r) {
		return "", false
	}
	// The desktop turns a one-character name back into this keysym
	// (keysymOfRune), so the round trip is exact.
	return string(r), true
}

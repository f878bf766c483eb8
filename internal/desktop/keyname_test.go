package desktop

import "testing"

// TestKeyName: every keysym KeyName names comes back as the same keysym
// from the desktop's own parser, and unknown ones are refused.
func TestKeyName(t *testing.T) {
	t.Parallel()
	for _, sym := range []uint32{0xff0d, 0xff08, 0xffe1, 0xffe3, 0xffbe, 0xff55, 0x20, 'a', 'A', '~', 0xe9, 0x010003b1, 0x1008ff12} {
		name, ok := KeyName(sym)
		if !ok {
			t.Errorf("keysym %#x has no name", sym)
			continue
		}
		got, err := parseKey(name)
		if err != nil || uint32(got) != sym {
			t.Errorf("keysym %#x named %q parses to %#x, %v", sym, name, uint32(got), err)
		}
	}
	for _, sym := range []uint32{0, 0xfe50, 0x1008ff99, 0x01d800} {
		if name, ok := KeyName(sym); ok {
			t.Errorf("keysym %#x named %q, want none", sym, name)
		}
	}
}

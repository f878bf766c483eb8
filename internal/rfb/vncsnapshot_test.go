package rfb_test

import (
	"image"
	"image/color"
	"image/jpeg"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/outpost-sh/outpost/internal/rfb"
)

// vncPasswdFile writes password as vncpasswd does: DES-encrypted with the
// fixed key every VNC implementation shares (an obfuscation, not a secret).
func vncPasswdFile(t *testing.T, password string) string {
	t.Helper()
	fixed := string([]byte{23, 82, 107, 6, 35, 78, 88, 7})
	var pw [8]byte
	copy(pw[:], password)
	b, err := rfb.EncryptChallenge(fixed, pw[:])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVNCSnapshot: a real VNC client (vncsnapshot, TightVNC's, which
// speaks RFB 3.3) authenticates with the password and captures what the
// framebuffer holds; a wrong password gets nothing.
func TestVNCSnapshot(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("vncsnapshot")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("vncsnapshot is missing (scripts/test-deps.sh installs it)")
		}
		t.Skip("vncsnapshot is not installed (apt-get install vncsnapshot)")
	}
	s, addr := serve(t, 160, 120, rfb.Options{Password: "vncpw1"})
	quad := []color.RGBA{{0xe0, 0x20, 0x20, 0xff}, {0x20, 0xe0, 0x20, 0xff}, {0x20, 0x20, 0xe0, 0xff}, {0xf0, 0xf0, 0xf0, 0xff}}
	for i, c := range quad {
		x, y := (i%2)*80, (i/2)*60
		s.Update(solid(image.Rect(x, y, x+80, y+60), c))
	}
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	display := "127.0.0.1:" + strconv.Itoa(p-5900)
	snap := func(passwd string) (string, error) {
		out := filepath.Join(t.TempDir(), "snap.jpg")
		cmd := exec.Command(bin, "-quiet", "-passwd", passwd, "-encodings", "raw", "-nocursor", "-quality", "100", display, out)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("vncsnapshot: %s", b)
		}
		return out, err
	}
	if _, err := snap(vncPasswdFile(t, "wrong")); err == nil {
		t.Error("vncsnapshot with a wrong password succeeded")
	}
	out, err := snap(vncPasswdFile(t, "vncpw1"))
	if err != nil {
		t.Fatalf("vncsnapshot: %v", err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := jpeg.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 160 || img.Bounds().Dy() != 120 {
		t.Fatalf("snapshot %v, want 160×120", img.Bounds())
	}
	// JPEG blurs the edges between the quadrants; their middles match.
	for i, want := range quad {
		x, y := (i%2)*80+40, (i/2)*60+30
		r, g, b, _ := img.At(x, y).RGBA()
		for k, pair := range [][2]int{{int(r >> 8), int(want.R)}, {int(g >> 8), int(want.G)}, {int(b >> 8), int(want.B)}} {
			if d := pair[0] - pair[1]; d > 12 || d < -12 {
				t.Errorf("quadrant %d channel %d: %d, want %d", i, k, pair[0], pair[1])
			}
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/desktop"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/rfb/rfbtest"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// serveSessionRemote claims session id and serves it with a real remote in
// this process until the test ends; desk gives it a desktop.
func serveSessionRemote(t *testing.T, c *client.Client, id, work string, desk *remote.DesktopOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	claim, err := c.Queue.Claim(ctx, id, "m-"+id)
	if err != nil {
		cancel()
		t.Fatalf("claim %s: %v", id, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- remote.Serve(ctx, remote.Options{GatewayURL: claim.Status.GatewayURL, ConnectToken: claim.Status.ConnectToken,
			SessionID: id, StateDir: t.TempDir(), WorkDir: work, Logger: slog.New(slog.DiscardHandler),
			Capabilities: &api.Capabilities{OS: "test", Tools: api.ToolNames()}, Desktop: desk})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("remote: %v", err)
		}
	})
}

// desktopCmd is `outpost sessions desktop` running in this process.
type desktopCmd struct {
	ann    desktopAnnounce
	errOut *syncBuffer
	stop   context.CancelFunc
	code   chan int
}

type syncBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.String()
}

// startDesktopCmd runs the command with args and waits for the address it
// prints (-o json).
func startDesktopCmd(t *testing.T, env map[string]string, args ...string) *desktopCmd {
	t.Helper()
	return startDesktopCmdOut(t, env, true, args...)
}

// startDesktopCmdOut runs the command, with -o json when asJSON, and reads
// what it announces.
func startDesktopCmdOut(t *testing.T, env map[string]string, asJSON bool, args ...string) *desktopCmd {
	t.Helper()
	tf := newTestFactory(t, env)
	pr, pw := io.Pipe()
	d := &desktopCmd{errOut: newSyncBuffer(), code: make(chan int, 1)}
	tf.IO.Out, tf.IO.ErrOut = pw, d.errOut
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	d.stop = cancel
	if asJSON {
		args = append([]string{"-o", "json"}, args...)
	}
	go func() {
		code := Main(ctx, append([]string{"sessions", "desktop"}, args...), tf.Factory)
		pw.Close()
		d.code <- code
	}()
	var err error
	if asJSON {
		err = json.NewDecoder(pr).Decode(&d.ann)
	} else {
		err = readHumanAnnounce(pr, &d.ann)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err != nil {
		cancel()
		t.Fatalf("sessions desktop printed no address (exit %d): %v; stderr: %s", <-d.code, err, d.errOut)
	}
	t.Cleanup(cancel)
	return d
}

// readHumanAnnounce reads the command's human output up to the line that
// says how to connect.
func readHumanAnnounce(r io.Reader, ann *desktopAnnounce) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if pw, ok := strings.CutPrefix(line, "VNC password: "); ok {
			ann.Password = pw
		}
		if strings.Contains(line, "in control") {
			ann.Control = true
		}
		if hp, ok := strings.CutPrefix(line, "Connect with: vncviewer "); ok {
			host, port, ok := strings.Cut(hp, "::")
			if !ok {
				return fmt.Errorf("no HOST::PORT in %q", line)
			}
			ann.Address = host + ":" + port
			return nil
		}
	}
	return fmt.Errorf("no 'Connect with' line: %v", sc.Err())
}

// end stops the command as Ctrl-C does and returns its exit status.
func (d *desktopCmd) end(t *testing.T) int {
	t.Helper()
	d.stop()
	select {
	case c := <-d.code:
		return c
	case <-time.After(15 * time.Second):
		t.Fatal("sessions desktop did not stop")
		return -1
	}
}

// computerShot returns the image of the n-th computer call's result
// (from 1), once it arrived.
func computerShot(t *testing.T, c *client.Client, id string, n int) *image.RGBA {
	t.Helper()
	var img *image.RGBA
	waitfor.Within(t, 30*time.Second, "the computer call's result", func() bool {
		l, err := c.Sessions.Events(t.Context(), id, 0, 1000)
		if err != nil {
			return false
		}
		i := 0
		seq := int64(-1)
		for _, e := range l.Items {
			if e.Type == api.EventCall && e.Tool == api.ToolComputer {
				if i++; i == n {
					seq = e.CallSeq
				}
			}
			if e.Type == api.EventResult && e.CallSeq == seq {
				var cr api.ComputerResult
				if err := json.Unmarshal(e.Value, &cr); err != nil || cr.Image == nil {
					t.Fatalf("computer result %s: %v", e.Value, err)
				}
				raw, _ := base64.StdEncoding.DecodeString(cr.Image.Data)
				p, err := png.Decode(bytes.NewReader(raw))
				if err != nil {
					t.Fatal(err)
				}
				img = image.NewRGBA(p.Bounds())
				draw.Draw(img, img.Rect, p, p.Bounds().Min, draw.Src)
				return true
			}
		}
		return false
	})
	return img
}

// differ counts the pixels of two same-sized images whose colours differ
// by more than a little in any channel.
func differ(a, b *image.RGBA) int {
	if a.Rect != b.Rect {
		return a.Rect.Dx() * a.Rect.Dy()
	}
	n := 0
	for i := 0; i < len(a.Pix); i += 4 {
		for k := range 3 {
			if d := int(a.Pix[i+k]) - int(b.Pix[i+k]); d > 8 || d < -8 {
				n++
				break
			}
		}
	}
	return n
}

// sub returns the part r of img, at the origin, so two images' parts
// compare.
func sub(img *image.RGBA, r image.Rectangle) *image.RGBA {
	out := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	draw.Draw(out, out.Rect, img, r.Min, draw.Src)
	return out
}

// syncTo reads updates until the client's framebuffer is within tol
// differing pixels of want.
func syncTo(t *testing.T, v *rfbtest.Client, want *image.RGBA, tol int, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for differ(v.FB, want) > tol {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the VNC framebuffer differs from the screenshot in %d pixels", what, differ(v.FB, want))
		}
		if err := v.Request(true); err != nil {
			t.Fatal(err)
		}
		if _, err := v.ReadUpdate(time.Until(deadline)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// settle waits until the VNC server has nothing more to send: syncTo
// stops within a tolerance, so an update of the last few pixels may still
// be on its way, and would be taken for the effect of what comes next.
func settle(t *testing.T, v *rfbtest.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := v.Request(true); err != nil {
			t.Fatal(err)
		}
		_, err := v.ReadUpdate(500 * time.Millisecond)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the screen still changed 10 s after the VNC client caught up with it")
}

func desktopActions(t *testing.T, c *client.Client, id string) []string {
	t.Helper()
	l, err := c.Sessions.Events(t.Context(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		if e.Type == api.EventDesktop {
			out = append(out, e.Action)
		}
	}
	return out
}

// TestSessionsDesktopVNC: `outpost sessions desktop` serves a real
// session's Xvfb desktop to a VNC client on a loopback port: the client's
// framebuffer matches the computer tool's screenshot; a wrong password is
// refused; without --control keys change nothing and nothing lands on the
// transcript; with --control a typed key reaches an xterm and a
// take_control/hand_back pair lands on the transcript.
func TestSessionsDesktopVNC(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"xterm", "xwininfo", "setsid"} {
		if _, err := exec.LookPath(bin); err != nil || desktop.XvfbPath() == "" {
			if os.Getenv("CI") != "" {
				t.Fatalf("Xvfb or %s is missing (scripts/test-deps.sh installs them)", bin)
			}
			t.Skipf("Xvfb or %s is not installed", bin)
		}
	}
	srv := servertest.Start(t, server.Options{})
	c := srv.Client
	if _, err := c.Outposts.Create(t.Context(), api.CreateOutpostRequest{Name: "vnc"}); err != nil {
		t.Fatal(err)
	}
	step := func(tool string, args any) api.Step {
		b, _ := json.Marshal(args)
		return api.Step{Tool: tool, Args: b}
	}
	shot := step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerScreenshot})
	waitFile := func(name string) api.Step {
		return step(api.ToolExec, api.ExecArgs{Command: "for i in $(seq 1200); do [ -f " + name + " ] && exit 0; sleep 0.05; done; exit 1"})
	}
	const mapped = `for i in $(seq 200); do xwininfo -name vncterm 2>/dev/null | grep -q IsViewable && exit 0; sleep 0.05; done; exit 1`
	s, err := c.Sessions.Create(t.Context(), api.CreateSessionRequest{Outpost: "vnc", Desktop: &api.DesktopSize{Width: 640, Height: 480},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			shot, // 1: starts the desktop
			step(api.ToolExec, api.ExecArgs{Command: `setsid xterm -T vncterm -geometry 60x10+0+0 -bg black -fg white +bc -e sh -c 'stty -echo -icanon; cat' >/dev/null 2>&1 & ` + mapped}),
			waitFile("go1"),
			shot, // 2: what the VNC client sees
			waitFile("go2"),
			shot, // 3: after the VNC client typed
			waitFile("go3"),
		}}})
	if err != nil {
		t.Fatal(err)
	}
	id, work := s.Metadata.SessionID, t.TempDir()
	serveSessionRemote(t, c, id, work, &remote.DesktopOptions{WindowManager: "none"})
	computerShot(t, c, id, 1)

	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("pa55word\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{api.EnvServer.Name: srv.URL(), api.EnvToken.Name: srv.AdminToken()}

	// View only.
	cmd := startDesktopCmd(t, env, id, "--password-file", pwFile)
	if cmd.ann.Password != "pa55word" || cmd.ann.Control || !strings.HasPrefix(cmd.ann.Address, "127.0.0.1:") {
		t.Fatalf("announced %+v", cmd.ann)
	}
	if _, err := rfbtest.Dial(cmd.ann.Address, "wrong", 5*time.Second); !errors.Is(err, rfbtest.ErrAuth) {
		t.Fatalf("a wrong password: %v, want refused", err)
	}
	v, err := rfbtest.Dial(cmd.ann.Address, "pa55word", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.FB.Rect.Dx() != 640 || v.FB.Rect.Dy() != 480 {
		t.Fatalf("framebuffer %v, want 640×480", v.FB.Rect)
	}
	if err := v.Request(false); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ReadUpdate(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	touch(t, work, "go1")
	before := computerShot(t, c, id, 2)
	syncTo(t, v, before, 640*480/100, "view only")
	settle(t, v)
	// Keys and a click from a view-only client reach nothing: no update
	// follows and the transcript records no takeover.
	_ = v.Pointer(1, 40, 40)
	_ = v.Pointer(0, 40, 40)
	for _, k := range []uint32{'z', 'z', 'z'} {
		_ = v.Key(true, k)
		_ = v.Key(false, k)
	}
	if err := v.Request(true); err != nil {
		t.Fatal(err)
	}
	if u, err := v.ReadUpdate(1500 * time.Millisecond); err == nil {
		t.Errorf("view-only input changed the screen: %+v", u)
	}
	v.Close()
	if code := cmd.end(t); code != exitOK {
		t.Errorf("view-only command exited %d; stderr: %s", code, cmd.errOut)
	}
	if acts := desktopActions(t, c, id); len(acts) != 0 {
		t.Errorf("view-only desktop events %v", acts)
	}

	// In control.
	cmd = startDesktopCmd(t, env, id, "--control")
	if !cmd.ann.Control || len(cmd.ann.Password) != vncPasswordLen {
		t.Fatalf("announced %+v", cmd.ann)
	}
	v, err = rfbtest.Dial(cmd.ann.Address, cmd.ann.Password, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.Request(false); err != nil {
		t.Fatal(err)
	}
	syncTo(t, v, before, 640*480/100, "in control")
	// Without a window manager, keys go to the window under the pointer.
	if err := v.Pointer(0, 100, 60); err != nil {
		t.Fatal(err)
	}
	for _, k := range []uint32{'X', 'X', 'X', 'X'} {
		_ = v.Key(true, k)
		_ = v.Key(false, k)
	}
	// The typed characters, not just the cursor that moving the pointer
	// in fills: the first line's third and fourth character cells.
	typed := image.Rect(12, 0, 24, 16)
	deadline := time.Now().Add(15 * time.Second)
	for differ(sub(v.FB, typed), sub(before, typed)) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the typed keys never showed in the VNC framebuffer")
		}
		_ = v.Request(true)
		if _, err := v.ReadUpdate(time.Until(deadline)); err != nil {
			t.Fatal(err)
		}
	}
	v.Close()
	if code := cmd.end(t); code != exitOK {
		t.Errorf("control command exited %d; stderr: %s", code, cmd.errOut)
	}
	waitfor.Within(t, 10*time.Second, "take_control and hand_back on the transcript", func() bool {
		return len(desktopActions(t, c, id)) == 2
	})
	if acts := desktopActions(t, c, id); acts[0] != api.DesktopTakeControl || acts[1] != api.DesktopHandBack {
		t.Errorf("desktop events %v", acts)
	}
	touch(t, work, "go2")
	after := computerShot(t, c, id, 3)
	if n := differ(sub(before, typed), sub(after, typed)); n < 10 {
		t.Errorf("the keys typed over VNC changed %d pixels of the screenshot", n)
	}

	// The session's end ends the command, with status 0.
	cmd = startDesktopCmdOut(t, env, false, id, "--no-password")
	if cmd.ann.Password != "" {
		t.Errorf("announced %+v with --no-password", cmd.ann)
	}
	v, err = rfbtest.Dial(cmd.ann.Address, "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	touch(t, work, "go3")
	select {
	case code := <-cmd.code:
		if code != exitOK || !strings.Contains(cmd.errOut.String(), "ended") {
			t.Errorf("after the session ended: exit %d; stderr: %s", code, cmd.errOut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("sessions desktop went on after the session ended")
	}
}

func touch(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSessionsDesktopErrors: a missing session, a session whose machine has
// no live desktop, a non-loopback address and a bad password file give
// clear errors.
func TestSessionsDesktopErrors(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, server.Options{})
	c := srv.Client
	if _, err := c.Outposts.Create(t.Context(), api.CreateOutpostRequest{Name: "nodesk"}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(api.ExecArgs{Command: "sleep 60"})
	s, err := c.Sessions.Create(t.Context(), api.CreateSessionRequest{Outpost: "nodesk",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: b}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.Metadata.SessionID
	env := map[string]string{api.EnvServer.Name: srv.URL(), api.EnvToken.Name: srv.AdminToken()}
	long := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(long, []byte("123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(wantCode int, wantErr string, args ...string) {
		t.Helper()
		tf := newTestFactory(t, env)
		if code := tf.run(t, append([]string{"sessions", "desktop"}, args...)...); code != wantCode || !strings.Contains(tf.errOut.String(), wantErr) {
			t.Errorf("%v: exit %d, %q; want %d and %q", args, code, tf.errOut, wantCode, wantErr)
		}
	}
	check(exitError, "Session ses_nosuch does not exist", "ses_nosuch")
	check(exitError, "No machine is connected", id)
	serveSessionRemote(t, c, id, t.TempDir(), nil)
	waitfor.Within(t, 10*time.Second, "the session to run", func() bool {
		s, err := c.Sessions.Get(t.Context(), id)
		return err == nil && s.Status.Status == api.StatusRunning
	})
	check(exitError, "has no live desktop", id)
	check(exitUsage, "not a loopback address", id, "--listen", "0.0.0.0:5901")
	check(exitUsage, "not a loopback address", id, "--listen", "example.com:5901")
	check(exitError, "1 to 8 bytes", id, "--password-file", long)
}

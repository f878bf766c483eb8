package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
)

const (
	testToken   = "connect-token"
	testSession = "sess-1"
	waitTimeout = 15 * time.Second
)

// testGateway is a minimal gateway: it checks the remote's headers and hands
// each accepted connection to the test.
type testGateway struct {
	t      *testing.T
	srv    *httptest.Server
	conns  chan *gwConn
	reject atomic.Int32 // HTTP status to refuse with; 0 accepts
	dials  atomic.Int32
	// snapshots, when set, serves api.SnapshotPath.
	snapshots http.Handler
}

func newTestGateway(t *testing.T) *testGateway { return newSnapshotGateway(t, nil) }

// newSnapshotGateway is a testGateway whose api.SnapshotPath is served by
// snapshots.
func newSnapshotGateway(t *testing.T, snapshots http.Handler) *testGateway {
	g := &testGateway{t: t, conns: make(chan *gwConn, 16), snapshots: snapshots}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serveHTTP))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *testGateway) url() string {
	return "ws" + strings.TrimPrefix(g.srv.URL, "http") + api.GatewayPath
}

func (g *testGateway) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == api.SnapshotPath && g.snapshots != nil {
		g.snapshots.ServeHTTP(w, r)
		return
	}
	g.dials.Add(1)
	if code := int(g.reject.Load()); code != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: api.CodeUnauthorized, Message: "connect token revoked"}})
		return
	}
	if r.URL.Path != api.GatewayPath || r.Header.Get("Authorization") != "Bearer "+testToken || r.Header.Get(api.HeaderSessionID) != testSession {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(maxFrameBytes)
	gc := &gwConn{c: c, frames: make(chan api.Frame, 256), out: map[streamKey]string{}, outc: make(chan struct{}, 1), closed: make(chan struct{})}
	go gc.readLoop()
	g.conns <- gc
	<-gc.closed
}

// accept waits for the next connection.
func (g *testGateway) accept(t *testing.T) *gwConn {
	t.Helper()
	select {
	case gc := <-g.conns:
		return gc
	case <-time.After(waitTimeout):
		t.Fatal("the remote did not connect")
		return nil
	}
}

// gwConn is one remote connection seen from the gateway.
type gwConn struct {
	c      *websocket.Conn
	frames chan api.Frame
	closed chan struct{}

	mu   sync.Mutex
	out  map[streamKey]string // output received, by call and stream
	outc chan struct{}        // signalled on new output
}

func (gc *gwConn) readLoop() {
	defer close(gc.closed)
	for {
		typ, b, err := gc.c.Read(context.Background())
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			o, err := api.ParseOutputFrame(b)
			if err != nil {
				return
			}
			gc.mu.Lock()
			gc.out[streamKey{o.Seq, o.Stream}] += string(o.Data)
			gc.mu.Unlock()
			select {
			case gc.outc <- struct{}{}:
			default:
			}
			continue
		}
		var f api.Frame
		if err := json.Unmarshal(b, &f); err != nil {
			return
		}
		gc.frames <- f
	}
}

func (gc *gwConn) send(t *testing.T, f api.Frame) {
	t.Helper()
	if f.V == 0 {
		f.V = int(api.CurrentProtocolVersion)
	}
	b, _ := json.Marshal(f)
	if err := gc.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatalf("send %s: %v", f.Type, err)
	}
}

// next returns the next JSON frame, which must be of type typ.
func (gc *gwConn) next(t *testing.T, typ string) api.Frame {
	t.Helper()
	select {
	case f := <-gc.frames:
		if f.Type != typ {
			t.Fatalf("got a %q frame %+v, want %q", f.Type, f, typ)
		}
		if f.V != int(api.CurrentProtocolVersion) {
			t.Fatalf("frame v = %d", f.V)
		}
		return f
	case <-gc.closed:
		if len(gc.frames) > 0 {
			return gc.next(t, typ)
		}
		t.Fatalf("connection closed while waiting for %q", typ)
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %q", typ)
	}
	return api.Frame{}
}

// handshake reads hello and answers welcome.
func (gc *gwConn) handshake(t *testing.T, env, secrets map[string]string) api.Frame {
	t.Helper()
	hello := gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{Type: api.FrameWelcome, Env: env, Secrets: secrets})
	return hello
}

// output returns the output of seq on stream received so far.
func (gc *gwConn) output(seq int64, stream string) string {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return gc.out[streamKey{seq, stream}]
}

// waitOutput waits until the output of seq on stream contains want.
func (gc *gwConn) waitOutput(t *testing.T, seq int64, stream, want string) string {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		if got := gc.output(seq, stream); strings.Contains(got, want) {
			return got
		}
		select {
		case <-gc.outc:
		case <-deadline:
			t.Fatalf("output of %d never showed %q; got %q", seq, want, gc.output(seq, stream))
		}
	}
}

// startServe runs Serve in the background; the returned channel yields its
// error.
func startServe(t *testing.T, g *testGateway, stateDir, workDir string) (<-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan struct{})
	caps := api.Capabilities{OS: "test", Tools: []string{api.ToolExec}}
	go func() {
		defer close(done)
		errc <- Serve(ctx, Options{
			GatewayURL:   g.url(),
			ConnectToken: testToken,
			SessionID:    testSession,
			StateDir:     stateDir,
			WorkDir:      workDir,
			Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Capabilities: &caps,
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return errc, cancel
}

func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("Serve did not return")
		return nil
	}
}

func execCall(seq int64, command string) api.Frame {
	return api.Frame{Type: api.FrameCall, Seq: seq, Tool: api.ToolExec, Args: mustJSON(api.ExecArgs{Command: command})}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestServeRoundTrip(t *testing.T) {
	g := newTestGateway(t)
	state, work := t.TempDir(), t.TempDir()
	errc, _ := startServe(t, g, state, work)
	gc := g.accept(t)
	hello := gc.handshake(t, map[string]string{"MY_ENV": "plain"}, map[string]string{"API_KEY": "sk-live-123456"})
	if hello.SessionID != testSession || hello.Capabilities == nil || hello.Capabilities.OS != "test" || len(hello.Executed)+len(hello.Running) != 0 {
		t.Fatalf("hello = %+v", hello)
	}

	gc.send(t, execCall(1, `echo "$MY_ENV"; printf 'key=%s\n' "$API_KEY"; echo "$API_KEY" >&2; exit 2`))
	res := gc.next(t, api.FrameResult)
	if res.Seq != 1 || res.OK || res.Error != "exit code 2" {
		t.Fatalf("result = %+v", res)
	}
	var er api.ExecResult
	if err := json.Unmarshal(res.Value, &er); err != nil {
		t.Fatal(err)
	}
	if er.ExitCode != 2 || !strings.Contains(er.Tail, "key=[REDACTED:API_KEY]") {
		t.Errorf("exec result = %+v", er)
	}
	// Output precedes its result, so all of it is here.
	out, stderr := gc.output(1, api.StreamStdout), gc.output(1, api.StreamStderr)
	if out != "plain\nkey=[REDACTED:API_KEY]\n" || stderr != "[REDACTED:API_KEY]\n" || strings.Contains(string(res.Value), "sk-live") {
		t.Errorf("stdout = %q, stderr = %q, value = %s", out, stderr, res.Value)
	}

	// A file tool, then an unknown tool.
	gc.send(t, api.Frame{Type: api.FrameCall, Seq: 2, Tool: api.ToolWriteFile, Args: mustJSON(api.WriteFileArgs{Path: "x.txt", Content: "sk-live-123456"})})
	if res := gc.next(t, api.FrameResult); res.Seq != 2 || !res.OK {
		t.Fatalf("write_file result = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameCall, Seq: 3, Tool: api.ToolReadFile, Args: mustJSON(api.ReadFileArgs{Path: "x.txt"})})
	if res := gc.next(t, api.FrameResult); !res.OK || !strings.Contains(string(res.Value), "[REDACTED:API_KEY]") || strings.Contains(string(res.Value), "sk-live") {
		t.Fatalf("read_file result = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameCall, Seq: 4, Tool: "nope"})
	if res := gc.next(t, api.FrameResult); res.OK || !strings.Contains(res.Error, "unknown tool") {
		t.Fatalf("unknown tool result = %+v", res)
	}

	for seq := int64(1); seq <= 4; seq++ {
		gc.send(t, api.Frame{Type: api.FrameAck, Seq: seq})
	}
	gc.send(t, api.Frame{Type: api.FrameEnd, Reason: "done"})
	if err := waitErr(t, errc); err != nil {
		t.Fatalf("Serve = %v, want nil after end", err)
	}
	// Reopened, the journal holds nothing to resend and remembers the acks.
	j, err := openJournal(state)
	if err != nil {
		t.Fatal(err)
	}
	st, err := j.load()
	if err != nil || len(st.Done) != 0 || len(st.Interrupted) != 0 || !j.isAcked(4) {
		t.Fatalf("journal after acks: %+v, %v, acked(4)=%v", st, err, j.isAcked(4))
	}
	j.close()
}

func TestServeReconnectsMidCall(t *testing.T) {
	g := newTestGateway(t)
	state, work := t.TempDir(), t.TempDir()
	errc, _ := startServe(t, g, state, work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)

	gc.send(t, execCall(1, `echo run >> ran; echo started; while [ ! -f release ]; do sleep 0.02; done; echo finished`))
	gc.waitOutput(t, 1, api.StreamStdout, "started")
	gc.c.CloseNow() // the gateway drops the remote mid-call

	gc2 := g.accept(t)
	hello := gc2.handshake(t, nil, nil)
	if len(hello.Running) != 1 || hello.Running[0] != 1 || len(hello.Executed) != 0 || hello.LastSeq != 1 {
		t.Fatalf("hello after reconnect = %+v, want call 1 running", hello)
	}
	gc2.send(t, execCall(1, `echo run >> ran`)) // a duplicate call is ignored while it runs
	if err := os.WriteFile(filepath.Join(work, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gc2.waitOutput(t, 1, api.StreamStdout, "finished")
	res := gc2.next(t, api.FrameResult)
	if res.Seq != 1 || !res.OK {
		t.Fatalf("result = %+v", res)
	}
	gc2.send(t, api.Frame{Type: api.FrameAck, Seq: 1})
	gc2.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-gc2.frames:
		t.Errorf("extra frame after the result: %+v", f)
	default:
	}
	if n := countLines(t, filepath.Join(work, "ran")); n != 1 {
		t.Errorf("the command ran %d times", n)
	}
}

func TestServeResendsJournaledResultAfterRestart(t *testing.T) {
	g := newTestGateway(t)
	state, work := t.TempDir(), t.TempDir()
	errc, cancel := startServe(t, g, state, work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, execCall(7, `echo run >> ran; echo hi`))
	first := gc.next(t, api.FrameResult)
	if !first.OK {
		t.Fatalf("result = %+v", first)
	}
	cancel() // the remote stops before the ack
	if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve = %v", err)
	}

	errc, _ = startServe(t, g, state, work)
	gc = g.accept(t)
	hello := gc.next(t, api.FrameHello)
	if len(hello.Executed) != 1 || hello.Executed[0] != 7 || hello.LastSeq != 7 {
		t.Fatalf("hello = %+v, want 7 executed", hello)
	}
	again := gc.next(t, api.FrameResult) // resent right after hello
	if again.Seq != 7 || string(again.Value) != string(first.Value) {
		t.Fatalf("resent %+v, want %+v", again, first)
	}
	gc.send(t, api.Frame{Type: api.FrameWelcome})
	gc.send(t, execCall(7, `echo run >> ran; echo hi`)) // the control plane asks again
	if res := gc.next(t, api.FrameResult); res.Seq != 7 || string(res.Value) != string(first.Value) {
		t.Fatalf("answer to a repeated call = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 7})
	gc.send(t, execCall(7, `echo run >> ran`)) // acked: ignored
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
	if n := countLines(t, filepath.Join(work, "ran")); n != 1 {
		t.Errorf("the command ran %d times", n)
	}
}

func TestServeAnswersCallInterruptedByRestart(t *testing.T) {
	state, work := t.TempDir(), t.TempDir()
	j, err := openJournal(state)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.load(); err != nil {
		t.Fatal(err)
	}
	if err := j.started(startedRecord{Seq: 3, Tool: api.ToolExec}); err != nil {
		t.Fatal(err)
	}
	j.close()
	g := newTestGateway(t)
	errc, _ := startServe(t, g, state, work)
	gc := g.accept(t)
	hello := gc.next(t, api.FrameHello)
	if len(hello.Executed) != 1 || hello.Executed[0] != 3 || len(hello.Running) != 0 {
		t.Fatalf("hello = %+v", hello)
	}
	res := gc.next(t, api.FrameResult)
	if res.Seq != 3 || res.OK || res.Error != restartedError {
		t.Fatalf("result = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameWelcome})
	gc.send(t, api.Frame{Type: api.FrameCall, Seq: 3, Tool: api.ToolExec, Args: mustJSON(api.ExecArgs{Command: "true"})})
	if res := gc.next(t, api.FrameResult); res.Seq != 3 || res.Error != restartedError {
		t.Fatalf("answer to the repeated call = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

func TestServeCancel(t *testing.T) {
	g := newTestGateway(t)
	errc, _ := startServe(t, g, t.TempDir(), t.TempDir())
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, execCall(1, `echo started; sleep 30`))
	gc.waitOutput(t, 1, api.StreamStdout, "started")
	gc.send(t, api.Frame{Type: api.FrameCancel, Seq: 1})
	if res := gc.next(t, api.FrameResult); res.OK || res.Error != "cancelled" {
		t.Fatalf("result = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

func TestServeRejected(t *testing.T) {
	g := newTestGateway(t)
	g.reject.Store(http.StatusUnauthorized)
	errc, _ := startServe(t, g, t.TempDir(), t.TempDir())
	err := waitErr(t, errc)
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "connect token revoked") {
		t.Fatalf("Serve = %v, want ErrRejected with the server's message", err)
	}
	if n := g.dials.Load(); n != maxRejections {
		t.Errorf("dialed %d times, want %d", n, maxRejections)
	}
}

func TestServeVersionMismatch(t *testing.T) {
	g := newTestGateway(t)
	errc, _ := startServe(t, g, t.TempDir(), t.TempDir())
	gc := g.accept(t)
	gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{V: int(api.CurrentProtocolVersion) + 1, Type: api.FrameWelcome})
	err := waitErr(t, errc)
	if !errors.Is(err, ErrVersion) || errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("Serve = %v, want ErrVersion, not ErrRejected", err)
	}
	if f := gc.next(t, api.FrameError); !strings.Contains(f.Reason, "version") {
		t.Errorf("error frame = %+v", f)
	}
}

// TestServeRefusedVersion: a gateway that does not accept the remote's
// protocol version answers hello with an error frame of its own version;
// the remote gives up at once (no retries) with ErrVersion — not
// ErrRejected, since no other remote serves the session — and a message
// naming the gateway's range and its own.
func TestServeRefusedVersion(t *testing.T) {
	g := newTestGateway(t)
	errc, _ := startServe(t, g, t.TempDir(), t.TempDir())
	gc := g.accept(t)
	gc.next(t, api.FrameHello)
	reason := "the remote speaks gateway protocol version 2 and this server accepts gateway protocol versions 7 to 9: upgrade the remote"
	gc.send(t, api.Frame{V: 9, Type: api.FrameError, Reason: reason})
	err := waitErr(t, errc)
	if errors.Is(err, ErrRejected) || !errors.Is(err, ErrVersion) {
		t.Fatalf("Serve = %v, want ErrVersion and not ErrRejected", err)
	}
	want := fmt.Sprintf("its build speaks %d to %d", api.MinProtocolVersion, api.CurrentProtocolVersion)
	if !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q names neither the gateway's reason nor %q", err, want)
	}
	if n := g.dials.Load(); n != 1 {
		t.Errorf("dialed %d times; a version refusal is final", n)
	}
}

// TestServeDowngradesToAnOlderGateway: a gateway of an older version the
// remote also speaks refuses its hello with an error frame of that version,
// as a server of the previous release does; the remote reconnects at once
// speaking it, and is served.
func TestServeDowngradesToAnOlderGateway(t *testing.T) {
	old := int(api.CurrentProtocolVersion - 1)
	g := newTestGateway(t)
	errc, _ := startServe(t, g, t.TempDir(), t.TempDir())
	gc := g.accept(t)
	gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{V: old, Type: api.FrameError, Reason: "gateway protocol version 2 is not supported; this server speaks version 1"})
	gc2 := g.accept(t)
	hello := <-gc2.frames
	if hello.Type != api.FrameHello || hello.V != old {
		t.Fatalf("hello after the refusal = %+v, want version %d", hello, old)
	}
	gc2.send(t, api.Frame{V: old, Type: api.FrameWelcome})
	gc2.send(t, api.Frame{V: old, Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatalf("Serve = %v, want the session served in version %d", err, old)
	}
}

// TestServeSpeaksOlderVersion: with Options.ProtocolVersion the remote
// speaks an older version in every frame it sends, and refuses frames of
// the current one.
func TestServeSpeaksOlderVersion(t *testing.T) {
	old := api.CurrentProtocolVersion - 1
	g := newTestGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, Options{GatewayURL: g.url(), ConnectToken: testToken, SessionID: testSession,
			StateDir: t.TempDir(), WorkDir: t.TempDir(), ProtocolVersion: old,
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Capabilities: &api.Capabilities{}})
	}()
	gc := g.accept(t)
	hello := <-gc.frames
	if hello.Type != api.FrameHello || hello.V != int(old) {
		t.Fatalf("hello = %+v, want version %d", hello, old)
	}
	gc.send(t, api.Frame{V: int(old), Type: api.FrameWelcome})
	gc.send(t, api.Frame{V: int(old), Type: api.FrameCall, Seq: 1, Tool: api.ToolExec, Args: mustJSON(api.ExecArgs{Command: "true"})})
	if res := <-gc.frames; res.Type != api.FrameResult || res.V != int(old) || !res.OK {
		t.Fatalf("result = %+v, want an ok result of version %d", res, old)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1}) // the current version: refused
	err := waitErr(t, errc)
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("Serve = %v, want ErrVersion", err)
	}
	if _, err := (Options{GatewayURL: g.url(), ConnectToken: "x", SessionID: "s", StateDir: t.TempDir(), WorkDir: t.TempDir(),
		ProtocolVersion: api.CurrentProtocolVersion + 1}).withDefaults(); err == nil {
		t.Error("options accept a protocol version newer than the remote's")
	}
}

func TestOptionsFromEnvCAFile(t *testing.T) {
	env := map[string]string{
		"OUTPOST_GATEWAY_URL": "ws://127.0.0.1:7420/v1/gateway", "OUTPOST_CONNECT_TOKEN": "tok",
		"OUTPOST_SESSION_ID": "s1", "OUTPOST_STATE_DIR": t.TempDir(),
	}
	getenv := func(k string) string { return env[k] }
	getwd := func() (string, error) { return "/work", nil }
	o, err := optionsFromEnv(getenv, getwd)
	if err != nil {
		t.Fatal(err)
	}
	if o.HTTPClient != nil {
		t.Errorf("an HTTP client without %s", EnvCAFile)
	}
	// A CA file: an HTTP client trusting it.
	ca := tlstest.NewCA(t, "remote test CA")
	env[EnvCAFile] = ca.WriteCA(t, t.TempDir(), "ca.pem")
	if o, err = optionsFromEnv(getenv, getwd); err != nil || o.HTTPClient == nil {
		t.Fatalf("with %s: %+v %v", EnvCAFile, o, err)
	}
	if tr, ok := o.HTTPClient.Transport.(*http.Transport); !ok || tr.TLSClientConfig == nil || tr.TLSClientConfig.RootCAs == nil {
		t.Errorf("the client does not trust the CA file: %+v", o.HTTPClient.Transport)
	}
	env[EnvCAFile] = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := optionsFromEnv(getenv, getwd); err == nil || !strings.Contains(err.Error(), EnvCAFile) || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("a missing CA file: %v", err)
	}
}

// TestServeGivesUpWhenUnreachable: a gateway that never answers (here a
// closed port) makes Serve return ErrUnreachable once GiveUpAfter has passed
// on its clock, waiting between attempts on that clock, so the claim can
// lapse and the session move on.
func TestServeGivesUpWhenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := clockwork.NewFakeClock()
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, Options{
			GatewayURL: "ws://" + addr + "/v1/gateway", ConnectToken: "opc_x", SessionID: "ses_x",
			StateDir: t.TempDir(), WorkDir: t.TempDir(), GiveUpAfter: time.Minute, Clock: clk,
			Capabilities: &api.Capabilities{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
	}()
	// The first dial fails; Serve waits its backoff on the clock.
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("Serve never waited on its clock: %v", err)
	}
	select {
	case err := <-errc:
		t.Fatalf("Serve returned %v before GiveUpAfter passed", err)
	default:
	}
	clk.Advance(time.Minute + time.Second)
	select {
	case err := <-errc:
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("Serve = %v, want ErrUnreachable", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not give up after GiveUpAfter")
	}
}

// sessionGoroutines lists the goroutines running the remote's connection or
// calls: what Serve must have waited for before it returns.
func sessionGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"remote.startDial", "(*session).writeLoop", "remote.pingLoop", "(*session).handleCall", "(*session).startRestore", "(*session).handleSuspend", "(*session).connect",
			"(*shell).readLoop", "(*shell).waitLoop"} {
			if strings.Contains(g, fn) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// TestServeWaitsForItsGoroutines: when Serve returns — after a reconnect
// while a call ran, and the end of the session — the goroutines of every
// connection (writer, pinger), of every call and of every shell have ended.
// It checks at once, without polling: their owners waited for them.
func TestServeWaitsForItsGoroutines(t *testing.T) {
	g := newTestGateway(t)
	work := t.TempDir()
	errc, _ := startServe(t, g, t.TempDir(), work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	if runtime.GOOS != "windows" { // a persistent shell, left for Serve to end
		gc.send(t, api.Frame{Type: api.FrameCall, Seq: 2, Tool: api.ToolShellStart, Args: mustJSON(api.ShellStartArgs{Name: "left"})})
		if res := gc.next(t, api.FrameResult); res.Seq != 2 || !res.OK {
			t.Fatalf("shell_start result = %+v", res)
		}
		gc.send(t, api.Frame{Type: api.FrameAck, Seq: 2})
	}
	gc.send(t, execCall(1, `echo started; while [ ! -f release ]; do sleep 0.02; done`))
	gc.waitOutput(t, 1, api.StreamStdout, "started")
	if len(sessionGoroutines()) == 0 {
		t.Fatal("no connection or call goroutine while a call runs: the check would see nothing")
	}
	gc.c.CloseNow()
	gc2 := g.accept(t)
	gc2.handshake(t, nil, nil)
	if err := os.WriteFile(filepath.Join(work, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := gc2.next(t, api.FrameResult); res.Seq != 1 || !res.OK {
		t.Fatalf("result = %+v", res)
	}
	gc2.send(t, api.Frame{Type: api.FrameAck, Seq: 1})
	gc2.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
	if left := sessionGoroutines(); len(left) > 0 {
		t.Fatalf("Serve returned with %d of its goroutines running:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// TestEarlyDial: the dial a remote starts before its session's files are
// open hands its connection to the first connect; discarded, it closes a
// connection it made and gives up a dial still waiting on the gateway at
// once, not at the handshake's timeout.
func TestEarlyDial(t *testing.T) {
	g := newTestGateway(t)
	opts := func(url string) Options {
		t.Helper()
		o, err := Options{GatewayURL: url, ConnectToken: testToken, SessionID: testSession, StateDir: t.TempDir(), WorkDir: t.TempDir()}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	d := startDial(t.Context(), opts(g.url()))
	gc := g.accept(t)
	if _, err := d.wait(); err != nil {
		t.Fatal(err)
	}
	d.discard()
	select {
	case <-gc.closed:
	case <-time.After(waitTimeout):
		t.Fatal("a discarded early dial left its connection open")
	}

	// A gateway that takes the request and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	held := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			held <- c
		}
	}()
	d = startDial(t.Context(), opts("ws://"+ln.Addr().String()+api.GatewayPath))
	select {
	case c := <-held:
		t.Cleanup(func() { c.Close() })
	case <-time.After(waitTimeout):
		t.Fatal("the early dial never reached the gateway")
	}
	start := time.Now()
	d.discard()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("discarding a dial the gateway does not answer took %s", took)
	}
	if _, err := d.wait(); err == nil {
		t.Fatal("a discarded dial the gateway never answered has no error")
	}
}

// TestServeSessionCannotOpen: a remote whose session's files cannot be
// opened fails with why, with none of its goroutines running, the early
// dial's included (its connection, when it made one before the failure,
// closed; TestEarlyDial checks that part without the race).
func TestServeSessionCannotOpen(t *testing.T) {
	g := newTestGateway(t)
	notADir := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	errc, _ := startServe(t, g, notADir, t.TempDir())
	if err := waitErr(t, errc); err == nil || !strings.Contains(err.Error(), "journal") {
		t.Fatalf("Serve = %v, want the journal's error", err)
	}
	if left := sessionGoroutines(); len(left) > 0 {
		t.Fatalf("Serve returned with %d of its goroutines running:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	// A connection the dial made before it was discarded is closed.
	for {
		select {
		case gc := <-g.conns:
			select {
			case <-gc.closed:
			case <-time.After(waitTimeout):
				t.Fatal("the remote left its gateway connection open")
			}
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
}

package fleetsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
)

// callProgram is argv[0] of every simulated call; argv[1] is the call's id.
const callProgram = "fleetsim-call"

// errEnded is returned by a connection when the gateway ended the session.
var errEnded = errors.New("the session ended")

// remote is one simulated remote: it speaks the gateway protocol as
// `outpost remote serve` does (hello with its instance, last seq, executed
// calls whose results are not acknowledged, resent after hello; results
// kept until acknowledged), runs nothing, counts each call it runs by the
// call's id and streams the configured output before each result.
type remote struct {
	sim      *sim
	id       string // session id
	gateway  string
	token    string
	instance string
	hc       *http.Client

	mu      sync.Mutex // guards the following
	lastSeq int64
	done    map[int64]bool      // every call run, by seq
	unacked map[int64]api.Frame // results not yet acknowledged
	welcome bool
}

func newRemote(s *sim, id, gateway, token string) *remote {
	return &remote{sim: s, id: id, gateway: gateway, token: token, instance: fmt.Sprintf("fleetsim-%016x", rand.Uint64()),
		hc: s.tr.pick(), done: map[int64]bool{}, unacked: map[int64]api.Frame{}}
}

// serve connects and reconnects until the gateway ends the session or ctx
// ends.
func (r *remote) serve(ctx context.Context) error {
	failures := 0
	for {
		err := r.connect(ctx)
		if errors.Is(err, errEnded) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, errPlannedDrop) {
			failures++
			r.sim.errs.add("gateway", err)
		} else {
			failures = 0
		}
		r.sim.reconnects.Add(1)
		if err := waitCtx(ctx, min(time.Duration(failures)*200*time.Millisecond, 5*time.Second)); err != nil {
			return err
		}
	}
}

// errPlannedDrop is the end of a connection the simulator dropped on
// purpose (Options.ReconnectEvery).
var errPlannedDrop = errors.New("connection dropped by the simulator")

func (r *remote) connect(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(dctx, r.gateway, &websocket.DialOptions{
		HTTPClient: r.hc,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + r.token}, api.HeaderSessionID: {r.id}},
	})
	if err != nil {
		return fmt.Errorf("dial the gateway: %w", err)
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	hello, resend := r.hello()
	if err := writeFrame(dctx, c, hello); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	for _, f := range resend {
		if err := writeFrame(dctx, c, f); err != nil {
			return fmt.Errorf("resend result %d: %w", f.Seq, err)
		}
	}
	f, err := readFrame(dctx, c)
	if err != nil {
		return fmt.Errorf("read welcome: %w", err)
	}
	switch f.Type {
	case api.FrameWelcome:
	case api.FrameEnd:
		c.Close(websocket.StatusNormalClosure, "session ended")
		return errEnded
	case api.FrameError:
		return fmt.Errorf("the gateway refused the remote: %s", f.Reason)
	default:
		return fmt.Errorf("the gateway sent %q before welcome", f.Type)
	}
	r.mu.Lock()
	first := !r.welcome
	r.welcome = true
	r.mu.Unlock()
	if first {
		r.sim.welcomed(r.id)
	}
	r.sim.connects.Add(1)

	cctx := ctx
	if every := r.sim.opts.ReconnectEvery; every > 0 {
		var stop context.CancelFunc
		cctx, stop = context.WithTimeoutCause(ctx, every/2+rand.N(every), errPlannedDrop)
		defer stop()
	}
	for {
		f, err := readFrame(cctx, c)
		if err != nil {
			if cause := context.Cause(cctx); errors.Is(cause, errPlannedDrop) && ctx.Err() == nil {
				return errPlannedDrop
			}
			return fmt.Errorf("read frame: %w", err)
		}
		switch f.Type {
		case api.FrameCall:
			if err := r.call(cctx, c, f); err != nil {
				if errors.Is(context.Cause(cctx), errPlannedDrop) && ctx.Err() == nil {
					return errPlannedDrop
				}
				return err
			}
		case api.FrameAck:
			r.mu.Lock()
			delete(r.unacked, f.Seq)
			r.mu.Unlock()
		case api.FrameEnd:
			c.Close(websocket.StatusNormalClosure, "session ended")
			return errEnded
		case api.FrameError:
			return fmt.Errorf("the gateway refused the remote: %s", f.Reason)
		}
	}
}

// hello is the hello frame and the results to resend after it.
func (r *remote) hello() (api.Frame, []api.Frame) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := api.Frame{
		V: int(api.CurrentProtocolVersion), Type: api.FrameHello, SessionID: r.id, LastSeq: r.lastSeq, Instance: r.instance,
		Capabilities: &api.Capabilities{OS: "linux", Arch: runtime.GOARCH, CPUs: 1, Hostname: "fleetsim", Tools: []string{api.ToolExec}},
	}
	var resend []api.Frame
	for seq, res := range r.unacked {
		f.Executed = append(f.Executed, seq)
		resend = append(resend, res)
	}
	slices.Sort(f.Executed)
	slices.SortFunc(resend, func(a, b api.Frame) int { return int(a.Seq - b.Seq) })
	return f, resend
}

// call runs one call frame: a call seen before has its result resent (if
// not yet acknowledged) and is not run again, as a real remote's journal
// does; a new one is counted by its id, its output streamed and its result
// sent. The result is kept before anything is sent, so that a connection
// lost meanwhile resends it after the next hello.
func (r *remote) call(ctx context.Context, c *websocket.Conn, f api.Frame) error {
	if f.Seq <= 0 {
		return nil
	}
	r.mu.Lock()
	r.lastSeq = max(r.lastSeq, f.Seq)
	if r.done[f.Seq] {
		res, ok := r.unacked[f.Seq]
		r.mu.Unlock()
		r.sim.resent.Add(1)
		if ok {
			return writeFrame(ctx, c, res)
		}
		return nil
	}
	var args api.ExecArgs
	callID := ""
	if json.Unmarshal(f.Args, &args) == nil && len(args.Argv) == 2 && args.Argv[0] == callProgram {
		callID = args.Argv[1]
	}
	n := r.sim.opts.OutputBytes
	value, _ := json.Marshal(api.ExecResult{ExitCode: 0, OutputBytes: int64(n)})
	res := api.Frame{V: int(api.CurrentProtocolVersion), Type: api.FrameResult, Seq: f.Seq, OK: true, Value: value}
	if callID == "" {
		res.OK, res.Value, res.Error = false, nil, "fleetsim: not a simulated call"
	}
	r.done[f.Seq] = true
	r.unacked[f.Seq] = res
	r.mu.Unlock()
	r.sim.executed(r.id, callID)

	frame := r.sim.opts.FrameBytes
	var buf []byte
	for sent := 0; sent < n; sent += frame {
		chunk := r.sim.filler[:min(frame, n-sent)]
		buf = api.OutputFrame{Seq: f.Seq, Stream: api.StreamStdout, Data: chunk}.AppendBinary(buf[:0])
		if err := c.Write(ctx, websocket.MessageBinary, buf); err != nil {
			return fmt.Errorf("send output of call %d: %w", f.Seq, err)
		}
		r.sim.outputBytes.Add(int64(len(chunk)))
	}
	r.sim.resultSent(r.id, f.Seq)
	if err := writeFrame(ctx, c, res); err != nil {
		return fmt.Errorf("send result of call %d: %w", f.Seq, err)
	}
	return nil
}

func writeFrame(ctx context.Context, c *websocket.Conn, f api.Frame) error {
	f.V = int(api.CurrentProtocolVersion)
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.Write(wctx, websocket.MessageText, b)
}

// readFrame reads the next JSON frame, skipping binary messages.
func readFrame(ctx context.Context, c *websocket.Conn) (api.Frame, error) {
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return api.Frame{}, err
		}
		if typ != websocket.MessageText {
			continue
		}
		var f api.Frame
		if err := json.Unmarshal(b, &f); err != nil {
			return api.Frame{}, fmt.Errorf("malformed frame from the gateway: %w", err)
		}
		return f, nil
	}
}

// welcomedOnce reports whether the gateway ever welcomed the remote.
func (r *remote) welcomedOnce() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.welcome
}

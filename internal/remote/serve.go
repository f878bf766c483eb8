package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

// reconnectBackoff is the wait before each reconnect attempt: full jitter
// over an exponential bound from 100 ms to 10 s.
var reconnectBackoff = backoff.Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 1}

const (
	// maxRejections is how many refusals in a row Serve accepts before it
	// gives up with ErrRejected.
	maxRejections = 3
)

// restartedError answers a call that was running when a previous remote
// process died.
const restartedError = "the remote restarted while this call was running; it may have partly run"

// errEnd reports that the gateway ended the session.
var errEnd = errors.New("session ended")

// Serve serves one session until the gateway ends it (it then returns nil),
// ctx is cancelled, the gateway keeps rejecting the remote (ErrRejected), or
// the gateway does not accept the remote's protocol version and speaks none
// it can step down to (ErrVersion, at once). Connection losses are retried with exponential
// backoff; running calls keep running meanwhile.
func Serve(ctx context.Context, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	// The first dial goes on while the session's files are opened, when
	// that is all newSession does: probing the machine (no capabilities
	// given) can take seconds, which the gateway's wait for the hello
	// would count.
	var early *earlyDial
	if opts.Capabilities != nil {
		early = startDial(ctx, opts)
	}
	s, err := newSession(ctx, opts)
	if err != nil {
		if early != nil {
			early.discard()
		}
		return err
	}
	steptrace.Mark("remote.session_open", opts.SessionID)
	if err := holdSessionJob(); err != nil {
		s.log.Warn("commands may outlive this remote", "err", err)
	}
	callCtx, stopCalls := context.WithCancel(ctx)
	s.callCtx = callCtx
	s.live.wg.Go(func() { s.runInputs(callCtx) })
	defer func() {
		stopCalls()
		s.shells.closeAll()
		s.wg.Wait()
		s.live.wg.Wait()
		s.browser.close()
		s.desk.close()
		_ = s.journal.close()
	}()

	clk := opts.Clock
	attempt, rejections := 0, 0
	lastUp := clk.Now()
	for {
		welcomed, err := s.connect(ctx, early)
		early = nil
		switch {
		case errors.Is(err, errEnd):
			s.log.Info("session ended by the control plane")
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrVersion):
			// Not ErrRejected: nobody else serves the session, so the
			// claimer should release the claim (with this reason), not
			// leave it to lapse.
			return err
		}
		if d := (*downgrade)(nil); errors.As(err, &d) {
			// An older gateway: speak its version, at once. Versions only
			// go down, so this ends.
			s.log.Info("the gateway speaks an older protocol version; reconnecting in it", "from", s.version, "to", d.to, "gateway_says", d.reason)
			s.version = d.to // no connection runs now: connect waited for its goroutines
			continue
		}
		if welcomed {
			attempt, rejections = 0, 0
			lastUp = clk.Now()
		}
		if down := clk.Since(lastUp); down > opts.GiveUpAfter {
			return fmt.Errorf("%w: no welcome from %s for %s: %v", ErrUnreachable, opts.GatewayURL, down.Round(time.Second), err)
		}
		var rej *rejection
		if errors.As(err, &rej) {
			rejections++
			if rejections >= maxRejections {
				return fmt.Errorf("%w: %s", ErrRejected, rej.msg)
			}
		}
		if welcomed && websocket.CloseStatus(err) == websocket.StatusCode(api.CloseReconnectNow) {
			// The server stops and hands the session over: reconnect now,
			// through the load balancer, to another replica. Only after a
			// welcome, so a server that keeps saying it cannot spin us.
			s.log.Info("the gateway's server is stopping; reconnecting now", "err", err)
			continue
		}
		attempt++
		delay := reconnectBackoff.Delay(attempt)
		s.log.Warn("gateway connection lost; reconnecting", "err", err, "in", delay)
		if err := backoff.Sleep(ctx, clk, delay); err != nil {
			return err
		}
	}
}

// newInstanceID returns a random id for this remote process.
func newInstanceID() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// session is the state of one session across connections.
type session struct {
	opts Options
	log  *slog.Logger
	// version is the protocol version the remote speaks: in its hello and
	// in every frame it sends, and the one it expects from the gateway.
	// Serve lowers it, between connections, to an older gateway's.
	version api.ProtocolVersion
	// instance names this process to the gateway (hello), the same on
	// every reconnect.
	instance string
	caps     api.Capabilities
	journal  *journal
	out      *outbox
	baseEnv  []string

	callCtx context.Context
	wg      sync.WaitGroup // running calls

	// browser is the session's browser, started by the first browser tool.
	browser browserHost
	// shells are the session's persistent shells; uploads its artifact
	// uploads waiting for the server's ack.
	shells  shellSet
	uploads uploadSet
	// desk is the session's desktop, started by the first call that
	// needs a display; live its live view and takeover (liveview.go).
	desk desktopHost
	live liveView

	mu        sync.Mutex
	running   map[int64]context.CancelFunc
	done      map[int64]*doneEntry // results not yet acknowledged
	lastSeq   int64
	env       map[string]string
	secrets   map[string]string
	secretSet *redact.Set

	// restoreStarted is set by the first welcome; restored is closed once
	// the repositories it listed are restored (see restore.go). Calls
	// start only after that.
	restoreStarted bool
	restored       chan struct{}
	// unrestored says why the workspace is not the snapshot it was to be
	// restored from; "" when it is, or none was asked for. It is also
	// kept in the state dir (unrestoredFile). No snapshot is taken while
	// it is set.
	unrestored string

	// suspending is set from a suspend until it fails; suspended is the
	// answer of the one that succeeded (see suspend.go). Calls are refused
	// while suspending is set.
	suspending bool
	suspended  *api.Frame
	// checkpointing is set while a checkpoint uploads (checkpoint.go).
	checkpointing bool
	// callsChanged is signalled (without blocking) when a call ends.
	callsChanged chan struct{}
}

// doneEntry is a result waiting for its ack.
type doneEntry struct {
	frame api.Frame
	// queued is set while the result's seq waits in the outbox.
	queued bool
}

func newSession(ctx context.Context, opts Options) (*session, error) {
	j, err := openJournal(opts.StateDir)
	if err != nil {
		return nil, err
	}
	st, err := j.load()
	if err != nil {
		return nil, err
	}
	s := &session{
		opts:     opts,
		version:  opts.ProtocolVersion,
		instance: newInstanceID(),
		log:      opts.Logger.With("session_id", opts.SessionID),
		journal:  j,
		out:      newOutbox(),
		baseEnv:  cleanEnv(os.Environ()),
		running:  map[int64]context.CancelFunc{},
		done:     map[int64]*doneEntry{},
		lastSeq:  st.LastSeq,
		restored: make(chan struct{}),

		callsChanged: make(chan struct{}, 1),
	}
	if opts.Capabilities != nil {
		s.caps = *opts.Capabilities
	} else {
		s.caps = machine.Detect(ctx)
	}
	s.desk = desktopHost{opts: opts.Desktop, log: s.log}
	s.caps.Desktop = s.desk.available()
	s.caps.LiveDesktop = s.caps.Desktop
	s.live.init()
	if !s.caps.Desktop { // the computer tool is offered only with a desktop
		s.caps.Tools = slices.DeleteFunc(slices.Clone(s.caps.Tools), func(t string) bool { return t == api.ToolComputer })
	}
	for seq, f := range st.Done {
		s.done[seq] = &doneEntry{frame: f}
	}
	for _, rec := range st.Interrupted {
		f := api.Frame{Type: api.FrameResult, Seq: rec.Seq, Tool: rec.Tool, Error: restartedError}
		if err := j.done(f); err != nil {
			s.log.Error("journal an interrupted call", "seq", rec.Seq, "err", err)
		}
		s.done[rec.Seq] = &doneEntry{frame: f}
		s.log.Warn("a call was running when the remote stopped; reporting it as failed", "seq", rec.Seq, "tool", rec.Tool)
	}
	return s, nil
}

// hello returns the hello frame and the results to resend right after it:
// every unacknowledged result not already waiting in the outbox.
func (s *session) hello() (api.Frame, []api.Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	caps := s.caps
	f := api.Frame{
		V:            int(s.version),
		Type:         api.FrameHello,
		SessionID:    s.opts.SessionID,
		Capabilities: &caps,
		LastSeq:      s.lastSeq,
		Instance:     s.instance,
	}
	var resend []api.Frame
	for seq, e := range s.done {
		f.Executed = append(f.Executed, seq)
		if !e.queued {
			resend = append(resend, e.frame)
		}
	}
	for seq := range s.running {
		f.Running = append(f.Running, seq)
	}
	slices.Sort(f.Executed)
	slices.Sort(f.Running)
	slices.SortFunc(resend, func(a, b api.Frame) int { return int(a.Seq - b.Seq) })
	return f, resend
}

// welcome takes the session's environment and secrets and, on the first
// welcome, starts restoring the repositories it lists.
func (s *session) welcome(f api.Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.env = f.Env
	s.secrets = f.Secrets
	s.desk.setSize(f.Desktop)
	s.secretSet = redact.NewSet(f.Secrets)
	if err := writeGitCredentials(s.opts.StateDir, f.Secrets); err != nil {
		s.log.Warn("write the git credential helper", "err", err)
	}
	s.startRestore(f)
}

// takeResult returns the result of seq for sending, if it is still unacked.
func (s *session) takeResult(seq int64) (api.Frame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.done[seq]
	if !ok {
		return api.Frame{}, false
	}
	e.queued = false
	return e.frame, true
}

// requeueResult puts seq back at the head of the outbox after a failed send.
func (s *session) requeueResult(seq int64) {
	s.mu.Lock()
	e, ok := s.done[seq]
	if ok {
		e.queued = true
	}
	s.mu.Unlock()
	if ok {
		s.out.unpop(outItem{resultSeq: seq})
	}
}

// handleCall starts a call, resends its result, or ignores a duplicate.
func (s *session) handleCall(f api.Frame) {
	steptrace.Mark("remote.call", s.opts.SessionID)
	if f.Seq <= 0 {
		s.log.Warn("ignoring a call without a seq", "tool", f.Tool)
		return
	}
	s.mu.Lock()
	s.lastSeq = max(s.lastSeq, f.Seq)
	if e, ok := s.done[f.Seq]; ok {
		resend := !e.queued
		e.queued = true
		s.mu.Unlock()
		if resend {
			s.log.Info("call already done; resending its result", "seq", f.Seq)
			s.out.pushResult(f.Seq)
		}
		return
	}
	if _, ok := s.running[f.Seq]; ok {
		s.mu.Unlock()
		s.log.Debug("call already running", "seq", f.Seq)
		return
	}
	if s.journal.isAcked(f.Seq) {
		s.mu.Unlock()
		s.log.Warn("ignoring a call whose result was already acknowledged", "seq", f.Seq)
		return
	}
	if s.suspending {
		s.mu.Unlock()
		s.log.Warn("refusing a call during a suspend", "seq", f.Seq, "tool", f.Tool)
		s.refuseCall(f)
		return
	}
	ctx, cancel := context.WithCancel(s.callCtx)
	s.running[f.Seq] = cancel
	env := mergeEnv(s.baseEnv, s.env, s.secrets)
	set := s.secretSet
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer cancel()
		s.waitRestored(ctx) // repositories of a resumed session first
		env := s.withDisplay(ctx, f.Tool, env)
		s.runCall(ctx, f, env, set)
	}()
}

// runCall journals, runs and answers one call.
func (s *session) runCall(ctx context.Context, f api.Frame, env []string, set *redact.Set) {
	log := s.log.With("seq", f.Seq, "tool", f.Tool)
	log.Debug("call started")
	start := time.Now()
	res := api.Frame{Type: api.FrameResult, Seq: f.Seq, Tool: f.Tool}
	rec := startedRecord{Seq: f.Seq, Tool: f.Tool, StartedAt: start.UTC()}
	if err := s.journal.started(rec); err != nil {
		res.Error = fmt.Sprintf("the remote could not journal the call, so it did not run it: %v", err)
	} else {
		c := newCallEnv(s, f, env, set)
		value, err := runTool(ctx, c, f.Tool, f.Args)
		c.flush()
		res.OK = err == nil
		if err != nil {
			res.Error = set.String(err.Error())
		}
		if value != nil {
			res.Value = set.JSON(mustJSON(value))
		}
	}
	if err := s.journal.done(res); err != nil {
		log.Error("journal the result", "err", err)
	}
	s.mu.Lock()
	s.done[f.Seq] = &doneEntry{frame: res, queued: true}
	s.mu.Unlock()
	// The result is queued before the call stops counting as running, so
	// that a suspend or checkpoint waiting for idle queues its answer after
	// this result, never before it.
	s.out.pushResult(f.Seq)
	s.mu.Lock()
	delete(s.running, f.Seq)
	s.mu.Unlock()
	select {
	case s.callsChanged <- struct{}{}:
	default:
	}
	level := slog.LevelDebug
	if !res.OK {
		level = slog.LevelInfo
	}
	log.Log(context.Background(), level, "call finished", "ok", res.OK, "error", res.Error, "duration", time.Since(start).Round(time.Millisecond))
}

// handleAck forgets an acknowledged result.
func (s *session) handleAck(seq int64) {
	s.mu.Lock()
	_, ok := s.done[seq]
	delete(s.done, seq)
	s.mu.Unlock()
	if !ok {
		return
	}
	if err := s.journal.acked(seq); err != nil {
		s.log.Error("journal an ack", "seq", seq, "err", err)
	}
}

// handleCancel stops a running call.
func (s *session) handleCancel(seq int64) {
	s.mu.Lock()
	cancel, ok := s.running[seq]
	s.mu.Unlock()
	if ok {
		s.log.Info("cancelling call", "seq", seq)
		cancel()
	}
}

// credentialVars are the remote's own credentials, under every name.
var credentialVars = slices.Concat(api.EnvConnectToken.Names(), api.EnvGatewayURL.Names(), api.EnvSessionToken.Names())

// cleanEnv drops the remote's own credentials from an environment.
func cleanEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(credentialVars, k) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// mergeEnv returns base with the variables of each overlay set, later
// overlays winning.
func mergeEnv(base []string, overlays ...map[string]string) []string {
	out := slices.Clone(base)
	idx := make(map[string]int, len(out))
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	for _, m := range overlays {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			kv := k + "=" + m[k]
			if i, ok := idx[k]; ok {
				out[i] = kv
			} else {
				idx[k] = len(out)
				out = append(out, kv)
			}
		}
	}
	return out
}

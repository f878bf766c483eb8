package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

// An idle worker keeps one remote started ahead of its next claim, so that
// a session does not wait for the remote's start-up (the runtime, the
// package init of a binary of ~600 packages, flags): two thirds of
// dispatch otherwise. The pre-started remote runs `outpost remote serve
// --session-from-stdin` with the spawn environment every session gets
// except the session's own variables (gateway URL, connect token, session
// id, state dir), isolated as any remote, in a fresh state dir
// DataDir/sessions/.prestart-*. At claim time the worker renames that dir
// to the session's, writes the session's variables to the remote's
// standard input and closes it (remote.ReadSessionEnv); from then on it
// is the session's remote like one started at claim time.
//
// Under bwrap the sandbox binds the state dir at the path it had at
// start, so the remote is told that path: the same directory, renamed on
// the host, with nothing else of the data dir visible. It is used only
// when it fits exactly: the session runs this build's remote (not a
// pinned download), its state dir does not exist yet (a restarted
// session's journal must be read where it is), and its environment but
// the session's variables is the pre-started one's. Otherwise the remote
// starts at claim time as before and the pre-started one waits for a
// later session.

// maxPrestartDeaths is how many pre-started remotes in a row may exit
// while waiting before the worker stops replacing them until a session
// has run.
const maxPrestartDeaths = 3

// readyWait bounds how long a claimed session waits for the pre-started
// remote to be ready before it gets a new one.
const readyWait = 10 * time.Second

// prestartPrefix starts the name of a pre-started remote's state dir.
const prestartPrefix = ".prestart-"

// sessionVars are the spawn variables only a claim gives, handed to a
// pre-started remote on its standard input.
var sessionVars = []string{api.EnvGatewayURL.Name, api.EnvConnectToken.Name, api.EnvSessionID.Name, api.EnvStateDir.Name}

// prestarted is a remote waiting for its session.
type prestarted struct {
	p     *remoteProc
	sock  *os.File      // the worker's end of its stdin socket; closed without a session, the remote exits
	ready chan struct{} // closed when the remote said it waits (sandbox set up)
	dir   string        // its state dir as created, also the path the remote sees under bwrap
	env   []string      // its environment: a session's without sessionVars
	taken chan struct{}
}

// prestarter keeps the worker's pre-started remote. A nil *prestarter
// keeps none.
type prestarter struct {
	w       *worker
	command []string // the pre-started remote's command
	self    []string // the command of sessions it can serve
	log     *slog.Logger
	wg      sync.WaitGroup // fill, watch and refresh goroutines
	// ctx ends at close, cutting short a read of the latest remote build.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex // guards the following
	cur    *prestarted
	deaths int // pre-started remotes in a row that exited while waiting
	closed bool
}

// newPrestarter returns the prestarter of w, which runs command for
// sessions that would run self; it removes state dirs that pre-started
// remotes of an earlier run of this worker left.
func newPrestarter(w *worker, command, self []string) *prestarter {
	stale, _ := filepath.Glob(filepath.Join(w.opts.DataDir, "sessions", prestartPrefix+"*"))
	for _, d := range stale {
		_ = os.RemoveAll(d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &prestarter{w: w, command: command, self: self, log: w.log, ctx: ctx, cancel: cancel}
}

// baseEnv is the environment of a session's remote without sessionVars:
// what a pre-started remote starts with.
func baseEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(sessionVars, k)
	})
}

// afterSession starts the next pre-started remote in the background, as
// a session ended: the worker is idle again.
func (ps *prestarter) afterSession() {
	if ps == nil {
		return
	}
	ps.mu.Lock()
	ps.deaths = 0
	ps.mu.Unlock()
	ps.fillAsync()
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		ps.w.remotes.Refresh(ps.ctx)
	}()
}

// fillAsync starts a pre-started remote in the background unless one waits.
func (ps *prestarter) fillAsync() {
	if ps == nil {
		return
	}
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		ps.fill()
	}()
}

// fill starts a pre-started remote unless one waits or the prestarter is
// closed.
func (ps *prestarter) fill() {
	if ps == nil {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed || ps.cur != nil || ps.deaths >= maxPrestartDeaths {
		return
	}
	cur, err := ps.startLocked()
	if err != nil {
		ps.deaths++
		ps.log.Warn("cannot pre-start a remote; the next one starts at claim time", "err", err)
		return
	}
	ps.cur = cur
	ps.wg.Add(1)
	go ps.watch(cur)
}

func (ps *prestarter) startLocked() (*prestarted, error) {
	sessions := filepath.Join(ps.w.opts.DataDir, "sessions")
	if err := os.MkdirAll(sessions, 0o700); err != nil {
		return nil, fmt.Errorf("create the sessions dir: %w", err)
	}
	dir, err := os.MkdirTemp(sessions, prestartPrefix)
	if err != nil {
		return nil, fmt.Errorf("create a state dir: %w", err)
	}
	lookup := fleet.LookupWithCAFile(os.LookupEnv, ps.w.opts.CAFile)
	env := baseEnv(fleet.SpawnEnv(&api.QueueEntry{}, "", lookup))
	r, sock, err := sessionSocket()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("create the session socket: %w", err)
	}
	p, err := ps.w.spawn(ps.command, env, "", dir, r, "", nil)
	r.Close()
	if err != nil {
		sock.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	ps.log.Debug("remote pre-started", "pid", p.cmd.Process.Pid, "state_dir", dir)
	cur := &prestarted{p: p, sock: sock, dir: dir, env: env, taken: make(chan struct{}), ready: make(chan struct{})}
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		if awaitReady(sock) {
			close(cur.ready)
		}
	}()
	return cur, nil
}

// awaitReady reads the remote's "ready" line from its socket; false when
// the socket ends (the remote exited, or the worker closed it) first.
func awaitReady(sock *os.File) bool {
	var line []byte
	b := make([]byte, 16)
	for {
		n, err := sock.Read(b)
		line = append(line, b[:n]...)
		if strings.Contains(string(line), "\n") {
			return strings.HasPrefix(string(line), "ready\n")
		}
		if err != nil {
			return false
		}
	}
}

// watch replaces cur when it exits while waiting for a session.
func (ps *prestarter) watch(cur *prestarted) {
	defer ps.wg.Done()
	select {
	case <-cur.taken:
		return
	case <-cur.p.dead:
	}
	ps.mu.Lock()
	if ps.cur != cur {
		ps.mu.Unlock()
		return
	}
	ps.cur = nil
	ps.deaths++
	ps.mu.Unlock()
	ps.log.Warn("the pre-started remote exited while waiting for a session", "remote_exit", fleet.ExitString(<-cur.p.exited))
	ps.discard(cur)
	ps.fill()
}

// take hands the session id, whose remote would be rc with state dir
// stateDir and environment env, to the pre-started remote, and returns it;
// nil when there is none that fits (see the comment at the top).
func (ps *prestarter) take(rc []string, id, stateDir string, env func(stateDir string) []string) *remoteProc {
	if ps == nil || !slices.Equal(rc, ps.self) {
		return nil
	}
	ps.mu.Lock()
	cur := ps.cur
	ps.cur = nil
	ps.mu.Unlock()
	if cur == nil {
		return nil
	}
	keep := func() {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if ps.cur == nil && !ps.closed {
			ps.cur = cur
			return
		}
		go ps.discard(cur)
	}
	// Until it says it waits, a remote under bwrap may still be binding
	// its state dir, which must not move before; a remote still starting
	// is sooner ready than a new one.
	ready := time.NewTimer(readyWait)
	defer ready.Stop()
	select {
	case <-cur.ready:
	case <-cur.p.dead:
		ps.discard(cur) // taken from ps.cur, it is ours to discard
		ps.mu.Lock()
		ps.deaths++
		ps.mu.Unlock()
		return nil
	case <-ready.C:
		ps.log.Warn("the pre-started remote is not ready; starting one for the session", "session", id, "waited", readyWait)
		go ps.discard(cur)
		return nil
	}
	seen := stateDir // the state dir's path as the remote sees it
	if ps.w.iso.name() == string(IsolationBwrap) {
		seen = cur.dir
	}
	full := env(seen)
	if !slices.Equal(baseEnv(full), cur.env) {
		ps.log.Warn("the pre-started remote's environment is not the session's; starting one for it", "session", id)
		keep()
		return nil
	}
	var handover strings.Builder
	for _, kv := range full {
		k, v, _ := strings.Cut(kv, "=")
		if !slices.Contains(sessionVars, k) {
			continue
		}
		if strings.ContainsAny(v, "\n\x00") {
			keep()
			return nil
		}
		handover.WriteString(kv + "\n")
	}
	if _, err := os.Lstat(stateDir); err == nil {
		keep() // a state dir of an earlier remote of the session
		return nil
	}
	if err := os.Rename(cur.dir, stateDir); err != nil {
		ps.log.Warn("cannot give the pre-started remote's state dir to the session; starting one for it", "session", id, "err", err)
		go ps.discard(cur)
		return nil
	}
	close(cur.taken)
	p := cur.p
	p.stateDir, p.startedAt = stateDir, time.Now()
	p.stdout.setSession(id)
	p.stderr.setSession(id)
	_, err := cur.sock.WriteString(handover.String())
	if cerr := cur.sock.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// It died just now: the session gets a new remote in the state
		// dir, which has nothing of the session's yet.
		ps.log.Warn("cannot hand the session to the pre-started remote; starting one for it", "session", id, "err", err)
		_ = kill(p.cmd)
		<-p.dead
		p.logFile.Close()
		return nil
	}
	steptrace.Mark("worker.handed_over", id)
	ps.log.Debug("session handed to the pre-started remote", "session", id, "pid", p.cmd.Process.Pid)
	return p
}

// discard stops a pre-started remote that will serve no session and
// removes its state dir.
func (ps *prestarter) discard(cur *prestarted) {
	cur.sock.Close() // it reads EOF and exits
	select {
	case <-cur.p.dead:
	case <-time.After(killDelay):
		_ = kill(cur.p.cmd)
		<-cur.p.dead
	}
	cur.p.stdout.flush()
	cur.p.stderr.flush()
	cur.p.logFile.Close()
	_ = os.RemoveAll(cur.dir)
}

// close stops the waiting remote, and waits for the prestarter's
// goroutines: at the worker's end.
func (ps *prestarter) close() {
	if ps == nil {
		return
	}
	ps.cancel()
	ps.mu.Lock()
	ps.closed = true
	cur := ps.cur
	ps.cur = nil
	ps.mu.Unlock()
	if cur != nil {
		ps.discard(cur)
	}
	ps.wg.Wait()
}

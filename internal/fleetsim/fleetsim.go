// Package fleetsim simulates a fleet against an Outpost server to measure
// what the control plane does at scale: N workers connected and watching
// their outpost's queue (the real fleet consumer, over real HTTP), M
// running sessions whose simulated remotes speak the real gateway
// protocol, an agent per session calling a tool at a set rate through the
// server, K transcript followers, and a session creator at a set rate. It
// reports latencies, throughput, errors, whether every call ran exactly
// once, and the server's CPU and memory from its /metrics. It starts no
// process; `outpost bench fleet` is its command.
package fleetsim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// Options configure a simulation. Zero values are noted on each field.
type Options struct {
	// Servers are the URLs of the server, or of each of its replicas
	// when no balancer is in front of them: workers, the creator, the
	// agents and the followers are spread round robin over them, as a
	// balancer would. At least one is required.
	Servers []string
	// Token is an admin token of the server (the simulator creates an
	// outpost and tokens). Required.
	Token string
	// MetricsURLs are where the server's metrics are read, summed; empty
	// means each of Servers' /metrics (a server with --metrics-listen
	// serves them elsewhere).
	MetricsURLs []string
	// TLS is the TLS configuration of every connection the simulator
	// makes (API, watch streams, gateway); nil means the system's roots.
	TLS *tls.Config
	// Outpost is the outpost the fleet serves, created when missing;
	// empty means a new one named fleetsim-<random>.
	Outpost string
	// Workers is the number of simulated workers. Required (≥ 1).
	Workers int
	// Sessions is the number of sessions created, each served by one
	// worker's simulated remote; zero means none (idle workers only).
	Sessions int
	// CallRate is each running session's tool calls per second; zero
	// means 1.
	CallRate float64
	// OutputBytes is the output each call streams before its result, in
	// frames of FrameBytes (zero means 4 KiB).
	OutputBytes, FrameBytes int
	// Followers is the number of transcript followers, spread round robin
	// over the sessions.
	Followers int
	// CreateRate is how many sessions are created per second; zero means
	// 10.
	CreateRate float64
	// Duration is how long sessions run, from the first create; zero
	// means 60 s.
	Duration time.Duration
	// Idle is how long the connected workers are measured idle before
	// the first create; zero means 5 s, negative none.
	Idle time.Duration
	// ReconnectEvery, when set, makes each remote drop its connection
	// after a random time between half and one and a half of it, and
	// reconnect as a remote does after a network failure.
	ReconnectEvery time.Duration
	// Heartbeat is the workers' heartbeat interval; zero means the one
	// the server asks for.
	Heartbeat time.Duration
	// WorkersPerToken is how many workers share a machine token; zero
	// means 200, under the server's default bound on streams per token.
	WorkersPerToken int
	// Drain bounds the end: sessions ended, remotes gone, claims
	// released; zero means 60 s.
	Drain time.Duration
	// Keep leaves the outpost the run created and the machine tokens it
	// minted on the server; otherwise both are removed at the end, also
	// when ctx is cancelled (within cleanupTimeout). An outpost that
	// existed before the run is never deleted.
	Keep bool
	// Progress, when set, receives a progress line every ProgressEvery
	// (zero means 5 s).
	Progress      io.Writer
	ProgressEvery time.Duration
}

func (o *Options) defaults() error {
	if len(o.Servers) == 0 || o.Token == "" {
		return errors.New("a server URL and an admin token are required")
	}
	servers := make([]string, len(o.Servers))
	for i, u := range o.Servers {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("server URL %q: want an absolute http:// or https:// URL", u)
		}
		servers[i] = strings.TrimSuffix(u, "/")
	}
	o.Servers = servers
	if o.Workers < 1 {
		return errors.New("--workers must be at least 1")
	}
	if o.Sessions < 0 || o.Followers < 0 || o.OutputBytes < 0 || o.FrameBytes < 0 || o.CallRate < 0 || o.CreateRate < 0 || o.Duration < 0 || o.ReconnectEvery < 0 || o.WorkersPerToken < 0 {
		return errors.New("sizes, rates and durations must not be negative")
	}
	if o.Sessions > o.Workers {
		return fmt.Errorf("--sessions %d is more than --workers %d: each running session needs a worker of its own", o.Sessions, o.Workers)
	}
	if o.CallRate == 0 {
		o.CallRate = 1
	}
	if o.FrameBytes == 0 {
		o.FrameBytes = 4 << 10
	}
	if o.CreateRate == 0 {
		o.CreateRate = 10
	}
	if o.Duration == 0 {
		o.Duration = time.Minute
	}
	if o.Idle == 0 {
		o.Idle = 5 * time.Second
	}
	if o.WorkersPerToken == 0 {
		o.WorkersPerToken = 200
	}
	if o.Drain == 0 {
		o.Drain = time.Minute
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = 5 * time.Second
	}
	return nil
}

// sim is one run's state.
type sim struct {
	opts        Options
	run         string           // random id of the run, in names
	admin       *client.Client   // admins[0]: setup, drain and cleanup
	admins      []*client.Client // one per server, round robin by nextAdmin
	nextAdm     atomic.Uint64
	tr          *transports
	outpost     api.Outpost
	outpostName string
	filler      []byte

	// remotesCtx ends when remotes must stop at once (the drain timed out).
	remotesCtx context.Context

	lat struct {
		claim, heartbeat, create, connect, dispatch, call, lag latencies
		// callAllRunning are the calls sent while every session of the
		// run was running: the fleet at full rate, its ramp left out.
		callAllRunning latencies
	}
	errs errorLog

	watching, heartbeats, claimAttempts, claims, conflicts atomic.Int64
	connects, reconnects, resent, outputBytes              atomic.Int64
	created, running, ended, answered, failed              atomic.Int64
	// window is the full-rate window: windowRamp until every requested
	// session was welcomed, windowOpen until the first one ends, then
	// windowClosed for good.
	window atomic.Int32

	mu       sync.Mutex // guards the following
	sessions map[string]*session
	byCall   map[string]int // executions per call id
	calls    map[string]bool
	noID     int64 // calls run without a simulated call id
	// createdOutpost is set when the run created its outpost; tokenIDs
	// are the machine tokens it minted. Both are removed at the end.
	createdOutpost bool
	tokenIDs       []string
}

// session is what the simulator knows of one session.
type session struct {
	id string
	// asked is when the create request was sent, created when its answer
	// came; both zero until the creator has the answer.
	asked, created time.Time
	// claim is the claim that won the session, zero until the runner
	// had it; claimTimed says its latency was recorded.
	claim      span
	claimTimed bool
	welcomed   chan struct{}
	firstCall  time.Time
	sent       map[int64]time.Time // result sent by the remote, by seq
	// early says the remote was welcomed before the creator had the
	// create's answer (a claim waiting at the server is that quick): the
	// creator counts it when it registers the session.
	early bool
}

// welcomed is called when a remote of session id is first welcomed; only
// the session's first remote counts.
func (s *sim) welcomed(id string) {
	s.mu.Lock()
	ss := s.sessionLocked(id)
	select {
	case <-ss.welcomed:
		// A second remote of the session (claimed again by another
		// worker): counted once, when the first was welcomed.
		s.mu.Unlock()
		return
	default:
	}
	close(ss.welcomed) // under s.mu: a second remote sees it closed
	if ss.created.IsZero() {
		ss.early = true
		s.mu.Unlock()
		return
	}
	created := ss.created
	s.mu.Unlock()
	s.lat.connect.add(time.Since(created))
	s.started()
}

// registerCreated notes session id, whose create request was sent at
// asked and answered at created, and reports whether its remote was
// welcomed before that answer came.
func (s *sim) registerCreated(id string, asked, created time.Time) (ss *session, early bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss = s.sessionLocked(id)
	ss.asked, ss.created = asked, created
	s.timeClaimLocked(ss)
	return ss, ss.early
}

// sessionLocked returns what the simulator knows of session id, adding
// an entry when the session is new to it (a claim or a welcome can come
// before the creator has the create's answer). s.mu must be held.
func (s *sim) sessionLocked(id string) *session {
	ss := s.sessions[id]
	if ss == nil {
		ss = &session{id: id, welcomed: make(chan struct{}), sent: map[int64]time.Time{}}
		s.sessions[id] = ss
	}
	return ss
}

// claimed notes the claim that won session id, which was sent and
// answered in won (zero when the transport saw none).
func (s *sim) claimed(id string, won span) {
	if won.end.IsZero() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessionLocked(id)
	ss.claim = won
	s.timeClaimLocked(ss)
}

// timeClaimLocked records the latency of the claim that won ss once both
// the claim and the create request are known: from the later of the
// claim sent and the create sent to the claim's answer. A claim that
// waited at the server before the session existed is timed from the
// moment the session was asked for, not from when it began to wait.
// s.mu must be held.
func (s *sim) timeClaimLocked(ss *session) {
	if ss.claimTimed || ss.claim.end.IsZero() || ss.asked.IsZero() {
		return
	}
	ss.claimTimed = true
	if ss.claim.end.Before(ss.asked) {
		// Answered before the session was asked for: not its claim but
		// an earlier one whose session was never run (a worker
		// recovering a claim by id takes the last span it saw).
		return
	}
	from := ss.claim.start
	if ss.asked.After(from) {
		from = ss.asked
	}
	s.lat.claim.add(max(ss.claim.end.Sub(from), 0))
}

// The states of sim.window.
const (
	windowRamp int32 = iota
	windowOpen
	windowClosed
)

// started counts a session whose remote was welcomed; the last one opens
// the full-rate window, unless a session ended before.
func (s *sim) started() {
	if s.running.Add(1) == int64(s.opts.Sessions) {
		s.window.CompareAndSwap(windowRamp, windowOpen)
	}
}

// remoteEnded counts a session whose remote ended, which closes the
// full-rate window for good.
func (s *sim) remoteEnded(string) {
	s.ended.Add(1)
	s.window.Store(windowClosed)
}

// allRunning reports whether the full-rate window is open.
func (s *sim) allRunning() bool { return s.window.Load() == windowOpen }

// executed counts a call run by a remote.
func (s *sim) executed(id, callID string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if callID == "" {
		s.noID++
		return
	}
	s.byCall[callID]++
	if ss := s.sessions[id]; ss != nil && ss.firstCall.IsZero() {
		ss.firstCall = now
		s.lat.dispatch.add(now.Sub(ss.created))
	}
}

// resultSent notes when a remote sent a call's result, for follower lag.
func (s *sim) resultSent(id string, seq int64) {
	now := time.Now()
	s.mu.Lock()
	if ss := s.sessions[id]; ss != nil {
		if _, ok := ss.sent[seq]; !ok {
			ss.sent[seq] = now
		}
	}
	s.mu.Unlock()
}

func (s *sim) sentAt(id string, seq int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[id]; ss != nil {
		t, ok := ss.sent[seq]
		return t, ok
	}
	return time.Time{}, false
}

// openFiles is about how many descriptors a run holds at once: three a
// worker (its queue watch, its claim waiting at the server and the
// connection its heartbeats and other requests take), two a session
// (its remote's gateway connection and its agent's) and one a follower.
func (o Options) openFiles() int { return 3*o.Workers + 2*o.Sessions + o.Followers }

// CheckFiles reports, as an error saying what to do, whether this process
// may hold the descriptors a run of o needs (Run checks it too; a caller
// that starts servers for the run checks it first).
func (o Options) CheckFiles() error { return checkFiles(o.openFiles()) }

// Run runs one simulation and returns its report. The report is returned
// also with an error when the run could not finish.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if err := opts.CheckFiles(); err != nil {
		return nil, err
	}
	s := &sim{opts: opts, run: fmt.Sprintf("%06x", rand.N(1<<24)), sessions: map[string]*session{}, byCall: map[string]int{}, calls: map[string]bool{}}
	s.filler = []byte(strings.Repeat("fleetsim output 0123456789abcdef\n", opts.FrameBytes/33+1))[:opts.FrameBytes]
	s.tr = newTransports(opts.Servers, opts.Workers+opts.Sessions+opts.Followers, opts.TLS)
	defer s.tr.close()
	for _, u := range opts.Servers {
		c, err := client.New(u, opts.Token, client.WithHTTPClient(s.tr.pick()), client.WithUserAgent("outpost-fleetsim"))
		if err != nil {
			return nil, err
		}
		s.admins = append(s.admins, c)
	}
	s.admin = s.admins[0]
	rep, err := s.simulate(ctx)
	cl := s.cleanup(ctx)
	if rep != nil {
		rep.Cleanup = cl
	}
	return rep, err
}

// nextAdmin returns the admin client of the next server, round robin.
func (s *sim) nextAdmin() *client.Client {
	return s.admins[int(s.nextAdm.Add(1)-1)%len(s.admins)]
}

// server returns the URL of the i-th server, round robin.
func (s *sim) server(i int) string { return s.opts.Servers[i%len(s.opts.Servers)] }

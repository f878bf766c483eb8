package server

import (
	"container/list"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
)

// Parked claim-next requests. An idle claimer that asks with
// api.ClaimNextRequest.WaitSeconds is not answered 204 at once when
// nothing is claimable for it: its request joins its outpost's wait list
// on this server, first come first served, and is woken when a session of
// the outpost becomes pending here — created or released through this
// server (committed), or on another replica (the store's change feed,
// read back by id to learn the entry's phase). One pending session wakes
// one request, in arrival order; a woken request claims through the same
// NextGate path as any other. One that finds nothing (its filters, its
// machine or its exclude list do not fit the session, or another claimer
// took it) goes back to waiting, and the wake passes on to the next
// request that has not tried that session, while the session is still
// pending: a waiter that cannot take a session never starves one that
// can. So a new session costs about one request, not one per idle
// claimer, and its claim is answered as soon as it is committed.
//
// Wakes are hints, as the queue feed's are: a request whose wake is lost
// (a replica that died between its commit and its notification) is
// answered 204 at its deadline and its claimer asks again. After the
// change feed reconnects, and when the fan-out's backstop sees changes,
// every outpost's first free waiter looks once (a wake without a
// session), and one that claims passes the look on.

// wakeKey is what woke a waiter: a session entry at a rev, or a look
// without a session in mind (session "").
type wakeKey struct {
	session string
	rev     int64
}

// claimWaiter is one parked (or claiming) claim-next request.
type claimWaiter struct {
	outpost string
	wake    chan wakeKey // cap 1; sent to under claimWaits.mu only

	// resume, when set, is started on a goroutine of its own by the wake
	// of a parked waiter (a request parked on its hijacked connection,
	// which has no goroutine while parked); it takes the wake from wake.
	// Without it the request's goroutine waits on wake.
	resume func()

	// Guarded by claimWaits.mu.
	el    *list.Element // nil once it left
	busy  bool          // claiming rather than parked
	ended bool          // its wait is over (end): it is not to park again
	tried []wakeKey     // sessions it was woken for and could not take
}

// claimWaits are the wait lists of this server's outposts.
type claimWaits struct {
	parked prometheus.Gauge
	wakes  prometheus.Counter

	mu       sync.Mutex // guards the following and every claimWaiter's fields
	outposts map[string]*list.List
}

func newClaimWaits(m *metrics) *claimWaits {
	q := &claimWaits{
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outpost_claim_next_parked",
			Help: "Claim-next requests waiting on this server for a session to become pending (wait_seconds).",
		}),
		wakes: counter("outpost_claim_next_wakes_total",
			"Parked claim-next requests woken to claim: one per session that became pending, plus one per waiter that could not take it and passed it on."),
		outposts: map[string]*list.List{},
	}
	m.MustRegister(q.parked, q.wakes)
	return q
}

// join puts a request at the end of outpost's list, busy: a wake that
// comes before it parks is kept for it.
func (q *claimWaits) join(outpost string) *claimWaiter {
	w := &claimWaiter{outpost: outpost, wake: make(chan wakeKey, 1), busy: true}
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.outposts[outpost]
	if l == nil {
		l = list.New()
		q.outposts[outpost] = l
	}
	w.el = l.PushBack(w)
	q.parked.Inc()
	return w
}

// leave takes w off its list; a wake it had not taken goes to the next
// waiter. Leaving twice is harmless.
func (q *claimWaits) leave(w *claimWaiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.el == nil {
		return
	}
	l := q.outposts[w.outpost]
	l.Remove(w.el)
	w.el = nil
	if l.Len() == 0 {
		delete(q.outposts, w.outpost)
	}
	q.parked.Dec()
	select {
	case k := <-w.wake:
		q.wakeLocked(w.outpost, k)
	default:
	}
}

// park marks w waiting for a wake.
func (q *claimWaits) park(w *claimWaiter) {
	q.mu.Lock()
	w.busy = false
	q.mu.Unlock()
}

// missed records that w was woken for k and could not take it, so that
// the wake passes over it.
func (q *claimWaits) missed(w *claimWaiter, k wakeKey) {
	if k.session == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(w.tried) >= 64 {
		w.tried = w.tried[1:]
	}
	w.tried = append(w.tried, k)
}

// waiting reports whether requests wait on outpost here.
func (q *claimWaits) waiting(outpost string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.outposts[outpost] != nil
}

// wake wakes the first request of outpost that waits for a wake and has
// not tried k, preferring parked ones to ones still claiming; false when
// there is none.
func (q *claimWaits) wake(outpost string, k wakeKey) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wakeLocked(outpost, k)
}

func (q *claimWaits) wakeLocked(outpost string, k wakeKey) bool {
	l := q.outposts[outpost]
	if l == nil {
		return false
	}
	var pick *claimWaiter
	for e := l.Front(); e != nil; e = e.Next() {
		w := e.Value.(*claimWaiter)
		if len(w.wake) > 0 || (k.session != "" && slices.Contains(w.tried, k)) {
			continue
		}
		if !w.busy {
			pick = w
			break
		}
		if pick == nil {
			pick = w
		}
	}
	if pick == nil {
		return false
	}
	parked := !pick.busy
	pick.wake <- k
	pick.busy = true
	q.wakes.Inc()
	if parked && pick.resume != nil {
		go pick.resume()
	}
	return true
}

// parkOrTake parks w, which has no goroutine while parked (resume): it
// returns a wake that came while w was claiming, to claim again with,
// or, when w's wait ended meanwhile (end), ended true; otherwise w is
// parked and its goroutine returns.
func (q *claimWaits) parkOrTake(w *claimWaiter) (k wakeKey, took, ended bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.ended {
		return wakeKey{}, false, true
	}
	select {
	case k := <-w.wake:
		return k, true, false
	default:
	}
	w.busy = false
	return wakeKey{}, false, false
}

// end marks w's wait over (its deadline, its context); true when w was
// parked, so that the caller, not a claim under way, answers it.
func (q *claimWaits) end(w *claimWaiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.ended {
		return false
	}
	w.ended = true
	if w.busy {
		return false
	}
	w.busy = true
	return true
}

// look wakes the first free request of every outpost (of outpost, when
// set) to claim without a session in mind: after wakes may have been lost.
func (q *claimWaits) look(outpost string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if outpost != "" {
		q.wakeLocked(outpost, wakeKey{})
		return
	}
	for id := range q.outposts {
		q.wakeLocked(id, wakeKey{})
	}
}

// pending wakes a waiter for an entry this server wrote or read, when it
// is claimable: pending and neither asleep nor over.
func (q *claimWaits) pending(e *store.QueueEntry) {
	if e == nil || !wakesWaiter(e) {
		return
	}
	q.wake(e.OutpostID, wakeKey{session: e.SessionID, rev: e.Rev})
}

func wakesWaiter(e *store.QueueEntry) bool {
	return e.Phase == api.PhasePending && e.SessionStatus != api.QueueSessionSuspended && e.SessionStatus != api.QueueSessionTerminated
}

// changedElsewhere follows a queue entry another replica wrote: when
// requests wait here for its outpost, it reads the entry back (the change
// does not say its phase) and wakes one if it is pending.
func (s *Server) changedElsewhere(c store.Change) {
	if !s.claimWaits.waiting(c.OutpostID) {
		return
	}
	s.wg.Go(func() {
		e, err := s.store.GetQueueEntry(s.runCtx, c.SessionID)
		if err != nil || e.Rev < c.Rev {
			// Gone, or not yet visible: a newer change, or the waiters'
			// own looks, will tell.
			return
		}
		s.claimWaits.pending(&e)
	})
}

// checkClaimWait answers 400 for a wait out of range.
func checkClaimWait(req api.ClaimNextRequest) error {
	if req.WaitSeconds < 0 || req.WaitSeconds > api.MaxClaimNextWait {
		return errBadRequest("wait_seconds must be 0 (answer at once) to %d; it is %d.", api.MaxClaimNextWait, req.WaitSeconds)
	}
	return nil
}

// claimPickTimeout bounds a parked request's pick, which its claimer's
// leaving does not end.
const claimPickTimeout = 15 * time.Second

// claimWaitHeader says on an answer that this server parks claim-next
// requests, and for how long at most.
var claimWaitHeader = strconv.Itoa(api.MaxClaimNextWait)

// claimNextWaiting is claimNext for a request that may wait: it parks on
// the outpost's wait list between picks until a pick claims, the wait is
// over or the server stops (false then), or ctx ends.
func (s *Server) claimNextWaiting(ctx context.Context, outpostID string, req api.ClaimNextRequest) (lifecycle.Grant, bool, error) {
	if req.WaitSeconds <= 0 {
		return s.claimNext(ctx, outpostID, req)
	}
	q := s.claimWaits
	w := q.join(outpostID)
	defer q.leave(w)
	return s.waitForClaim(ctx, outpostID, req, w, time.Now().Add(time.Duration(req.WaitSeconds)*time.Second), true)
}

// waitForClaim picks (at once when pickFirst, else once woken) and parks w
// between picks until a pick claims, deadline passes or the server stops
// (false then), or ctx ends. w has joined its list; the caller leaves it.
func (s *Server) waitForClaim(ctx context.Context, outpostID string, req api.ClaimNextRequest, w *claimWaiter, deadline time.Time, pickFirst bool) (lifecycle.Grant, bool, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var woke *wakeKey // what woke the pick; nil for its own
	pick := pickFirst
	for {
		if pick {
			if res, ok, err, done := s.claimPick(ctx, outpostID, req, w, woke); done {
				return res, ok, err
			}
		}
		pick = true
		s.claimWaits.park(w)
		select {
		case k := <-w.wake:
			woke = &k
		case <-timer.C:
			return lifecycle.Grant{}, false, nil
		case <-s.runCtx.Done():
			return lifecycle.Grant{}, false, nil
		case <-ctx.Done():
			if s.runCtx.Err() != nil {
				return lifecycle.Grant{}, false, nil
			}
			return lifecycle.Grant{}, false, ctx.Err()
		}
	}
}

// claimPick is one pick of a waiting request w, woken by woke (nil: its
// own first pick): done when the request is answered by it (a claim, an
// error, the server stopping); otherwise it parks again, and a session
// it was woken for and could not take is passed on.
func (s *Server) claimPick(ctx context.Context, outpostID string, req api.ClaimNextRequest, w *claimWaiter, woke *wakeKey) (res lifecycle.Grant, ok bool, err error, done bool) {
	q := s.claimWaits
	// A pick runs to its end even when the claimer leaves meanwhile
	// (a consumer cuts a parked request short to ask with another
	// exclude list): a claim the store made as the request ended is
	// then released by the handler, never left to lapse.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimPickTimeout)
	res, ok, err = s.claimNext(pctx, outpostID, req)
	cancel()
	if err != nil && !ok && s.runCtx.Err() != nil {
		// Requests end with the server (their base context): a
		// parked one is answered that there is nothing, promptly.
		return lifecycle.Grant{}, false, nil, true
	}
	if err != nil || ok {
		q.leave(w)
		if woke != nil && (ok && res.Entry.SessionID != woke.session || errors.Is(err, store.ErrTokenRevoked)) {
			// It took another (older, or of higher priority), or its
			// token was revoked while it waited: the one it was woken
			// for, or the look, goes on.
			q.wake(outpostID, *woke)
		}
		return res, ok, err, true
	}
	if woke != nil && woke.session != "" {
		q.missed(w, *woke)
		// Still pending: not for this request; the next may take it.
		// Read apart from the request, which may have ended meanwhile:
		// the wake must pass on all the same.
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimPickTimeout)
		e, err := s.store.GetQueueEntry(gctx, woke.session)
		cancel()
		if err == nil && wakesWaiter(&e) {
			q.wake(outpostID, *woke)
		}
	}
	return lifecycle.Grant{}, false, nil, false
}

// idleWait holds a request that may wait but can never be given a session
// (the outpost wants a desktop it cannot give) until its wait is over, so
// that its claimer does not ask again at once.
func (s *Server) idleWait(ctx context.Context, req api.ClaimNextRequest) error {
	if req.WaitSeconds <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(req.WaitSeconds) * time.Second)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.runCtx.Done():
	case <-ctx.Done():
		if s.runCtx.Err() == nil {
			return ctx.Err()
		}
	}
	return nil
}

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Store is what a Machine needs of the store: one transaction of a
// session, in its three forms, and what the sweeps list and write in
// bulk.
type Store interface {
	UpdateSession(ctx context.Context, id string, fn func(s store.Session, e store.QueueEntry) (store.Mutation, error)) (store.Mutation, error)
	ClaimSession(ctx context.Context, id string, now time.Time, tokenID string, fn func(s store.Session, e store.QueueEntry, load store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error)
	ClaimNext(ctx context.Context, outpostID string, now time.Time, tokenID string, f store.NextFilter, fn func(s store.Session, e store.QueueEntry, load store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error)
	NextSkippedLocked(ctx context.Context, outpostID string, f store.NextFilter) (bool, error)

	GetSession(ctx context.Context, id string) (store.Session, error)
	ListStartedSessions(ctx context.Context) ([]store.Session, error)
	LapsedClaims(ctx context.Context, now time.Time) ([]string, error)
	ClaimsOfToken(ctx context.Context, tokenID string) ([]string, error)
	KeepAlive(ctx context.Context, until time.Time, leases ...store.Lease) error
	TombstoneEnded(ctx context.Context, before, now time.Time, limit int) ([]store.QueueEntry, error)
}

// Hooks are what must follow a committed transition. A nil hook is
// skipped. They run after the commit, in the caller's goroutine, never
// inside a transaction.
type Hooks struct {
	// Committed follows every committed transition, first: wake the
	// queue's watchers, cut off remotes of dead epochs, publish the events.
	Committed func(sessionID string, m store.Mutation)
	// Claims counts a claim's outcome: claimed, renewed, conflict,
	// at_capacity, lapsed, released or error.
	Claims func(outcome string)
	// Waited follows a fresh claim of a session that waited d in its
	// queue (since it was created or last requeued).
	Waited func(ctx context.Context, e store.QueueEntry, d time.Duration)
	// Attempt follows the end of a claim of a session (how: released,
	// lapsed or exhausted); m is what was committed.
	Attempt func(ctx context.Context, m store.Mutation, how string)
	// Exhausted follows, after Committed and Attempt, the end of a session
	// whose last attempt failed (a lapse or a release): stop its runner,
	// tell its remote.
	Exhausted func(ctx context.Context, sessionID string, m store.Mutation)
	// Ended follows a committed End and returns what must follow it once
	// the caller's locks are released (stop the runner, tell the remote);
	// nil for nothing.
	Ended func(sessionID, status, detail, reason string) func()
	// Attached reports whether a remote of the session is connected to
	// this process, and under which claim epoch: the lapse sweep keeps
	// such a claim alive rather than requeue it.
	Attached func(sessionID string) (epoch int64, ok bool)
}

// Options configure a Machine. The zero value of each field is usable
// except Store's.
type Options struct {
	// Store is where transitions are committed. Required.
	Store Store
	// Hooks follow committed transitions.
	Hooks Hooks
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// ClaimTTL is how long a claim holds without a renewal; zero hands
	// out claims that lapse at once.
	ClaimTTL time.Duration
	// ReconnectGrace is how long KeepAlive keeps a connected claim alive
	// from now; zero lets it lapse as soon as its deadline has passed.
	ReconnectGrace time.Duration
	// SweepInterval spaces the rounds of the lapse sweep (Run); zero
	// means a second.
	SweepInterval time.Duration
	// EndedRetention is how long the entry of a session that ended stays
	// listed (terminated) before the ended-entry sweep makes it a
	// tombstone; zero or negative deletes it at once.
	EndedRetention time.Duration
	// NewToken issues a claim's connect token and the hash the store
	// keeps; nil issues empty tokens.
	NewToken func() (token, hash string)
	// Log gets the transitions worth a line; nil discards.
	Log *slog.Logger
}

// Machine runs the session state machine against a store: each method is
// one transition, decided by this package's functions inside the store's
// transaction for the session and followed by the hooks once committed.
// Its methods are the way a claim changes hands; it is safe for
// concurrent use.
type Machine struct {
	opts Options
}

// New returns a Machine with opts.
func New(opts Options) *Machine {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewToken == nil {
		opts.NewToken = func() (string, string) { return "", "" }
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = time.Second
	}
	h := &opts.Hooks
	if h.Committed == nil {
		h.Committed = func(string, store.Mutation) {}
	}
	if h.Claims == nil {
		h.Claims = func(string) {}
	}
	if h.Waited == nil {
		h.Waited = func(context.Context, store.QueueEntry, time.Duration) {}
	}
	if h.Attempt == nil {
		h.Attempt = func(context.Context, store.Mutation, string) {}
	}
	if h.Exhausted == nil {
		h.Exhausted = func(context.Context, string, store.Mutation) {}
	}
	if h.Ended == nil {
		h.Ended = func(string, string, string, string) func() { return nil }
	}
	if h.Attached == nil {
		h.Attached = func(string) (int64, bool) { return 0, false }
	}
	return &Machine{opts: opts}
}

// keepEnded reports whether the entry of a session that ends stays listed.
func (mc *Machine) keepEnded() bool { return mc.opts.EndedRetention > 0 }

// Grant is a claim handed out: the entry as committed and the connect
// token issued for its epoch.
type Grant struct {
	Entry   store.QueueEntry
	Token   string
	Renewed bool // the caller held the claim already
	// Desktop is the outpost's desktop setting as the claim's
	// transaction read it (nil: none).
	Desktop *api.OutpostDesktop
}

// claimTx is one claim's transaction function and what it decided.
type claimTx struct {
	req   ClaimRequest
	token string
	// check, when set, runs first on the entry fn sees; its error aborts.
	check func(e store.QueueEntry) error
	got   Claimed
	load  store.OutpostLoad // what the committed try read
	// checkErr is check's error on the last try: the claim never
	// started, and counts as no outcome.
	checkErr error
}

func (mc *Machine) newClaimTx(acceptor, tokenID string) *claimTx {
	token, hash := mc.opts.NewToken()
	return &claimTx{token: token, req: ClaimRequest{Acceptor: acceptor, Now: mc.opts.Now(), TTL: mc.opts.ClaimTTL,
		TokenHash: hash, KeepEnded: mc.keepEnded(), TokenID: tokenID}}
}

// fn runs in the store's transaction; the store may run it more than once.
func (c *claimTx) fn(sess store.Session, e store.QueueEntry, load store.OutpostLoad) (store.Mutation, error) {
	c.got, c.load, c.checkErr = Claimed{}, load, nil
	if c.check != nil {
		if err := c.check(e); err != nil {
			c.checkErr = err
			return store.Mutation{}, err
		}
	}
	got, err := Claim(sess, e, load, c.req)
	if err != nil {
		return store.Mutation{}, err
	}
	c.got = got
	return got.Mutation, nil
}

// Claim claims session sessionID for acceptor, or renews acceptor's claim
// of it (see the function Claim), asking without a stored token.
func (mc *Machine) Claim(ctx context.Context, sessionID, acceptor string) (Grant, error) {
	return mc.ClaimWith(ctx, sessionID, acceptor, "")
}

// ClaimWith is Claim for a claimer that asked with token tokenID: the
// claim remembers it, and revoking the token releases the claim
// (RevokeClaims).
func (mc *Machine) ClaimWith(ctx context.Context, sessionID, acceptor, tokenID string) (Grant, error) {
	return mc.ClaimIf(ctx, sessionID, acceptor, tokenID, nil)
}

// ClaimIf is ClaimWith whose transaction first runs check, when not nil,
// on the entry as it read it under the session's lock: an error from
// check aborts the claim, changes nothing and is returned as is. The
// caller checks there what it would otherwise read the entry for before
// the claim (that the caller may see it), in the claim's own reads.
func (mc *Machine) ClaimIf(ctx context.Context, sessionID, acceptor, tokenID string, check func(e store.QueueEntry) error) (Grant, error) {
	c := mc.newClaimTx(acceptor, tokenID)
	c.check = check
	m, err := mc.opts.Store.ClaimSession(ctx, sessionID, c.req.Now, tokenID, c.fn)
	return mc.claimed(ctx, c, m, err)
}

// errRaced aborts a ClaimNext whose pick another writer changed between
// the pick and its lock (PostgreSQL only): the next pick skips it.
var errRaced = errors.New("the picked entry changed before it was locked")

// errUnfit aborts a ClaimNext whose pick has requirements the claimer's
// machine does not meet: the next pick skips it.
var errUnfit = errors.New("the picked entry needs another machine")

// maxUnfitPicks bounds the picks of one ClaimNext skipped for their
// requirements. Entries with requirements are checked one transaction
// each, so a queue whose head holds more sessions this machine cannot
// serve than this answers "none" until some of them are claimed
// elsewhere: a claimer that keeps seeing work asks again on its next hint.
const maxUnfitPicks = 32

// maxClaimNextPicks bounds the picks of one ClaimNext that each lost a
// race to another writer.
const maxClaimNextPicks = 10

// ClaimNext claims for acceptor the first claimable pending session of
// outpost outpostID that f lets through and whose requirements machine m
// meets; false when there is none. Entries with requirements are picked
// only when m is set or f.Placed (a claimer that provisions machines to
// fit), and checked only against a non-nil m. The
// store picks in claim order inside the claim's own transaction, so
// concurrent claimers get different sessions. tokenID is the token the
// claimer asked with, as in ClaimWith ("" for none).
func (mc *Machine) ClaimNext(ctx context.Context, outpostID, acceptor, tokenID string, f store.NextFilter, m *api.ClaimMachine) (Grant, bool, error) {
	g, end, err := mc.claimNext(ctx, outpostID, acceptor, tokenID, f, m)
	return g, end.kind == nextClaimed, err
}

// nextEnd is how a ClaimNext ended.
type nextEnd struct {
	kind nextKind
	// fitted: the answer depended on the claimer's machine. A none
	// passed over entries whose requirements the machine does not meet;
	// a refusal at capacity was of an entry with requirements, which
	// another machine might not have reached. Without it the answer is
	// every claimer's with the same filter.
	fitted bool
}

// nextKind is what a ClaimNext answered.
type nextKind int

const (
	// nextClaimed: it claimed a session.
	nextClaimed nextKind = iota
	// nextNone: the store found no entry left to pick.
	nextNone
	// nextGaveUp: every pick lost a race or did not fit, and the claimer
	// asks again on its next hint.
	nextGaveUp
	// nextFailed: it answered an error.
	nextFailed
)

// claimNext is ClaimNext, saying how it ended.
func (mc *Machine) claimNext(ctx context.Context, outpostID, acceptor, tokenID string, f store.NextFilter, m *api.ClaimMachine) (Grant, nextEnd, error) {
	f.Exclude = append([]string(nil), f.Exclude...)
	f.Placed = f.Placed || m != nil
	unfit := 0
	for picks := 0; picks < maxClaimNextPicks+unfit && unfit < maxUnfitPicks; picks++ {
		c := mc.newClaimTx(acceptor, tokenID)
		var raced string
		var placed bool // the entry checked last has requirements
		c.check = func(e store.QueueEntry) error {
			// What the pick selected, re-read under the session's lock.
			if !Pickable(e) {
				raced = e.SessionID
				return errRaced
			}
			placed = !e.Requirements.IsZero()
			if m != nil && e.Requirements.Unmet(m.Capabilities, m.Labels) != nil {
				raced = e.SessionID
				return errUnfit
			}
			return nil
		}
		m, err := mc.opts.Store.ClaimNext(ctx, outpostID, c.req.Now, tokenID, f, c.fn)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// A pick skips entries other transactions hold locked
			// (PostgreSQL). Nothing left is an answer for every claimer
			// only when no such entry is there: one held by a claim
			// that then fails (at capacity, unfit, a lost race) stays
			// pending, and the claimers a shared none answered would
			// not ask again until the queue changed.
			if skipped, err := mc.opts.Store.NextSkippedLocked(ctx, outpostID, f); err != nil || skipped {
				return Grant{}, nextEnd{kind: nextGaveUp}, nil
			}
			return Grant{}, nextEnd{kind: nextNone, fitted: unfit > 0}, nil
		case errors.Is(err, errRaced):
			f.Exclude = append(f.Exclude, raced)
			continue
		case errors.Is(err, errUnfit):
			unfit++
			f.Exclude = append(f.Exclude, raced)
			continue
		}
		g, err := mc.claimed(ctx, c, m, err)
		if err != nil {
			return Grant{}, nextEnd{kind: nextFailed, fitted: placed}, err
		}
		return g, nextEnd{kind: nextClaimed}, nil
	}
	// Every pick lost its race: the claimer asks again on its next hint.
	return Grant{}, nextEnd{kind: nextGaveUp}, nil
}

// claimed follows a claim's transaction (m, err): counts its outcome and
// publishes what it committed.
func (mc *Machine) claimed(ctx context.Context, c *claimTx, m store.Mutation, err error) (Grant, error) {
	h := mc.opts.Hooks
	if err != nil && (c.checkErr != nil && errors.Is(err, c.checkErr) || errors.Is(err, store.ErrNotFound)) {
		return Grant{}, err // no claim was tried: no session, or check refused
	}
	if err != nil {
		outcome := "error"
		switch {
		case errors.Is(err, ErrAtCapacity):
			outcome = "at_capacity"
		case errors.Is(err, ErrConflict), errors.Is(err, ErrEnded):
			outcome = "conflict"
		case errors.Is(err, store.ErrTokenRevoked):
			outcome = "unauthorized"
		}
		h.Claims(outcome)
		return Grant{}, err
	}
	sessionID := m.Entry.SessionID
	if c.got.Exhausted {
		h.Claims("lapsed")
		mc.exhausted(ctx, sessionID, m)
		h.Claims("conflict")
		return Grant{}, c.got.Err()
	}
	g := Grant{Entry: *m.Entry, Token: c.token, Renewed: c.got.Renewed, Desktop: c.load.Desktop}
	if g.Renewed {
		h.Claims("renewed")
	} else {
		h.Claims("claimed")
		h.Waited(ctx, g.Entry, c.req.Now.Sub(c.got.Queued))
	}
	h.Committed(sessionID, m)
	return g, nil
}

// exhausted follows a committed transition in which a session's last
// attempt failed and it ended.
func (mc *Machine) exhausted(ctx context.Context, sessionID string, m store.Mutation) {
	h := mc.opts.Hooks
	h.Committed(sessionID, m)
	h.Attempt(ctx, m, "exhausted")
	mc.opts.Log.Info("session ended: its attempts ran out", "session", sessionID, "attempts", m.Entry.Attempts, "reason", m.Session.Reason)
	h.Exhausted(ctx, sessionID, m)
}

// Release gives acceptor's claim of session sessionID back (see the
// function Release) and returns the entry as committed.
func (mc *Machine) Release(ctx context.Context, sessionID, acceptor, reason string, shutdown bool) (store.QueueEntry, error) {
	return mc.ReleaseIf(ctx, sessionID, acceptor, reason, shutdown, nil)
}

// ReleaseIf is Release whose transaction first runs check, when not nil,
// on the entry as it read it under the session's lock, as ClaimIf does:
// an error from check aborts the release, changes nothing and is returned
// as is.
func (mc *Machine) ReleaseIf(ctx context.Context, sessionID, acceptor, reason string, shutdown bool, check func(e store.QueueEntry) error) (store.QueueEntry, error) {
	now := mc.opts.Now()
	var ended bool // the release was the session's last attempt
	m, err := mc.opts.Store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if check != nil {
			if err := check(e); err != nil {
				return store.Mutation{}, err
			}
		}
		m, end, err := Release(sess, e, now, acceptor, reason, shutdown, mc.keepEnded())
		ended = end
		return m, err
	})
	if err != nil {
		return store.QueueEntry{}, err
	}
	mc.opts.Hooks.Claims("released")
	if ended {
		mc.exhausted(ctx, sessionID, m)
	} else {
		mc.opts.Hooks.Committed(sessionID, m)
		mc.opts.Hooks.Attempt(ctx, m, "released")
	}
	return *m.Entry, nil
}

// RevokeClaims releases every claim that token tokenID took or last
// renewed (see the function RevokeClaim), once the token is revoked, and
// returns the ids of the sessions released. Each release is a transaction
// of its own, committed and published as a release is: the change of
// epoch fences the remote's connection on whichever replica holds it. A
// claim that changed hands meanwhile is left alone.
func (mc *Machine) RevokeClaims(ctx context.Context, tokenID string) ([]string, error) {
	ids, err := mc.opts.Store.ClaimsOfToken(ctx, tokenID)
	if err != nil {
		return nil, fmt.Errorf("claims of token %s: %w", tokenID, err)
	}
	var released []string
	var errs []error
	for _, id := range ids {
		now := mc.opts.Now()
		m, err := mc.opts.Store.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			m, _ := RevokeClaim(sess, e, now, tokenID, mc.keepEnded())
			return m, nil
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue // deleted meanwhile
		case err != nil:
			errs = append(errs, fmt.Errorf("release the claim of session %s: %w", id, err))
			continue
		case m.Entry == nil:
			continue
		}
		released = append(released, id)
		mc.opts.Hooks.Claims("released")
		mc.opts.Log.Info("claim released: its token was revoked", "session", id, "token", tokenID)
		mc.opts.Hooks.Committed(id, m) // no Attempt: no failed attempt of the session
	}
	return released, errors.Join(errs...)
}

// Lapse requeues session sessionID if its claim is still lapsed (see the
// function Lapse); the sweep of lapsed claims calls it.
func (mc *Machine) Lapse(ctx context.Context, sessionID string) error {
	now := mc.opts.Now()
	var ended bool // the lapse was the session's last attempt
	m, err := mc.opts.Store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		m, _, end := Lapse(sess, e, now, mc.keepEnded())
		ended = end
		return m, nil
	})
	if err != nil {
		return err
	}
	switch {
	case m.Entry == nil:
	case ended:
		mc.opts.Hooks.Claims("lapsed")
		mc.exhausted(ctx, sessionID, m)
	default:
		mc.opts.Hooks.Claims("lapsed")
		mc.opts.Log.Info("claim lapsed; session requeued", "session", sessionID, "kind", m.Entry.Kind, "attempts", m.Entry.Attempts)
		mc.opts.Hooks.Committed(sessionID, m)
		mc.opts.Hooks.Attempt(ctx, m, "lapsed")
	}
	return nil
}

// End moves session sessionID to a final status (see the function End); a
// no-op on a session that already ended. It returns what must follow —
// the Ended hook's work, which may take seconds — so that a caller holding
// a lock over the transition can release it first. The returned func is
// never nil.
func (mc *Machine) End(ctx context.Context, sessionID, status, detail, reason string) (func(), error) {
	now := mc.opts.Now()
	m, err := mc.opts.Store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		return End(sess, e, now, status, detail, reason, mc.keepEnded()), nil
	})
	if err != nil {
		return func() {}, fmt.Errorf("end session %s: %w", sessionID, err)
	}
	if m.Session == nil {
		return func() {}, nil
	}
	mc.opts.Hooks.Committed(sessionID, m)
	return mc.Ended(sessionID, status, detail, reason), nil
}

// EndIn is the function EndIn, the entry kept listed as EndedRetention
// says: a session's end folded into a transaction of the caller's, which
// read sess and e and found the session not ended. Once the caller has
// committed and published m, Ended does the rest.
func (mc *Machine) EndIn(sess *store.Session, e store.QueueEntry, m *store.Mutation, now time.Time, status, detail, reason string) {
	EndIn(sess, e, m, now, status, detail, reason, mc.keepEnded())
}

// Ended follows an end the caller committed and published itself (EndIn):
// it returns what must follow, as End does. The returned func is never
// nil.
func (mc *Machine) Ended(sessionID, status, detail, reason string) func() {
	if after := mc.opts.Hooks.Ended(sessionID, status, detail, reason); after != nil {
		return after
	}
	return func() {}
}

// Drop deletes session sessionID's queue entry whatever its claim.
func (mc *Machine) Drop(ctx context.Context, sessionID string) error {
	now := mc.opts.Now()
	m, err := mc.opts.Store.UpdateSession(ctx, sessionID, func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
		return Drop(e, now), nil
	})
	if err != nil {
		return fmt.Errorf("drop queue entry %s: %w", sessionID, err)
	}
	mc.opts.Hooks.Committed(sessionID, m)
	return nil
}

// Suspend moves session sessionID to suspended once the remote of its
// claim epoch has taken its snapshot (see the function Suspend), and
// publishes it. The snapshot event is dated with the transition.
func (mc *Machine) Suspend(ctx context.Context, sessionID string, epoch int64, reason string, snapshot api.Event) error {
	now := mc.opts.Now()
	snapshot.Time = now.UnixMilli()
	m, err := mc.opts.Store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		return Suspend(sess, e, now, epoch, reason, snapshot)
	})
	if err != nil {
		return err
	}
	mc.opts.Hooks.Committed(sessionID, m)
	return nil
}

// Resume puts suspended session sessionID back in its queue (see the
// function Resume), publishes it and returns the session as committed.
func (mc *Machine) Resume(ctx context.Context, sessionID, why string) (store.Session, error) {
	now := mc.opts.Now()
	m, err := mc.opts.Store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		return Resume(sess, e, now, why)
	})
	if err != nil {
		return store.Session{}, err
	}
	mc.opts.Hooks.Committed(sessionID, m)
	return *m.Session, nil
}

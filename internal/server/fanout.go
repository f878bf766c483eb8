package server

import (
	"context"
	"errors"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Cross-replica fan-out. A server publishes what its own transactions
// commit in process (committed, topics.publish); when it shares its
// database with other replicas, the store's change feed (a
// store.ChangeFeed: PostgreSQL LISTEN/NOTIFY) tells it what they commit,
// and fanout wakes whoever here follows it:
//
//   - transcript followers of the session are poked (topics.poke): they
//     replay the store up to the change's seq, so an event committed
//     elsewhere reaches them in order, from the database;
//   - queue watchers wake and read the queue after their cursor;
//   - llm runners waiting for a user message wake (and the agent loop's
//     subscription of the session is dropped, so its runner reads the
//     store);
//   - the session's remote connected here is cut off if the change moved
//     its claim to a newer epoch (hub.fence).
//
// The store is the truth and a wake-up only says where to look, so a lost
// one costs time, not data: after the feed (re)connects (a Resync) every
// follower replays, every watcher and runner wakes and every connection's
// epoch is checked, and every fanoutPoll a backstop does much the same
// (see backstop) for what a replica that died between a commit and its
// notification did not tell.

// defaultFanoutPoll spaces the backstop polls.
const defaultFanoutPoll = 5 * time.Second

// fanout consumes the store's change feed until ctx ends. It does nothing
// when the store has none (one server, SQLite).
func (s *Server) fanout(ctx context.Context) {
	feed, ok := s.store.(store.ChangeFeed)
	if !ok {
		return
	}
	resync := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.backstop(ctx, resync)
	}()
	err := feed.Listen(ctx, func(c store.Change) { s.onChange(c, resync) })
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Error("change feed stopped", "err", err)
	}
	<-done
}

// onChange wakes what follows c here; a Resync also asks the backstop for
// a round at once. It runs on the feed's goroutine and reads nothing.
func (s *Server) onChange(c store.Change, resync chan<- struct{}) {
	if c.Resync {
		if c.Err != nil {
			s.log.Warn("the change feed reconnected; reading again what is followed here", "err", c.Err)
		}
		s.wakeAll()
		for _, rc := range s.hub.List() {
			s.endIfEnded(rc.SessionID)
		}
		select {
		case resync <- struct{}{}:
		default:
		}
		return
	}
	if c.Origin == s.opts.ReplicaID {
		return // published in process when it committed
	}
	if c.SessionID == "" {
		s.queueFeed.Notify(c.OutpostID) // an outpost created or deleted
		return
	}
	if c.Seq > 0 {
		s.topics.poke(c.SessionID, c.Seq)
		s.userMessages.Notify()
	}
	if c.Rev > 0 {
		s.queueFeed.Notify(c.OutpostID)
		s.changedElsewhere(c)
		s.hub.Fence(c.SessionID, c.Epoch)
		if s.hub.Get(c.SessionID) != nil {
			s.endIfEnded(c.SessionID)
		}
	}
}

// endIfEnded tells the session's remote connected here that the session is
// over, and stops its runner, when another replica ended it (a terminate
// served where it arrived, an outpost deleted, a limit's sweep): that
// replica's own hub.end found no connection. It reads the store on a
// goroutine of its own, so the feed is not held up.
func (s *Server) endIfEnded(sessionID string) {
	s.wg.Go(func() {
		sess, err := s.store.GetSession(s.runCtx, sessionID)
		if err != nil || !api.IsFinal(sess.Status) {
			return
		}
		s.stopRunner(sessionID) // first, so no call follows the end frame
		s.hub.End(sessionID, sess.Reason)
	})
}

// wakeAll wakes every follower, watcher and runner to read the store.
func (s *Server) wakeAll() {
	s.topics.pokeEvery(true)
	s.queueFeed.Notify("")
	s.userMessages.Notify()
	s.claimWaits.look("")
}

// backstop runs a round every fanoutPoll, and at once on resync, until ctx
// ends: queue entries changed since the last round (by their rev) fence
// the connections here and wake the watchers, and every transcript
// follower replays the store. The agent loop's runners are left alone: a
// runner here whose session another replica wrote to, and failed to tell
// (it died between its commit and its notification), reads the store at
// its next step, or, waiting for the user, when its idle limit ends (it
// reads the transcript before it ends the session, runner.finish) — with
// ownership (a session's loop runs where its remote is connected and
// messages are forwarded there) such writes are rare, and dropping every
// runner's subscription every poll would cost each a read.
func (s *Server) backstop(ctx context.Context, resync <-chan struct{}) {
	t := time.NewTicker(s.opts.fanoutPoll)
	defer t.Stop()
	rev, err := s.store.MaxRev(ctx)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("fan-out backstop: read the queue's rev", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.topics.pokeEvery(false)
		case <-resync:
		}
		next, err := s.fenceChanged(ctx, rev)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("fan-out backstop: read the queue's changes", "err", err)
			}
			continue
		}
		if next != rev {
			rev = next
			s.queueFeed.Notify("")
			s.claimWaits.look("")
		}
	}
}

// fenceChanged fences the connections of the sessions whose entries
// changed after rev, and returns the highest rev it read.
func (s *Server) fenceChanged(ctx context.Context, rev int64) (int64, error) {
	const page = 1000
	for {
		rows, _, err := s.store.ListQueue(ctx, store.QueueFilter{AfterRev: rev, Limit: page, IncludeDeleted: true, NoTotal: true})
		if err != nil {
			return rev, err
		}
		for _, e := range rows {
			s.hub.Fence(e.SessionID, e.Epoch)
			rev = e.Rev
		}
		if len(rows) < page {
			return rev, nil
		}
	}
}

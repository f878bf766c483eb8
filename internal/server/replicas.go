package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lazyregexp"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres"
)

// Replicas. Several server processes (replicas) may share one PostgreSQL
// database. Each heartbeats a row in the store's replicas table; the
// replica whose gateway holds a session's remote connection is the
// session's owner (QueueEntry.Owner, written when the remote says hello).
// The owner runs the session's agent loop: the loop's writes are refused
// on any other replica (ownedStore), requests that need the connection are
// forwarded to it (forward.go), and a replica a remote leaves for another
// is told to drop its connection and runner at once. With one server on
// SQLite none of this runs: nothing is shared, nothing is looked up.

const (
	// replicaHeartbeatEvery spaces a replica's heartbeats.
	replicaHeartbeatEvery = 2 * time.Second
	// replicaLiveFor is how long after its last heartbeat a replica is
	// taken as live.
	replicaLiveFor = 10 * time.Second
	// replicaRefreshMin is the least time between two reads of the
	// replicas table on a miss of the cache (an owner not known live).
	replicaRefreshMin = 500 * time.Millisecond
)

// defaultReplicaID is the hostname and a random suffix, new at each start.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "outpost"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// replicaIDPattern is what a replica id may be: it goes into signed
// headers between replicas, change payloads and metric labels.
var replicaIDPattern = lazyregexp.New(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$`)

// checkReplicaID refuses a replica id other replicas could not name.
func checkReplicaID(id string) error {
	if !replicaIDPattern.MatchString(id) {
		return fmt.Errorf("the replica id %q is not valid: use 1 to 200 letters, digits, '.', '_', ':' or '-', starting with a letter or digit", id)
	}
	return nil
}

// defaultReplicaURL is scheme + the bound address when it names a host
// other replicas can dial, else "" (a wildcard address names none).
func defaultReplicaURL(scheme string, addr net.Addr) string {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return ""
	}
	return scheme + addr.String()
}

// sharedStore reports whether st may be shared by several servers: a
// PostgreSQL store is, the embedded SQLite store never.
func sharedStore(st store.Store) bool {
	_, ok := st.(*postgres.Store)
	return ok
}

// replicaSet caches the live replicas (this one among them), refreshed at
// every heartbeat and, at most every replicaRefreshMin, on a miss.
type replicaSet struct {
	mu        sync.Mutex        // guards the following
	urls      map[string]string // live replica id → URL ("" when it cannot be reached)
	refreshed time.Time
}

// set replaces the cache with rs.
func (c *replicaSet) set(rs []store.Replica, at time.Time) {
	urls := make(map[string]string, len(rs))
	for _, r := range rs {
		urls[r.ID] = r.URL
	}
	c.mu.Lock()
	c.urls, c.refreshed = urls, at
	c.mu.Unlock()
}

// lookup returns the URL of live replica id and whether it is known live.
func (c *replicaSet) lookup(id string) (string, bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.urls[id]
	return u, ok, c.refreshed
}

// replicaURL returns the URL of replica id while it is live, else "",
// reading the replicas table again on a miss (not more often than
// replicaRefreshMin).
func (s *Server) replicaURL(ctx context.Context, id string) string {
	u, ok, at := s.replicas.lookup(id)
	if ok || time.Since(at) < replicaRefreshMin {
		return u
	}
	if err := s.refreshReplicas(ctx); err != nil {
		s.log.Warn("list replicas", "err", err)
		return ""
	}
	u, _, _ = s.replicas.lookup(id)
	return u
}

// refreshReplicas reads the live replicas into the cache.
func (s *Server) refreshReplicas(ctx context.Context) error {
	now := time.Now()
	rs, err := s.store.ListReplicas(ctx, now.Add(-replicaLiveFor))
	if err != nil {
		return err
	}
	s.replicas.set(rs, now)
	return nil
}

// heartbeat writes this replica's row once.
func (s *Server) heartbeat(ctx context.Context) error {
	now := time.Now()
	return s.store.HeartbeatReplica(ctx, store.Replica{ID: s.opts.ReplicaID, URL: s.opts.ReplicaURL, StartedAt: s.startedAt, SeenAt: now})
}

// heartbeatReplica heartbeats this replica's row and refreshes the cache of
// the live ones until ctx ends. The row itself is deleted by a graceful stop.
func (s *Server) heartbeatReplica(ctx context.Context) {
	loop.Every(ctx, replicaHeartbeatEvery, func(ctx context.Context) {
		if err := s.heartbeat(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("replica heartbeat", "replica", s.opts.ReplicaID, "err", err)
		}
		if err := s.refreshReplicas(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("list replicas", "err", err)
		}
	})
}

// errNotOwner refuses a write of the agent loop of a replica that does not
// own the session (see ownedStore).
type errNotOwner struct{ sessionID, owner string }

func (e errNotOwner) Error() string {
	return fmt.Sprintf("session %s is owned by replica %s: this replica's runner may not write it", e.sessionID, e.owner)
}

// ownedStore is the store of the agent loop on a shared database: its
// writes are refused, in their own transaction, when the session's entry
// names another replica as owner, and the runner that tried is stopped.
// So however late a replica learns that a remote moved, exactly one loop
// writes a session's transcript.
type ownedStore struct {
	agent.Store
	s *Server
}

// loopStore is the store the agent loop is given.
func (s *Server) loopStore() agent.Store {
	if !s.shared {
		return s.store
	}
	return ownedStore{Store: s.store, s: s}
}

// UpdateSession runs fn unless another replica owns the session.
func (o ownedStore) UpdateSession(ctx context.Context, id string, fn func(store.Session, store.QueueEntry) (store.Mutation, error)) (store.Mutation, error) {
	m, err := o.Store.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if e.Owner != "" && e.Owner != o.s.opts.ReplicaID {
			return store.Mutation{}, errNotOwner{id, e.Owner}
		}
		return fn(sess, e)
	})
	if _, ok := errors.AsType[errNotOwner](err); ok {
		o.s.log.Info("the session moved to another replica; its runner here stops", "session", id, "err", err)
		o.s.agents.StopSession(id) // the runner's retries end with its context
	}
	return m, err
}

// AppendEvents appends events unless another replica owns the session, in
// the transaction that checks it.
func (o ownedStore) AppendEvents(ctx context.Context, sessionID string, events []api.Event) error {
	if len(events) == 0 {
		return o.Store.AppendEvents(ctx, sessionID, events)
	}
	_, err := o.UpdateSession(ctx, sessionID, func(store.Session, store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{Events: events}, nil
	})
	return err
}

// handOver gives up this replica's sessions at once, on a graceful stop:
// for each connected remote it clears the entry's owner, keeping the claim
// alive for a reconnect grace, and closes the connection with
// api.CloseReconnectNow, which the remote takes as "reconnect now" — through
// the load balancer, to another replica, whose gateway takes the session
// on. The caller has closed the listener first.
func (s *Server) handOver() {
	conns := s.hub.List()
	if len(conns) == 0 {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.runCtx), 10*time.Second)
	defer cancel()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, c := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s.handOverOne(ctx, c)
		})
	}
	wg.Wait()
	s.log.Info("handed this replica's sessions over", "sessions", len(conns), "took", time.Since(start).Round(time.Millisecond))
}

// handOverOne clears c's session's owner and closes c.
func (s *Server) handOverOne(ctx context.Context, c *gateway.Conn) {
	now := s.now()
	m, err := s.store.UpdateSession(ctx, c.SessionID, func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
		if e.Owner != s.opts.ReplicaID || e.Epoch != c.Epoch {
			return store.Mutation{}, nil // another replica has it already
		}
		e.Owner = ""
		e.LiveUntil = now.Add(s.opts.ReconnectGrace)
		return store.Mutation{Entry: &e}, nil
	})
	if err != nil {
		s.log.Warn("hand a session over", "session", c.SessionID, "err", err)
	} else {
		s.committed(c.SessionID, m)
	}
	c.Moved.Store(true)
	c.Close(websocket.StatusCode(api.CloseReconnectNow), "this server is stopping; reconnect now")
	// Wait for the close to reach the remote: the server's stop, next,
	// cancels the connection's reads, which would cut it before the close
	// frame went and the remote would take it for a drop (and back off).
	c.Closed(2 * time.Second)
}

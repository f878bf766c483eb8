package server

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// Claim liveness. A claim promises a remote by its deadline; from the
// moment the remote says hello, its gateway connection holds the claim:
// the server keeps each connected claim alive through the state machine
// (lifecycle.Machine.KeepAlive), whose sweep requeues the claims that
// lapse.

// keepAliveEvery is how often connected claims are kept alive: three
// times per grace, so one slow or failed write costs nothing.
func (s *Server) keepAliveEvery() time.Duration {
	return max(s.opts.ReconnectGrace/3, time.Millisecond)
}

// pingEvery is how often the gateway pings each remote; a remote that does
// not answer within the same time is taken as gone (gateway.Options). At
// least a second, so a busy machine's late pong is not taken for a dead
// one.
func (s *Server) pingEvery() time.Duration {
	return min(max(s.opts.ReconnectGrace/3, time.Second), 15*time.Second)
}

// keepClaimsAlive keeps the claims of every connected remote alive until
// ctx ends, in one store write per round.
func (s *Server) keepClaimsAlive(ctx context.Context) {
	loop.Every(ctx, s.keepAliveEvery(), func(ctx context.Context) {
		leases := s.hub.Leases()
		if err := s.life.KeepAlive(ctx, leases...); err != nil && ctx.Err() == nil {
			s.log.Warn("keep connected claims alive", "claims", len(leases), "err", err)
		}
	})
}

// graceAfter leaves c's claim a reconnect grace from now, when its
// connection has ended: the remote may come back within it.
func (s *Server) graceAfter(c *gateway.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.runCtx), 10*time.Second)
	defer cancel()
	if err := s.life.KeepAlive(ctx, store.Lease{SessionID: c.SessionID, Epoch: c.Epoch}); err != nil {
		s.log.Warn("record the end of a remote's connection", "session", c.SessionID, "err", err)
	}
}

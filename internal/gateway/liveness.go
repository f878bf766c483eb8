package gateway

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/internal/loop"
)

// Liveness of a remote. A remote's machine may die, or its network drop,
// without a close: the gateway pings each attached remote and cuts the
// connection of one that stops answering, so that its claim starts its
// reconnect grace. A remote that restarts under the same claim dials in as
// a new instance while its old connection may still look open; the old one
// is pinged, and replaced at once when it does not answer.

// pingEvery is how often the gateway pings each remote, and how long it
// waits for each pong.
func (g *Gateway) pingEvery() time.Duration {
	if g.opts.PingEvery > 0 {
		return g.opts.PingEvery
	}
	return 15 * time.Second
}

// pingWhileAttached pings c from a goroutine of its own until the
// returned stop is called; stop waits for that goroutine.
func (g *Gateway) pingWhileAttached(ctx context.Context, c *Conn) (stop func()) {
	pctx, cancel := context.WithCancel(ctx)
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		g.pingRemote(pctx, c)
	}()
	return func() {
		cancel()
		<-pinged
	}
}

// pingRemote pings c until ctx ends; a remote that stops answering (its
// machine died or the network dropped without a close) has its connection
// cut, so its claim starts its grace.
func (g *Gateway) pingRemote(ctx context.Context, c *Conn) {
	every := g.pingEvery()
	_ = loop.EveryUntil(ctx, every, func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, every)
		err := c.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			g.log.Info("remote stopped answering pings; closing its connection", "session", c.SessionID, "err", err)
			c.CloseNow()
		}
		return err
	})
}

// otherLiveInstance returns the instance of another remote process serving
// c's session under the same claim while it is alive, or "". A reconnect
// of the same instance, or a remote that names none, is not a conflict. A
// current connection that does not answer a ping within a few seconds is
// taken as dead and cut, so a restarted remote replaces it at once.
func (g *Gateway) otherLiveInstance(ctx context.Context, c *Conn) string {
	cur := g.hub.Get(c.SessionID)
	if cur == nil || cur.Epoch != c.Epoch || cur.Instance == "" || c.Instance == "" || cur.Instance == c.Instance {
		return ""
	}
	pctx, cancel := context.WithTimeout(ctx, min(g.pingEvery(), 3*time.Second))
	defer cancel()
	if err := cur.Ping(pctx); err != nil {
		g.log.Info("the session's previous remote does not answer; a new instance replaces it", "session", c.SessionID, "old", cur.Instance, "new", c.Instance)
		cur.CloseNow()
		return ""
	}
	return cur.Instance
}

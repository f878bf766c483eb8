package remote

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
)

// TestServeReconnectsAtOnceWhenTheServerStops: a connection the gateway
// closes with api.CloseReconnectNow (its server stops and hands the
// session over) is dialled again at once, without the backoff; any other
// close waits the backoff. The clock never moves unless the test moves it,
// so a reconnect that waits shows.
func TestServeReconnectsAtOnceWhenTheServerStops(t *testing.T) {
	g := newTestGateway(t)
	clk := clockwork.NewFakeClock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, Options{
			GatewayURL: g.url(), ConnectToken: testToken, SessionID: testSession,
			StateDir: t.TempDir(), WorkDir: t.TempDir(), Clock: clk,
			Capabilities: &api.Capabilities{OS: "test"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
	}()
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	_ = gc.c.Close(websocket.StatusCode(api.CloseReconnectNow), "this server is stopping; reconnect now")
	gc2 := g.accept(t) // with the clock stopped: no backoff was waited
	gc2.handshake(t, nil, nil)

	// Any other close waits its backoff on the clock.
	_ = gc2.c.Close(websocket.StatusGoingAway, "the server is shutting down")
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("Serve did not wait its backoff after an ordinary close: %v", err)
	}
	if n := g.dials.Load(); n != 2 {
		t.Fatalf("%d dials before the backoff passed, want 2", n)
	}
	clk.Advance(11 * time.Second)
	gc3 := g.accept(t)
	gc3.handshake(t, nil, nil)
	gc3.send(t, api.Frame{Type: api.FrameEnd})
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return after the end")
	}
}

package server

import (
	"context"
	"encoding/json"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
)

// agentConn makes a remote's gateway connection an agent.Conn.
type agentConn struct{ c *remoteConn }

// Call waits while the session is being suspended (see callGate), so that
// no call starts under a snapshot; once the suspend is done the connection
// ends, and the runner sends the call again to the next remote.
func (a agentConn) Call(ctx context.Context, seq int64, tool string, args json.RawMessage) error {
	if err := a.c.gate.enter(ctx, a.c.done, seq); err != nil {
		return err
	}
	err := a.c.send(ctx, api.Frame{Type: api.FrameCall, Seq: seq, Tool: tool, Args: args})
	if err != nil {
		a.c.gate.leave(seq)
	}
	return err
}

func (a agentConn) Ack(ctx context.Context, seq int64) error {
	return a.c.send(ctx, api.Frame{Type: api.FrameAck, Seq: seq})
}

func (a agentConn) Done() <-chan struct{} { return a.c.done }

// agentGateway gives the agent loop the hub's live connections.
type agentGateway struct{ h *hub }

func (g agentGateway) Conn(sessionID string) (agent.Conn, <-chan struct{}) {
	wake := g.h.changed.wait() // before the look, so no change slips between
	if c := g.h.get(sessionID); c != nil {
		return agentConn{c}, wake
	}
	return nil, wake
}

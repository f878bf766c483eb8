package server

import (
	"context"
	"encoding/json"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
)

// agentConn makes a remote's gateway connection an agent.Conn.
type agentConn struct{ c *remoteConn }

func (a agentConn) Call(ctx context.Context, seq int64, tool string, args json.RawMessage) error {
	return a.c.send(ctx, api.Frame{Type: api.FrameCall, Seq: seq, Tool: tool, Args: args})
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

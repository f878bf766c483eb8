package gateway

import (
	"context"
	"encoding/json"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
)

// AgentConn makes a remote's gateway connection an agent.Conn.
func AgentConn(c *Conn) agent.Conn { return agentConn{c} }

type agentConn struct{ c *Conn }

// Call waits while the session is being suspended (see CallGate), so that
// no call starts under a snapshot; once the suspend is done the connection
// ends, and the runner sends the call again to the next remote.
func (a agentConn) Call(ctx context.Context, seq int64, tool string, args json.RawMessage) error {
	if err := a.c.Gate.Enter(ctx, a.c.done, seq); err != nil {
		return err
	}
	err := a.c.Send(ctx, api.Frame{Type: api.FrameCall, Seq: seq, Tool: tool, Args: args})
	if err != nil {
		a.c.Gate.Leave(seq)
	}
	return err
}

func (a agentConn) Ack(ctx context.Context, seq int64) error {
	return a.c.Send(ctx, api.Frame{Type: api.FrameAck, Seq: seq})
}

func (a agentConn) Done() <-chan struct{} { return a.c.done }

// Agents gives the agent loop the hub's live connections.
func (h *Hub) Agents() agent.Gateway { return agentGateway{h} }

type agentGateway struct{ h *Hub }

func (g agentGateway) Conn(sessionID string) (agent.Conn, <-chan struct{}) {
	wake := g.h.changed.Wait() // before the look, so no change slips between
	if c := g.h.Get(sessionID); c != nil {
		return agentConn{c}, wake
	}
	return nil, wake
}

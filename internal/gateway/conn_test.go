package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestSendKeepsToTheRemotesVersion: a frame newer than the remote's
// version is not sent.
func TestSendKeepsToTheRemotesVersion(t *testing.T) {
	c := &Conn{SessionID: "s", Version: 0} // older than every frame
	err := c.Send(context.Background(), api.Frame{Type: api.FrameWelcome})
	if err == nil || !strings.Contains(err.Error(), "needs protocol version 1") {
		t.Fatalf("send = %v, want a refusal", err)
	}
}

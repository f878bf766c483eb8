package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// testLiveDesktopThroughOther: a viewer that reaches the replica without
// the session's remote is forwarded to the one with it: the remote hears
// the stream start, its frames reach the viewer, a takeover reaches it,
// and the viewer's leaving hands back and stops the stream.
func testLiveDesktopThroughOther(t *testing.T, db string) {
	rs := startReplicaSetC(t, db, 2, Options{})
	a, b := rs[0], rs[1]
	a.outpost("lv")
	id, token := externalSessionC(t, a.testServer, "lv")
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set(api.HeaderSessionID, id)
	ws, _, err := websocket.Dial(context.Background(), a.srv.gatewayURL, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	r := &fakeRemote{t: t, ws: ws}
	r.send(api.Frame{Type: api.FrameHello, SessionID: id, Capabilities: &api.Capabilities{LiveDesktop: true, Desktop: true}})
	frames := make(chan api.Frame, 64)
	go func() {
		for {
			_, data, err := ws.Read(context.Background())
			if err != nil {
				close(frames)
				return
			}
			var f api.Frame
			if json.Unmarshal(data, &f) == nil {
				frames <- f
			}
		}
	}()
	waitFrame(t, frames, api.FrameWelcome)
	waitRunning(t, b.testServer, id)

	v, hello := dialViewer(t, b.testServer, id, b.admin)
	if !hello.CanControl {
		t.Errorf("hello through the other replica: %+v", hello)
	}
	if f := waitFrame(t, frames, api.FrameDesktopStream); !f.DesktopStream.On || !f.DesktopStream.Keyframe {
		t.Fatalf("the remote was asked %+v", f.DesktopStream)
	}
	msg := api.DesktopTiles{Keyframe: true, Width: 200, Height: 200, Tiles: []api.DesktopTile{{W: 64, H: 64, PNG: []byte("tile")}}}.AppendBinary(nil)
	if err := ws.Write(context.Background(), websocket.MessageBinary, msg); err != nil {
		t.Fatal(err)
	}
	if f := v.frame("the remote's frame", func(api.DesktopTiles) bool { return true }); f.Width != 200 || string(f.Tiles[0].PNG) != "tile" {
		t.Errorf("viewer got %+v", f)
	}
	v.send(api.DesktopMessage{Type: api.DesktopMsgTakeControl})
	v.msg(api.DesktopMsgControl)
	if f := waitFrame(t, frames, api.FrameDesktopControl); f.DesktopControl != api.DesktopTakeControl {
		t.Errorf("the remote heard %q", f.DesktopControl)
	}
	v.ws.Close(websocket.StatusNormalClosure, "")
	if f := waitFrame(t, frames, api.FrameDesktopControl); f.DesktopControl != api.DesktopHandBack {
		t.Errorf("after the viewer left the remote heard %q", f.DesktopControl)
	}
	if f := waitFrame(t, frames, api.FrameDesktopStream); f.DesktopStream.On {
		t.Errorf("after the last viewer left the stream is %+v", f.DesktopStream)
	}
	if n := counterValue(b.srv.metrics.forwarded); n < 1 {
		t.Errorf("b forwarded %v requests, want the viewer's", n)
	}
	waitfor.True(t, "both desktop events", func() bool { return len(desktopEvents(b.testServer, id)) == 2 })
}

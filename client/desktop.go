package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
)

// desktopReadLimit bounds one message of the live desktop: a keyframe of
// a large screen is a few megabytes of PNG tiles.
const desktopReadLimit = 64 << 20

// DesktopConn is a viewer's connection to a session's live desktop
// (api.DesktopPath). Read and Send may be called from two goroutines, one
// each.
type DesktopConn struct {
	ws *websocket.Conn
	// Hello is the server's first message: who is in control and whether
	// this token may take control.
	Hello api.DesktopMessage
}

// Desktop opens the live view of session id's desktop and reads the
// server's hello. It fails with a *Error when the server refuses: 404 for
// an unknown session, 409 when its machine has no live desktop, 503 when
// no machine serves it now.
func (s *SessionsService) Desktop(ctx context.Context, id string) (*DesktopConn, error) {
	c := s.c
	u := c.endpoint(strings.Replace(api.DesktopPath, "{session}", url.PathEscape(id), 1), nil)
	u = "ws" + strings.TrimPrefix(u, "http") // http→ws, https→wss
	hdr := http.Header{"User-Agent": {c.userAgent}}
	if c.token != "" {
		hdr.Set("Authorization", "Bearer "+c.token)
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: hdr,
		CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 && resp.Body != nil {
			return nil, parseError(resp)
		}
		return nil, &transportError{op: "open the live desktop of " + id, err: err}
	}
	ws.SetReadLimit(desktopReadLimit)
	d := &DesktopConn{ws: ws}
	m, _, err := d.Read(ctx)
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	if m == nil || m.Type != api.DesktopMsgHello {
		ws.CloseNow()
		return nil, &transportError{op: "open the live desktop of " + id, err: fmt.Errorf("the server did not start with a hello")}
	}
	d.Hello = *m
	return d, nil
}

// Read returns the next message: a JSON message, or a frame of tiles
// (whose PNG bytes are the caller's).
func (d *DesktopConn) Read(ctx context.Context) (*api.DesktopMessage, *api.DesktopTiles, error) {
	typ, b, err := d.ws.Read(ctx)
	if err != nil {
		return nil, nil, &transportError{op: "read the live desktop", err: err}
	}
	if typ == websocket.MessageBinary {
		f, err := api.ParseDesktopTiles(b)
		if err != nil {
			return nil, nil, &transportError{op: "read the live desktop", err: err}
		}
		return nil, &f, nil
	}
	var m api.DesktopMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, &transportError{op: "read the live desktop", err: fmt.Errorf("decode a message: %w", err)}
	}
	return &m, nil, nil
}

// Send sends a message (take_control, hand_back, input).
func (d *DesktopConn) Send(ctx context.Context, m api.DesktopMessage) error {
	m.V = api.DesktopProtocolVersion
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := d.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return &transportError{op: "write to the live desktop", err: err}
	}
	return nil
}

// DesktopCloseReason returns the reason the server gave when it closed a
// live desktop with an error, "" otherwise.
func DesktopCloseReason(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) && ce.Code != websocket.StatusNormalClosure {
		return ce.Reason
	}
	return ""
}

// Close closes the connection.
func (d *DesktopConn) Close() error {
	return d.ws.Close(websocket.StatusNormalClosure, "")
}

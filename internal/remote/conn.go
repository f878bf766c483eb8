package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/steptrace"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

const (
	// handshakeTimeout bounds dialing and waiting for welcome.
	handshakeTimeout = 30 * time.Second
	// writeTimeout bounds one frame write.
	writeTimeout = 30 * time.Second
	// pingInterval is how often a quiet connection is checked.
	pingInterval = 20 * time.Second
	// maxFrameBytes is the largest frame accepted from the gateway.
	maxFrameBytes = 64 << 20
)

// rejection is a refusal by the gateway: an HTTP 401/403/404 or an error
// frame.
type rejection struct{ msg string }

func (r *rejection) Error() string { return "gateway refused the remote: " + r.msg }

// gatewayConn is a connection to the gateway before its hello.
type gatewayConn struct {
	c *websocket.Conn
	// bc is the connection under c, nil when the client's transport
	// has dial hooks of its own (see batchingClient).
	bc        *batchConn
	closeIdle func()
}

// close closes the connection and the client's idle ones.
func (g *gatewayConn) close() {
	g.c.CloseNow()
	g.closeIdle()
}

// dialGateway opens a WebSocket to the gateway for opts' session,
// authenticated by its connect token. An HTTP refusal is a rejection.
func dialGateway(ctx context.Context, opts Options) (*gatewayConn, error) {
	steptrace.Mark("remote.dial", opts.SessionID)
	hc, dialer, closeIdle := batchingClient(opts.HTTPClient)
	c, resp, err := websocket.Dial(ctx, opts.GatewayURL, &websocket.DialOptions{
		HTTPClient: hc,
		HTTPHeader: http.Header{
			"Authorization":     {"Bearer " + opts.ConnectToken},
			api.HeaderSessionID: {opts.SessionID},
		},
	})
	if err != nil {
		closeIdle()
		if resp != nil {
			switch resp.StatusCode {
			case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
				return nil, &rejection{msg: httpMessage(resp)}
			}
		}
		if tlsconfig.IsUnknownAuthority(err) {
			return nil, fmt.Errorf("dial gateway: the gateway's TLS certificate is signed by an authority this machine does not trust; set %s to the PEM file of its CA (a worker or orchestrator started with --ca-file passes it on): %w", EnvCAFile, err)
		}
		return nil, fmt.Errorf("dial gateway: %w", err)
	}
	c.SetReadLimit(maxFrameBytes)
	return &gatewayConn{c: c, bc: dialer.last(), closeIdle: closeIdle}, nil
}

// earlyDial is the first dial of a remote, started before its session's
// files are open: the two do not depend on each other, and the dial,
// which waits on the server, is the longer.
type earlyDial struct {
	cancel context.CancelFunc
	done   chan struct{}
	gc     *gatewayConn
	err    error
}

// startDial dials the gateway for opts' session in the background, within
// handshakeTimeout.
func startDial(ctx context.Context, opts Options) *earlyDial {
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	d := &earlyDial{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		defer cancel() // the handshake's only: the connection outlives it
		d.gc, d.err = dialGateway(dctx, opts)
	}()
	return d
}

// wait returns the dial's connection once it is there. It is bounded as a
// dial of connect's own would be: by handshakeTimeout, counted from
// earlier, and by the same ctx.
func (d *earlyDial) wait() (*gatewayConn, error) {
	<-d.done
	return d.gc, d.err
}

// discard stops the dial and closes its connection, if it made one.
func (d *earlyDial) discard() {
	d.cancel()
	if gc, _ := d.wait(); gc != nil {
		gc.close()
	}
}

// connect runs one connection: dial (or take early's, when not nil),
// hello, resend results, welcome, then calls until the connection fails or
// the session ends. welcomed reports whether the gateway accepted the
// remote.
func (s *session) connect(ctx context.Context, early *earlyDial) (welcomed bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	var gc *gatewayConn
	if early != nil {
		gc, err = early.wait()
	} else {
		gc, err = dialGateway(dctx, s.opts)
	}
	if err != nil {
		return false, err
	}
	defer gc.close()
	c := gc.c

	steptrace.Mark("remote.dialed", s.opts.SessionID)
	hello, resend := s.hello()
	if err := s.writeFrame(dctx, c, hello); err != nil {
		return false, fmt.Errorf("send hello: %w", err)
	}
	for _, f := range resend {
		if err := s.writeFrame(dctx, c, f); err != nil {
			return false, fmt.Errorf("resend result %d: %w", f.Seq, err)
		}
	}
	f, err := s.readFrame(dctx, c)
	if err != nil {
		return false, s.frameErr(ctx, c, "read welcome", err)
	}
	switch f.Type {
	case api.FrameWelcome:
		steptrace.Mark("remote.welcome", s.opts.SessionID)
		s.welcome(f)
	case api.FrameEnd:
		c.Close(websocket.StatusNormalClosure, "session ended")
		return false, errEnd
	case api.FrameError:
		return false, &rejection{msg: f.Reason}
	default:
		return false, fmt.Errorf("gateway sent %q before welcome", f.Type)
	}
	s.log.Info("connected to the gateway", "protocol_version", s.version, "executed", hello.Executed, "running", hello.Running, "last_seq", hello.LastSeq)

	// The connection's goroutines: the writer and the pinger. connect
	// returns only after both ended (the deferred wg.Wait). Calls are the
	// session's, not the connection's: they go on across reconnects and
	// Serve waits for them.
	connCtx, cancelConn := context.WithCancel(ctx)
	var wg sync.WaitGroup
	s.out.setConnected(true)
	defer func() {
		s.out.setConnected(false)
		s.liveDisconnected()
		cancelConn()
		c.CloseNow()
		wg.Wait()
		s.abortUploads()
	}()
	wg.Go(func() {
		if err := s.writeLoop(connCtx, c, gc.bc); err != nil && connCtx.Err() == nil {
			s.log.Warn("gateway write failed", "err", err)
		}
		cancelConn()
	})
	wg.Go(func() { pingLoop(connCtx, c); cancelConn() })

	for {
		f, err := s.readFrame(connCtx, c)
		if err != nil {
			return true, s.frameErr(ctx, c, "read frame", err)
		}
		switch f.Type {
		case api.FrameCall:
			s.handleCall(f)
		case api.FrameAck:
			s.handleAck(f.Seq)
		case api.FrameCancel:
			s.handleCancel(f.Seq)
		case api.FrameArtifactAck:
			s.handleArtifactAck(f)
		case api.FrameWelcome:
			s.welcome(f)
		case api.FrameSuspend:
			s.handleSuspend()
		case api.FrameCheckpoint:
			s.handleCheckpoint()
		case api.FrameDesktopStream:
			s.handleDesktopStream(f)
		case api.FrameDesktopInput:
			s.handleDesktopInput(f)
		case api.FrameDesktopControl:
			s.handleDesktopControl(f)
		case api.FrameEnd:
			s.log.Info("gateway ended the session", "reason", f.Reason)
			c.Close(websocket.StatusNormalClosure, "session ended")
			return true, errEnd
		case api.FrameError:
			return true, &rejection{msg: f.Reason}
		default:
			s.log.Warn("ignoring an unknown frame", "type", f.Type)
		}
	}
}

// frameErr turns a read error into what connect returns; on a version
// mismatch it tells the gateway why the remote leaves.
func (s *session) frameErr(ctx context.Context, c *websocket.Conn, op string, err error) error {
	if d := (*downgrade)(nil); errors.As(err, &d) {
		c.Close(websocket.StatusNormalClosure, "reconnecting in an older protocol version")
		return err
	}
	if errors.Is(err, ErrVersion) {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = s.writeFrame(wctx, c, api.Frame{Type: api.FrameError, Reason: err.Error()})
		c.Close(websocket.StatusPolicyViolation, "protocol version mismatch")
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}

// writeLoop sends the outbox to the gateway until ctx ends or a write fails.
// bc, when not nil, is the connection under c: each output message is
// gathered and written to it at once.
func (s *session) writeLoop(ctx context.Context, c *websocket.Conn, bc *batchConn) error {
	var buf []byte
	for {
		it, ok := s.out.pop()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-s.out.notify:
				continue
			}
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		var err error
		if it.output != nil {
			buf = it.output.AppendBinary(buf[:0])
			if bc != nil {
				bc.hold()
			}
			err = c.Write(wctx, websocket.MessageBinary, buf)
			if bc != nil {
				if rerr := bc.release(); err == nil {
					err = rerr
				}
			}
			if err != nil {
				s.out.unpop(it)
			} else {
				recycleChunk(it.output)
			}
		} else if it.artifact != nil {
			err = s.writeArtifact(wctx, c, it.artifact, &buf)
			if err != nil {
				s.out.unpop(it)
			}
		} else if it.desktop != nil {
			err = c.Write(wctx, websocket.MessageBinary, it.desktop)
			s.desktopSent() // a frame that failed is not sent again: the next one is newer
		} else if it.frame != nil {
			err = s.writeFrame(wctx, c, *it.frame)
			if err != nil {
				s.out.unpop(it)
			}
		} else if f, ok := s.takeResult(it.resultSeq); ok {
			err = s.writeFrame(wctx, c, f)
			if err != nil {
				s.requeueResult(it.resultSeq)
			}
		}
		cancel()
		if err != nil {
			return err
		}
	}
}

// pingLoop returns when a ping goes unanswered or ctx ends.
func pingLoop(ctx context.Context, c *websocket.Conn) {
	_ = loop.EveryUntil(ctx, pingInterval, func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, pingInterval)
		defer cancel()
		return c.Ping(pctx)
	})
}

// writeFrame sends f in the remote's protocol version.
func (s *session) writeFrame(ctx context.Context, c *websocket.Conn, f api.Frame) error {
	f.V = int(s.version)
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return c.Write(ctx, websocket.MessageText, b)
}

// readFrame reads the next JSON frame, skipping binary messages. A frame of
// another protocol version than the remote's is an ErrVersion: the gateway
// refused the remote's version (an error frame), or answers in another.
func (s *session) readFrame(ctx context.Context, c *websocket.Conn) (api.Frame, error) {
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return api.Frame{}, err
		}
		if typ != websocket.MessageText {
			continue
		}
		var f api.Frame
		if err := json.Unmarshal(b, &f); err != nil {
			return api.Frame{}, fmt.Errorf("malformed frame from the gateway: %w", err)
		}
		if f.V != int(s.version) {
			if v := api.ProtocolVersion(f.V); f.Type == api.FrameError && v.Supported() && v < s.version {
				return api.Frame{}, &downgrade{to: v, reason: f.Reason}
			}
			return api.Frame{}, fmt.Errorf("%w: %s", ErrVersion, s.versionMismatch(f))
		}
		return f, nil
	}
}

// downgrade is a refusal by a gateway of an older protocol version that
// this remote also speaks: its error frame carries its version. The remote
// reconnects speaking that version.
type downgrade struct {
	to     api.ProtocolVersion
	reason string
}

func (d *downgrade) Error() string {
	return fmt.Sprintf("the gateway speaks protocol version %d and refused this remote's: %s", d.to, d.reason)
}

// versionMismatch says why a frame of another version ends the connection.
func (s *session) versionMismatch(f api.Frame) string {
	speaks := fmt.Sprintf("this remote speaks gateway protocol version %d (its build speaks %d to %d)", s.version, api.MinProtocolVersion, api.CurrentProtocolVersion)
	if f.Type == api.FrameError && f.Reason != "" {
		return fmt.Sprintf("the gateway refused the remote: %s; %s", f.Reason, speaks)
	}
	msg := fmt.Sprintf("the gateway sent a %q frame of protocol version %d and %s; upgrade the older of the two", f.Type, f.V, speaks)
	if f.Reason != "" {
		msg += " (gateway says: " + f.Reason + ")"
	}
	return msg
}

// httpMessage is the status and error message of a refused handshake.
func httpMessage(resp *http.Response) string {
	msg := resp.Status
	if resp.Body == nil {
		return msg
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	var er api.ErrorResponse
	if json.Unmarshal(b, &er) == nil && er.Error.Message != "" {
		return msg + ": " + er.Error.Message
	}
	if t := strings.TrimSpace(string(b)); t != "" {
		return msg + ": " + t
	}
	return msg
}

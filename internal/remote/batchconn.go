package remote

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// batchMax is how much a batchConn gathers before it writes.
const batchMax = 256 << 10

// batchConn gathers the writes made while it is held into one write of the
// connection. The WebSocket library writes a client's (masked) message in
// 4 KiB pieces, one system call each; holding the connection while a large
// output message is written sends it in one. Writes made while it is not
// held go straight through.
type batchConn struct {
	net.Conn

	mu   sync.Mutex // guards the following; held while writing
	held bool
	buf  []byte
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		return c.Conn.Write(p)
	}
	if len(c.buf)+len(p) > batchMax {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) >= batchMax {
			return c.Conn.Write(p)
		}
	}
	if c.buf == nil {
		c.buf = make([]byte, 0, batchMax)
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// hold starts gathering writes.
func (c *batchConn) hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// release writes what was gathered, within writeTimeout, and stops
// gathering.
func (c *batchConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	return c.flushLocked()
}

func (c *batchConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.Conn.Write(c.buf)
	_ = c.Conn.SetWriteDeadline(time.Time{})
	c.buf = c.buf[:0]
	return err
}

// batchDialer hands out the batchConn of a dial.
type batchDialer struct {
	mu   sync.Mutex
	conn *batchConn
}

// last returns the connection dialed last, or nil.
func (d *batchDialer) last() *batchConn {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conn
}

// batchingClient returns a copy of hc whose connections are batchConns,
// or hc itself (and a nil dialer) when its transport is not a plain
// *http.Transport dialing with DialContext.
func batchingClient(hc *http.Client) (*http.Client, *batchDialer, func()) {
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	t, ok := rt.(*http.Transport)
	// A transport with its own dial hooks keeps them: wrapping DialContext
	// would not see those connections.
	//lint:ignore SA1019 the deprecated hooks are checked, not used
	if !ok || t.DialTLSContext != nil || t.DialTLS != nil || t.Dial != nil {
		return hc, nil, func() {}
	}
	t = t.Clone()
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	d := &batchDialer{}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		bc := &batchConn{Conn: nc}
		d.mu.Lock()
		d.conn = bc
		d.mu.Unlock()
		return bc, nil
	}
	c := *hc
	c.Transport = t
	return &c, d, t.CloseIdleConnections
}

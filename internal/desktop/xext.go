package desktop

import (
	"fmt"
	"sync"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// xext guards xgb's process-wide tables of extension event and error
// constructors. Each extension's Init writes them, and every connection's
// reader reads them, without a lock: an Init while another connection
// takes an event is a data race (and may crash on the map). So the tables
// are written once, on the process's first connection, before any other
// connection exists; later connections only learn the extensions' opcodes
// (useExtension), which is per connection.
var xext struct {
	mu   sync.Mutex // held while a connection opens until the tables are written; guards the following
	done bool
	// fixes and damage: the first display had the extension, so its
	// events and errors are decoded.
	fixes, damage bool
}

// openX opens a connection with dial, the first one of the process also
// writing xgb's extension tables before any other can be opened.
func openX(dial func() (*xgb.Conn, error)) (*xgb.Conn, error) {
	xext.mu.Lock()
	if xext.done {
		// The tables are written: connections open side by side.
		xext.mu.Unlock()
		return dial()
	}
	defer xext.mu.Unlock()
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	// No event has been asked for yet, so this connection's reader reads
	// no table while they are written.
	xext.fixes = xfixes.Init(conn) == nil
	xext.damage = damage.Init(conn) == nil
	xext.done = true
	return conn, nil
}

// useExtension lets conn send the requests of extension name (as XFIXES or
// DAMAGE), whose events and errors openX registered; an error when the
// display lacks it or it was not registered.
func useExtension(conn *xgb.Conn, name string) error {
	xext.mu.Lock()
	registered := name == "XFIXES" && xext.fixes || name == "DAMAGE" && xext.damage
	xext.mu.Unlock()
	if !registered {
		// Its events could not be decoded.
		return fmt.Errorf("the first display this process opened had no %s extension", name)
	}
	reply, err := xproto.QueryExtension(conn, uint16(len(name)), name).Reply()
	switch {
	case err != nil:
		return fmt.Errorf("query the extension %s: %w", name, err)
	case !reply.Present:
		return fmt.Errorf("the display has no %s extension", name)
	}
	conn.ExtLock.Lock()
	conn.Extensions[name] = reply.MajorOpcode
	conn.ExtLock.Unlock()
	return nil
}

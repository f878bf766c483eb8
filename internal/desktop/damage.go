package desktop

import (
	"errors"
	"fmt"
	"sync"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// DamageWatch tells when the screen changed, from the X server's DAMAGE
// extension: a live view captures only then, instead of polling a screen
// that does not change.
type DamageWatch struct {
	conn    *xgb.Conn
	changed chan struct{}
	done    chan struct{}
	once    sync.Once
}

// WatchDamage starts watching the screen for changes on a connection of
// its own. A display without the DAMAGE extension, or one this process
// cannot open a second connection to (an attached display), gets an
// error: the caller polls instead.
func (d *Desktop) WatchDamage() (*DamageWatch, error) {
	if d.cookie == nil {
		return nil, errors.New("watch the screen's damage: only a desktop this process started")
	}
	conn, err := d.newConn()
	if err != nil {
		return nil, fmt.Errorf("watch the screen's damage: %w", err)
	}
	fail := func(err error) (*DamageWatch, error) {
		conn.Close()
		return nil, fmt.Errorf("watch the screen's damage: %w", err)
	}
	if err := xfixes.Init(conn); err != nil {
		return fail(err)
	}
	if _, err := xfixes.QueryVersion(conn, 5, 0).Reply(); err != nil {
		return fail(err)
	}
	if err := damage.Init(conn); err != nil {
		return fail(err)
	}
	if _, err := damage.QueryVersion(conn, 1, 1).Reply(); err != nil {
		return fail(err)
	}
	id, err := damage.NewDamageId(conn)
	if err != nil {
		return fail(err)
	}
	root := xproto.Setup(conn).DefaultScreen(conn).Root
	// NonEmpty: one event when the damage goes from none to some; the
	// watcher then clears it, so a busy screen sends an event a frame, not
	// one per drawing request.
	if err := damage.CreateChecked(conn, id, xproto.Drawable(root), damage.ReportLevelNonEmpty).Check(); err != nil {
		return fail(err)
	}
	w := &DamageWatch{conn: conn, changed: make(chan struct{}, 1), done: make(chan struct{})}
	go w.read(id)
	return w, nil
}

// read turns damage events into Changed until the connection closes.
func (w *DamageWatch) read(id damage.Damage) {
	defer close(w.done)
	for {
		ev, err := w.conn.WaitForEvent()
		if ev == nil && err == nil {
			return // closed
		}
		if _, ok := ev.(damage.NotifyEvent); !ok {
			continue
		}
		damage.Subtract(w.conn, id, xfixes.RegionNone, xfixes.RegionNone)
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

// Changed receives a value when the screen changed since the last one.
func (w *DamageWatch) Changed() <-chan struct{} { return w.changed }

// Close stops watching.
func (w *DamageWatch) Close() {
	w.once.Do(func() {
		w.conn.Close()
		<-w.done
	})
}

package desktop

import (
	"errors"
	"fmt"
	"image"
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

	mu sync.Mutex // guards the following
	// rects are the areas damaged since the last Take; full says the
	// whole screen is to be taken instead (too many areas to keep).
	rects []image.Rectangle
	full  bool
}

// maxDamageRects bounds the areas a watch keeps between two Takes; past
// it, the whole screen counts as damaged.
const maxDamageRects = 512

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
	if err := useExtension(conn, "XFIXES"); err != nil {
		return fail(err)
	}
	if _, err := xfixes.QueryVersion(conn, 5, 0).Reply(); err != nil {
		return fail(err)
	}
	if err := useExtension(conn, "DAMAGE"); err != nil {
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
	// The damaged region is moved into parts when it is cleared, and read
	// from there: the areas a frame needs to capture.
	parts, err := xfixes.NewRegionId(conn)
	if err != nil {
		return fail(err)
	}
	if err := xfixes.CreateRegionChecked(conn, parts, nil).Check(); err != nil {
		return fail(err)
	}
	w := &DamageWatch{conn: conn, changed: make(chan struct{}, 1), done: make(chan struct{})}
	go w.read(id, parts)
	return w, nil
}

// read turns damage events into Changed, and the damaged areas into
// rects, until the connection closes.
func (w *DamageWatch) read(id damage.Damage, parts xfixes.Region) {
	defer close(w.done)
	for {
		ev, err := w.conn.WaitForEvent()
		if ev == nil && err == nil {
			return // closed
		}
		if _, ok := ev.(damage.NotifyEvent); !ok {
			continue
		}
		// Clearing the damage and reading what it was are one request
		// pair on this connection: what is drawn after the Subtract is
		// new damage, with an event of its own.
		damage.Subtract(w.conn, id, xfixes.RegionNone, parts)
		reply, ferr := xfixes.FetchRegion(w.conn, parts).Reply()
		w.mu.Lock()
		if ferr != nil || reply == nil {
			w.full = true // the areas are unknown: the whole screen
		} else {
			for _, r := range reply.Rectangles {
				w.rects = append(w.rects, image.Rect(int(r.X), int(r.Y), int(r.X)+int(r.Width), int(r.Y)+int(r.Height)))
			}
			if len(w.rects) > maxDamageRects {
				w.full, w.rects = true, nil
			}
		}
		w.mu.Unlock()
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

// Take returns the areas damaged since the last Take and forgets them;
// full is true when they are too many to list (or unknown), and the whole
// screen is to be taken as damaged.
func (w *DamageWatch) Take() (rects []image.Rectangle, full bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rects, full = w.rects, w.full
	w.rects, w.full = nil, false
	return rects, full
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

package sqlite

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"strings"
)

// stmtCacheSize is how many prepared statements each connection keeps. The
// store sends a few dozen distinct statements; list filters and LIMITs make
// a few more, which the least recently used end of the cache drops.
const stmtCacheSize = 256

// cachingConnector opens the driver's connections wrapped in a cachedConn.
//
// modernc.org/sqlite compiles the text of every ExecContext and
// QueryContext anew (the parse and code generation were about a third of
// the store's CPU); a statement from PrepareContext keeps its compiled
// program and only rebinds. So each connection keeps the statements it ran,
// by text. SQLite recompiles a kept statement itself when the schema
// changes (a migration), so the cache never serves a stale program.
type cachingConnector struct {
	driver.Connector
	// uncancelable makes the connection run every statement as if its
	// context could not be canceled (see cachedConn.uncancelable).
	uncancelable bool
}

// Connect implements driver.Connector.
func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newCachedConn(dc, c.uncancelable)
}

// driverConn is what a connection of modernc.org/sqlite implements and a
// cachedConn forwards.
type driverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachedConn is a driver connection that keeps the prepared statements of
// the single statements it runs, least recently used dropped first. Like
// every driver.Conn it is used by one goroutine at a time (database/sql
// holds the connection's lock around each call), so it needs no lock.
type cachedConn struct {
	driverConn
	// uncancelable: statements run under context.WithoutCancel of their
	// context. On the writer an interrupted statement would roll back the
	// whole transaction, which group commit shares among callers (see
	// writer); a caller that gives up is handled there, between
	// statements, instead.
	uncancelable bool
	lru          *list.List               // of *cachedStmt, most recent first
	byText       map[string]*list.Element // the elements of lru by query text
}

// cachedStmt is a kept statement.
type cachedStmt struct {
	query string
	stmt  driver.Stmt
	// busy: rows of it are open, so it cannot run again until they close.
	busy bool
	// dropped: evicted while busy; closed when its rows are.
	dropped bool
}

func newCachedConn(dc driver.Conn, uncancelable bool) (*cachedConn, error) {
	inner, ok := dc.(driverConn)
	if !ok {
		dc.Close()
		return nil, errors.New("sqlite: the driver's connection lacks the interfaces the statement cache forwards")
	}
	return &cachedConn{driverConn: inner, uncancelable: uncancelable, lru: list.New(), byText: map[string]*list.Element{}}, nil
}

// Unwrap returns the driver's connection (see sqlite.Limit).
func (c *cachedConn) Unwrap() driver.Conn { return c.driverConn }

// cacheable reports whether query may be kept: one statement (a script is
// recompiled statement by statement whatever is kept).
func cacheable(query string) bool { return !strings.Contains(query, ";") }

// stmt returns the kept statement of query, preparing and keeping it on
// first use; nil (and no error) when query is not kept or its statement is
// busy, so the caller runs it uncached.
func (c *cachedConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if !cacheable(query) {
		return nil, nil
	}
	if el, ok := c.byText[query]; ok {
		cs := el.Value.(*cachedStmt)
		if cs.busy {
			return nil, nil
		}
		c.lru.MoveToFront(el)
		return cs, nil
	}
	st, err := c.driverConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	cs := &cachedStmt{query: query, stmt: st}
	c.byText[query] = c.lru.PushFront(cs)
	if c.lru.Len() > stmtCacheSize {
		c.drop(c.lru.Back())
	}
	return cs, nil
}

// drop forgets a kept statement, closing it unless rows of it are open.
func (c *cachedConn) drop(el *list.Element) {
	cs := c.lru.Remove(el).(*cachedStmt)
	delete(c.byText, cs.query)
	if cs.busy {
		cs.dropped = true
		return
	}
	_ = cs.stmt.Close()
}

func (c *cachedConn) ctx(ctx context.Context) context.Context {
	if c.uncancelable {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// ExecContext implements driver.ExecerContext.
func (c *cachedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ctx = c.ctx(ctx)
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.driverConn.ExecContext(ctx, query, args)
	}
	return cs.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

// QueryContext implements driver.QueryerContext.
func (c *cachedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	ctx = c.ctx(ctx)
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.driverConn.QueryContext(ctx, query, args)
	}
	rows, err := cs.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	cs.busy = true
	return &cachedRows{Rows: rows, cs: cs}, nil
}

// BeginTx implements driver.ConnBeginTx.
func (c *cachedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.driverConn.BeginTx(c.ctx(ctx), opts)
}

// Close closes the kept statements, then the connection.
func (c *cachedConn) Close() error {
	var errs []error
	for el := c.lru.Front(); el != nil; el = el.Next() {
		errs = append(errs, el.Value.(*cachedStmt).stmt.Close())
	}
	c.lru.Init()
	clear(c.byText)
	return errors.Join(append(errs, c.driverConn.Close())...)
}

// cachedRows are the rows of a kept statement; closing them frees it.
type cachedRows struct {
	driver.Rows
	cs     *cachedStmt
	closed bool
}

// Close resets the statement for its next use (or closes it, if it was
// dropped meanwhile).
func (r *cachedRows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.Rows.Close()
	r.cs.busy = false
	if r.cs.dropped {
		err = errors.Join(err, r.cs.stmt.Close())
	}
	return err
}

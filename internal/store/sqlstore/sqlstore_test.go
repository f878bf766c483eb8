package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outpost-sh/outpost/internal/store"
)

// errUnique stands for a driver's unique violation.
var errUnique = errors.New("duplicate key")

// testDialect spells what differs so a test can see where it went.
var testDialect = Dialect{
	Greatest:          "BIGGER",
	NotDeleted:        "ALIVE",
	Contains:          func(col, arg string) string { return "HAS(" + col + ", " + arg + ")" },
	Before:            func(c, id string) string { return "BEFORE(" + c + ", " + id + ")" },
	IsUniqueViolation: func(err error) bool { return errors.Is(err, errUnique) },
}

func TestListSessions(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1700000000123)
	for _, tc := range []struct {
		name              string
		f                 store.SessionFilter
		count, page       string
		countArgs, pgArgs []any
	}{
		{
			name:  "no filter",
			count: "SELECT COUNT(*) FROM sessions WHERE 1 = 1",
			page:  "WHERE 1 = 1 ORDER BY created_at DESC, id DESC",
		},
		{
			name:      "every field",
			f:         store.SessionFilter{OutpostID: "o1", Status: "running", Title: "Fix BUG", BeforeCreated: at, BeforeID: "s9", Limit: 20},
			count:     "SELECT COUNT(*) FROM sessions WHERE outpost_id = $1 AND status = $2 AND HAS(title_fold, $3)",
			countArgs: []any{"o1", "running", "fix bug"},
			page:      "WHERE outpost_id = $1 AND status = $2 AND HAS(title_fold, $3) AND BEFORE($4, $5) ORDER BY created_at DESC, id DESC LIMIT 20",
			pgArgs:    []any{"o1", "running", "fix bug", at.UnixMilli(), "s9"},
		},
		{
			name:   "page only",
			f:      store.SessionFilter{BeforeCreated: at, BeforeID: "s9"},
			count:  "SELECT COUNT(*) FROM sessions WHERE 1 = 1",
			page:   "WHERE BEFORE($1, $2) ORDER BY created_at DESC, id DESC",
			pgArgs: []any{at.UnixMilli(), "s9"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := testDialect.ListSessions(tc.f)
			if q.Count != tc.count || !reflect.DeepEqual(q.CountArgs, tc.countArgs) {
				t.Errorf("count = %q %v, want %q %v", q.Count, q.CountArgs, tc.count, tc.countArgs)
			}
			if want := "SELECT " + SessionCols + " FROM sessions " + tc.page; q.Page != want || !reflect.DeepEqual(q.PageArgs, tc.pgArgs) {
				t.Errorf("page = %q %v, want %q %v", q.Page, q.PageArgs, want, tc.pgArgs)
			}
		})
	}
}

func TestListQueue(t *testing.T) {
	t.Parallel()
	q := testDialect.ListQueue(store.QueueFilter{OutpostID: "o1", Phase: "claimed", AcceptorID: "m1", AfterRev: 41, Limit: 5})
	if want := "SELECT COUNT(*) FROM queue WHERE outpost_id = $1 AND phase = $2 AND acceptor_id = $3 AND ALIVE"; q.Count != want {
		t.Errorf("count = %q, want %q", q.Count, want)
	}
	if want := []any{"o1", "claimed", "m1"}; !reflect.DeepEqual(q.CountArgs, want) {
		t.Errorf("count args = %v, want %v", q.CountArgs, want)
	}
	if want := "SELECT " + EntryCols + " FROM queue WHERE outpost_id = $1 AND phase = $2 AND acceptor_id = $3 AND rev > $4 AND ALIVE ORDER BY rev LIMIT 5"; q.Page != want {
		t.Errorf("page = %q, want %q", q.Page, want)
	}
	if want := []any{"o1", "claimed", "m1", int64(41)}; !reflect.DeepEqual(q.PageArgs, want) {
		t.Errorf("page args = %v, want %v", q.PageArgs, want)
	}

	q = testDialect.ListQueue(store.QueueFilter{IncludeDeleted: true})
	if want := "SELECT COUNT(*) FROM queue WHERE ALIVE"; q.Count != want || len(q.CountArgs) != 0 {
		t.Errorf("count = %q %v, want %q", q.Count, q.CountArgs, want)
	}
	if want := "SELECT " + EntryCols + " FROM queue WHERE rev > $1 ORDER BY rev"; q.Page != want {
		t.Errorf("tombstones included: page = %q, want %q", q.Page, want)
	}
}

func TestWhereSQLIsASnapshot(t *testing.T) {
	t.Parallel()
	var w Where
	w.And("a = " + w.Arg(1))
	cond, args := w.SQL()
	w.And("b = " + w.Arg(2))
	if cond != "a = $1" || !reflect.DeepEqual(args, []any{1}) {
		t.Fatalf("SQL() = %q %v before the later And, want %q [1]", cond, args, "a = $1")
	}
	if cond, args = w.SQL(); cond != "a = $1 AND b = $2" || !reflect.DeepEqual(args, []any{1, 2}) {
		t.Fatalf("SQL() = %q %v, want both conditions", cond, args)
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	// The indexes queue_phase_expiry of both migrations are on exactly
	// these expressions.
	for d, want := range map[string]string{
		"MAX":      "MAX(claim_deadline, COALESCE(live_until, 0))",
		"GREATEST": "GREATEST(claim_deadline, COALESCE(live_until, 0))",
	} {
		if got := (Dialect{Greatest: d}).Expiry(); got != want {
			t.Errorf("Expiry with %s = %q, want %q", d, got, want)
		}
	}
}

func TestMapErr(t *testing.T) {
	t.Parallel()
	if err := testDialect.MapErr(nil); err != nil {
		t.Errorf("MapErr(nil) = %v", err)
	}
	if err := testDialect.MapErr(fmt.Errorf("get: %w", sql.ErrNoRows)); err != store.ErrNotFound {
		t.Errorf("no rows: %v, want store.ErrNotFound", err)
	}
	err := testDialect.MapErr(fmt.Errorf("insert: %w", errUnique))
	if !errors.Is(err, store.ErrConflict) || !errors.Is(err, errUnique) {
		t.Errorf("unique violation: %v, want store.ErrConflict wrapping the driver's error", err)
	}
	other := errors.New("disk full")
	if err := testDialect.MapErr(other); err != other {
		t.Errorf("other error: %v, want it unchanged", err)
	}
}

func TestTimes(t *testing.T) {
	t.Parallel()
	local := time.Date(2026, 12, 1, 10, 0, 0, 123_456_789, time.FixedZone("X", 3600))
	ms := local.UnixMilli()
	if got := FromMS(MS(local)); !got.Equal(local.Truncate(time.Millisecond)) || got.Location() != time.UTC {
		t.Errorf("FromMS(MS(t)) = %v, want %v in UTC", got, local.Truncate(time.Millisecond))
	}
	if MS(time.Time{}) != 0 || !FromMS(0).IsZero() {
		t.Error("the zero time is not stored as 0 and read back as zero")
	}
	if NullMS(time.Time{}) != nil || NullMS(local) != ms {
		t.Errorf("NullMS = %v, %v; want nil, %d", NullMS(time.Time{}), NullMS(local), ms)
	}
	// Both drivers' ways into the nullable columns: database/sql's Scan
	// and pgx's ScanInt64.
	var null, set, pgNull, pgSet nullInt64
	if err := errors.Join(null.Scan(nil), set.Scan(ms), pgNull.ScanInt64(pgtype.Int8{}),
		pgSet.ScanInt64(pgtype.Int8{Int64: ms, Valid: true})); err != nil {
		t.Fatal(err)
	}
	for _, n := range []nullInt64{null, pgNull} {
		if !n.time().IsZero() || n.timePtr() != nil {
			t.Errorf("a NULL %+v reads as %v, %v; want the zero time and nil", n, n.time(), n.timePtr())
		}
	}
	for _, n := range []nullInt64{set, pgSet} {
		if !n.time().Equal(local.Truncate(time.Millisecond)) || n.time().Location() != time.UTC {
			t.Errorf("%+v reads as %v, want %v in UTC", n, n.time(), local.Truncate(time.Millisecond))
		}
		if p := n.timePtr(); p == nil || !p.Equal(n.time()) {
			t.Errorf("%+v reads as the pointer %v, want %v", n, p, n.time())
		}
	}
	if err := set.Scan("text"); err == nil {
		t.Error("a nullable integer column scanned text")
	}
	if BytesOrNil(nil) != nil {
		t.Error("BytesOrNil(nil) is not NULL")
	}
	if b, ok := BytesOrNil([]byte{}).([]byte); !ok || b == nil {
		t.Error("BytesOrNil of an empty value is not an empty []byte")
	}
}

func TestNullString(t *testing.T) {
	t.Parallel()
	var a, b, c, d nullString
	if err := errors.Join(a.Scan(nil), b.Scan("x"), c.Scan([]byte("y")), d.ScanText(pgtype.Text{String: "z", Valid: true})); err != nil {
		t.Fatal(err)
	}
	if a.valid || !b.valid || b.v != "x" || !c.valid || c.v != "y" || !d.valid || d.v != "z" {
		t.Errorf("scanned %+v %+v %+v %+v; want NULL, x, y, z", a, b, c, d)
	}
	if err := d.ScanText(pgtype.Text{}); err != nil || d.valid {
		t.Errorf("a NULL from pgx scanned as %+v, %v", d, err)
	}
	if err := a.Scan(int64(1)); err == nil {
		t.Error("a nullable text column scanned an integer")
	}
}

func TestLapsedClaimsSQL(t *testing.T) {
	t.Parallel()
	want := `SELECT session_id FROM queue WHERE phase = $1 AND BIGGER(claim_deadline, COALESCE(live_until, 0)) <= $2 AND ALIVE
		ORDER BY BIGGER(claim_deadline, COALESCE(live_until, 0)), session_id`
	if got := testDialect.LapsedClaimsSQL(); got != want {
		t.Errorf("LapsedClaimsSQL = %q, want %q", got, want)
	}
}

package sqlstore

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The nullable columns scan into nullInt64 and nullString, which both
// drivers fill without an allocation: database/sql through sql.Scanner,
// pgx through pgtype's Int64Scanner and TextScanner (which its codecs plan
// before any sql.Scanner).

// nullInt64 is a nullable integer column.
type nullInt64 struct {
	v     int64
	valid bool
}

// Scan implements sql.Scanner for database/sql.
func (n *nullInt64) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n = nullInt64{}
	case int64:
		*n = nullInt64{v: v, valid: true}
	default:
		return fmt.Errorf("sqlstore: a nullable integer column holds %T", src)
	}
	return nil
}

// ScanInt64 implements pgtype.Int64Scanner for pgx.
func (n *nullInt64) ScanInt64(v pgtype.Int8) error {
	*n = nullInt64{v: v.Int64, valid: v.Valid}
	return nil
}

// time reads a time stored by NullMS or PtrMS: zero when NULL.
func (n nullInt64) time() time.Time {
	if !n.valid {
		return time.Time{}
	}
	return time.UnixMilli(n.v).UTC()
}

// timePtr reads a time stored by PtrMS: nil when NULL.
func (n nullInt64) timePtr() *time.Time {
	if !n.valid {
		return nil
	}
	t := time.UnixMilli(n.v).UTC()
	return &t
}

// nullString is a nullable text column.
type nullString struct {
	v     string
	valid bool
}

// Scan implements sql.Scanner for database/sql.
func (n *nullString) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n = nullString{}
	case string:
		*n = nullString{v: v, valid: true}
	case []byte:
		*n = nullString{v: string(v), valid: true}
	default:
		return fmt.Errorf("sqlstore: a nullable text column holds %T", src)
	}
	return nil
}

// ScanText implements pgtype.TextScanner for pgx.
func (n *nullString) ScanText(v pgtype.Text) error {
	*n = nullString{v: v.String, valid: v.Valid}
	return nil
}

package server

import (
	"testing"

	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// Tests of several replicas share one PostgreSQL server (pgtest.Shared),
// each with a database of its own; Main stops it.
func TestMain(m *testing.M) { pgtest.Main(m) }

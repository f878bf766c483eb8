package postgres

import (
	"testing"

	"github.com/outpost-sh/outpost/internal/store/storetest"
)

func TestPluginBatches(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	storetest.Batches(t, plugin{s})
}

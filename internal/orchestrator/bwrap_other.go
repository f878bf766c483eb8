//go:build !linux

package orchestrator

import (
	"context"
	"fmt"
	"runtime"

	"github.com/outpost-sh/outpost/internal/sandbox"
)

// BwrapBind is an extra bind mount of every sandbox.
type BwrapBind = sandbox.Bind

// ParseBwrapBind parses a --bwrap-bind or --bwrap-ro-bind value.
func ParseBwrapBind(spec string, readOnly bool) (BwrapBind, error) {
	return sandbox.ParseBind(spec, readOnly)
}

// BwrapOptions configures NewBwrapBackend; bubblewrap exists only on Linux.
type BwrapOptions struct {
	Bwrap string
	Binds []BwrapBind
}

// BwrapBackend is the bubblewrap backend, which runs only on Linux: here
// NewBwrapBackend always fails.
type BwrapBackend struct{}

// NewBwrapBackend says that the bwrap backend needs Linux.
func NewBwrapBackend(context.Context, BwrapOptions) (*BwrapBackend, error) {
	return nil, fmt.Errorf("the bwrap backend is not supported on %s: bubblewrap sandboxes need Linux namespaces (use --backend process or docker)", runtime.GOOS)
}

func (*BwrapBackend) errUnsupported() error {
	_, err := NewBwrapBackend(context.Background(), BwrapOptions{})
	return err
}

// Provision fails: see NewBwrapBackend.
func (b *BwrapBackend) Provision(context.Context, Spec) (Machine, error) {
	return nil, b.errUnsupported()
}

// Adopt finds nothing: no bwrap machine runs here.
func (*BwrapBackend) Adopt(context.Context, Spec) (Machine, bool) { return nil, false }

// Teardown removes the workspace.
func (*BwrapBackend) Teardown(_ context.Context, s Spec) error { return removeWorkspace(s.Workspace) }

// Name returns "bwrap".
func (*BwrapBackend) Name() string { return "bwrap" }

// EnforcesNetwork reports that no network policy can be enforced here.
func (*BwrapBackend) EnforcesNetwork() error {
	return fmt.Errorf("network policies are not enforced on %s", runtime.GOOS)
}

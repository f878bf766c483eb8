//go:build !linux

package netguard

import (
	"context"
	"os/exec"

	"github.com/outpost-sh/outpost/api"
)

// Guard is a restricted session's enforcement point; there is none off
// Linux.
type Guard struct{}

// Check reports that this system cannot enforce network policies.
func Check(context.Context) error { return ErrUnsupported }

// Start fails: this system cannot enforce network policies.
func Start(context.Context, Options) (*Guard, error) { return nil, ErrUnsupported }

// Start fails.
func (g *Guard) Start(*exec.Cmd) error { return ErrUnsupported }

// NamespacePath is empty.
func (g *Guard) NamespacePath() string { return "" }

// SetPolicy fails.
func (g *Guard) SetPolicy(*api.NetworkPolicy) error { return ErrUnsupported }

// Follow does nothing.
func (g *Guard) Follow(<-chan struct{}, func() api.QueueEntry) {}

// Close does nothing.
func (g *Guard) Close() {}

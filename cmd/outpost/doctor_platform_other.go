//go:build !windows && !darwin

package main

import (
	"context"

	"github.com/outpost-sh/outpost/internal/doctor"
)

// detectPlatform has nothing to add here: Linux's prerequisites are
// doctor.MachineChecks'.
func detectPlatform(context.Context, string) doctor.Platform { return doctor.Platform{} }

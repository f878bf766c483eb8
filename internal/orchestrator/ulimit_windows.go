package orchestrator

import "github.com/docker/docker/api/types/container"

// withDefaultUlimits returns set: Docker on Windows runs Linux containers in
// a VM whose limits this process's own say nothing about.
func withDefaultUlimits(set []*container.Ulimit) []*container.Ulimit {
	return append([]*container.Ulimit{}, set...)
}

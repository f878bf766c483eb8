// Package systemd holds Outpost's systemd units and example settings
// (docs/production.md, "Running under systemd"), embedded so that
// `outpost worker install` writes the files the repository ships.
package systemd

import "embed"

// Files are the units (outpost-server.service, outpost-worker@.service,
// outpost-orchestrate@.service) and the example settings (*.yaml, *.env).
//
//go:embed *.service *.yaml *.env
var Files embed.FS

// WorkerUnit is the name of the worker's template unit.
const WorkerUnit = "outpost-worker@.service"

// Binary is the path of the outpost executable in the shipped units.
const Binary = "/usr/local/bin/outpost"
